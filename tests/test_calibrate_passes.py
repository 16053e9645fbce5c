"""placer calibrate --passes K (calibrate/passes.py, the GPU campaign issue's item 7): every benchmark timed in K
whole passes, each spec number the median of its passes with their spread in its comment, one disturbed pass
rejected, the spread over all numbers in the header. Built on synthetic calibrations: no timing here."""
from __future__ import annotations

import copy

import pytest

from placer.calibrate import passes as cal_passes
from placer.calibrate.passes import combine, spread
from placer.calibrate.record import Sample
from placer.cli import main
from placer.specs import load_hardware
from tests.test_calibrate import _fake_gpu_calibration


def _scaled(factor: float, seconds: float = 1e-3):
    """The fake calibration with every number times ``factor`` and one sample taking ``seconds``."""
    cal = _fake_gpu_calibration()
    for _, item in cal_passes._numbers(cal).items():
        item.value *= factor
    cal.samples = [Sample("fixed", {"kind": "copy"}, seconds, "a tiny copy", defines=("fixed_us.copy",)),
                   Sample("fixed", {"kind": "view"}, 2 * seconds, "a view (check)")]
    cal.wall_s = 10.0
    return cal


def test_each_number_is_the_median_of_its_passes_and_says_its_spread():
    base = _fake_gpu_calibration()
    got = combine([_scaled(1.0, 1e-3), _scaled(1.2, 3e-3), _scaled(0.9, 2e-3)])
    want = base.device_costs.gather_GBps["fp32"][16].value
    assert got.device_costs.gather_GBps["fp32"][16].value == pytest.approx(want)
    assert got.host_costs.fixed_us["copy"].value == pytest.approx(base.host_costs.fixed_us["copy"].value)
    assert got.values["hbm_bw_GBps"].value == pytest.approx(3000) and got.peaks["bf16"].value == pytest.approx(700)
    how = got.device_costs.stream_GBps[2**16].how
    assert "median of 3 passes (spread 30.0%" in how
    assert got.samples[0].seconds == pytest.approx(2e-3) and got.samples[1].seconds == pytest.approx(4e-3)
    assert not got.samples[0].exact and got.samples[1].exact  # a defining sample's median is not its number's
    assert got.wall_s == pytest.approx(30.0)
    note = got.notes[-1]
    assert note.startswith("3 passes") and "30.0%" in note and "over 10%" in note and "widest" in note


def test_one_disturbed_pass_changes_nothing():
    got = combine([_scaled(1.0), _scaled(1.02), _scaled(4.0)])  # a pass on a busy machine
    assert got.device_costs.fixed_us["lookup"].value == pytest.approx(5.0 * 1.02)


def test_one_pass_is_kept_as_it_is_and_spread_of_few_values():
    one = _scaled(1.0)
    assert combine([one]) is one and "passes" not in one.device_costs.fixed_us["lookup"].how
    assert spread([2.0]) == 0 and spread([1.0, 1.1, 0.9]) == pytest.approx(0.2) and spread([0.0, 0.0]) == 0


def test_passes_that_timed_other_samples_keep_the_first_pass_samples():
    a, b = _scaled(1.0), _scaled(1.0, 5e-3)
    b.samples = b.samples[:1]
    got = combine([a, b])
    assert got.samples[0].seconds == pytest.approx(1e-3)
    assert any("different samples" in n for n in got.notes)


@pytest.mark.parametrize("argv,calls", [(["--passes", "3"], 3), (["--quick"], 1), ([], 3), (["--passes", "1"], 1)])
def test_the_command_runs_the_passes_and_writes_their_medians(tmp_path, monkeypatch, argv, calls):
    factors = iter([1.0, 1.5, 0.98, 1.0])
    made = []

    def fake(device, quick=False, progress=None, workloads=(), gpus=1):
        cal = _scaled(next(factors))
        made.append(cal)
        return cal

    monkeypatch.setattr("placer.calibrate.calibrate", fake)
    out = tmp_path / "spec.yaml"
    assert main(["calibrate", "--device", "cpu", "-o", str(out), "--json", *argv]) == 0
    assert len(made) == calls
    text = out.read_text()
    assert ("median of 3 passes" in text) == (calls == 3)
    oc = load_hardware(out).templates["local"].gpus.op_costs
    assert oc.gather_GBps["fp32"][16] == pytest.approx(copy.deepcopy(_fake_gpu_calibration())
                                                       .device_costs.gather_GBps["fp32"][16].value)


def test_a_bad_pass_count_exits_2(tmp_path, capsys):
    assert main(["calibrate", "--device", "cpu", "-o", str(tmp_path / "x.yaml"), "--passes", "0"]) == 2
    assert "--passes" in capsys.readouterr().err
