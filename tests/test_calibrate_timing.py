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
    from placer.calibrate.record import dense_step_s

    assert dense_step_s(3e-3, 1e-3, asynchronous=True) == 3e-3
    assert dense_step_s(1e-3, 5e-3, asynchronous=True) == 5e-3
    assert dense_step_s(3e-3, 1e-3, asynchronous=False) == 4e-3
