"""placer.calibrate.timing.bench: a disturbed benchmark is timed again."""
import time

import torch

from placer.calibrate import timing
from placer.calibrate.record import Calibration

CPU = torch.device("cpu")


def test_a_benchmark_stalled_in_most_repeats_is_timed_again_and_the_quiet_median_kept():
    calls = []

    def fn(i):  # 1 ms (steady: sub-microsecond calls have noisy ratios), 30 ms when stalled
        calls.append(i)
        stalled = len(calls) <= 1 + 5 and i != 0  # warm-up steady, then 4 of the first 5 repeats stall
        time.sleep(0.03 if stalled else 0.001)

    t = timing.bench(fn, CPU, reps=5)
    assert t < 0.01  # the second pass's median, not the stalled 30 ms
    assert len(calls) == 1 + 5 + 5


def test_a_steady_benchmark_is_timed_once():
    calls = []
    timing.bench(lambda i: (calls.append(i), time.sleep(0.001)), CPU, reps=7)
    assert len(calls) == 1 + 7


def test_a_warning_goes_to_stderr_and_into_the_notes(capsys):
    cal = Calibration(device=CPU, device_name="cpu", torch_version="x", date="2026-11-27", quick=True)
    cal.warn("the host's copies were disturbed")
    assert "warning: the host's copies were disturbed" in capsys.readouterr().err
    assert cal.all_notes[0] == "WARNING: the host's copies were disturbed"


def test_a_gpu_dense_step_lasts_the_longer_of_issuing_and_work_a_cpu_the_sum():
    from placer.program.dense import dense_step_s

    assert dense_step_s(3e-3, 1e-3, asynchronous=True) == 3e-3
    assert dense_step_s(1e-3, 5e-3, asynchronous=True) == 5e-3
    assert dense_step_s(3e-3, 1e-3, asynchronous=False) == 4e-3


def test_an_op_timed_near_its_fixed_cost_is_timed_again_larger():
    from types import SimpleNamespace

    from placer.calibrate import benches

    bench_ = SimpleNamespace(s=SimpleNamespace(pool_cap_bytes=2**30))
    seen = []

    def measure(n):  # 100 us fixed + 1 ns per item
        seen.append(n)
        return 100e-6 + n * 1e-9, f"at {n}"

    n, t, extra = benches.OpBench.conditioned(bench_, 2**14, 100e-6, measure, 16)
    assert seen == [2**14, 2**16, 2**18] and n == 2**18 and extra == "at 262144"  # 116 us, 166 us, 362 us >= 300
    seen.clear()
    assert benches.OpBench.conditioned(bench_, 2**20, 100e-6, measure, 16)[0] == 2**20 and seen == [2**20]
    seen.clear()  # the pool's cap and n_max stop the growth
    assert benches.OpBench.conditioned(bench_, 2**14, 100e-6, measure, 16, n_max=2**15)[0] == 2**14
    small = SimpleNamespace(s=SimpleNamespace(pool_cap_bytes=2**20))
    assert benches.OpBench.conditioned(small, 2**14, 100e-6, measure, 16)[0] == 2**16
