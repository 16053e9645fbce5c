"""placer calibrate on CPU: writes a spec that placer check accepts and the planner plans on."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from placer.calibrate import Calibration, Measurement, to_yaml
from placer.cli import main
from placer.planner.solve import SolveConfig, solve
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent
NUMBER_LINE = re.compile(r"^\s*-?\s*[A-Za-z_0-9]+:\s*-?[0-9.]+(e-?[0-9]+)?\s*(#.*)?$")


@pytest.fixture(scope="module")
def quick_spec(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "local.yaml"
    threads = torch.get_num_threads()
    try:
        code = main(["calibrate", "--device", "cpu", "--quick", "-o", str(out), "--threads", "1", "--json"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return out


def test_quick_calibration_writes_a_spec_check_accepts(quick_spec, capsys):
    assert main(["check", str(quick_spec)]) == 0
    assert "ok" in capsys.readouterr().out


def test_every_number_has_a_source_comment(quick_spec):
    text = quick_spec.read_text()
    assert text.startswith("# Hardware spec measured by `placer calibrate --quick`")
    lines = [ln for ln in text.splitlines() if NUMBER_LINE.match(ln) and not ln.lstrip().startswith("#")]
    assert len(lines) >= 18
    for ln in lines:
        if ln.strip().startswith(("schema_version", "count: 1")) and "#" not in ln:
            continue  # the schema version and the node count are not measurements
        assert "# placer calibrate " in ln and " torch " in ln, ln


def test_the_planner_plans_on_the_calibrated_spec(quick_spec):
    hw = load_hardware(quick_spec)
    g = hw.templates["local"].gpus
    assert g.model.startswith("CPU") and 0 < g.hbm_gather_efficiency <= 1 and 0 < g.host_read_efficiency <= 1
    assert g.peak_TFLOPs["fp32"] > 0 and 0 < g.compute_efficiency <= 1 and g.kernel_launch_us > 0
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    plan = solve(Topology(hw, wl.dense.dtype), wl, SolveConfig(time_limit_s=10))
    assert plan.predicted["step_time_s"] > 0 and len(plan.placements) == len(wl.tables)


def test_quick_calibration_is_quick(tmp_path, capsys):
    out = tmp_path / "x.yaml"
    threads = torch.get_num_threads()
    try:
        assert main(["calibrate", "--device", "cpu", "--quick", "-o", str(out), "--json", "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    data = json.loads(capsys.readouterr().out)
    assert data["wall_s"] < 30
    assert data["host_read_mechanism"] == "cpu"
    assert data["values"]["hbm_bw_GBps"]["value"] > 0


def test_yaml_for_several_gpus_validates(tmp_path):
    cal = Calibration(device=torch.device("cuda", 0), device_name="Fake GPU", torch_version="x", date="2026-01-01",
                      quick=False, host_read_mechanism="uva")
    for k, v in {"hbm_GiB": 80, "hbm_bw_GBps": 3000, "hbm_gather_efficiency": 0.4, "hbm_reserve_GiB": 3,
                 "compute_efficiency": 0.6, "kernel_launch_us": 6, "host_read_efficiency": 0.7, "dram_GiB": 128,
                 "dram_bw_GBps": 90, "dram_reserve_GiB": 12.8, "cpu_cores": 16, "cpu_gather_GBps": 6,
                 "cpu_peak_TFLOPs": 1.2, "link_bw_GBps": 55, "link_efficiency": 0.97, "link_latency_us": 9}.items():
        cal.set(k, v, "test")
    cal.peaks = {"fp32": Measurement(51, "t"), "tf32": Measurement(370, "t"), "bf16": Measurement(700, "t")}
    p = tmp_path / "gpu.yaml"
    p.write_text(to_yaml(cal, name="fake", gpus=4))
    hw = load_hardware(p)
    topo = Topology(hw)
    assert len(topo.gpus) == 4 and hw.templates["local"].gpus.peak_TFLOPs["bf16"] == 700


def test_calibrate_rejects_bad_arguments(tmp_path):
    assert main(["calibrate", "--device", "cpu", "-o", str(tmp_path / "x.yaml"), "--gpus", "0"]) == 2
    assert main(["calibrate", "--device", "tpu", "-o", str(tmp_path / "x.yaml")]) == 2
