"""The physics floor of a plan (program/floor.py): the step at datasheet rates with no fixed cost per GPU kernel."""
from __future__ import annotations

from pathlib import Path

import pytest

from placer.cost import CostModel
from placer.plan import load_plan
from placer.program.floor import floor_step_s, floor_topology
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent
PLANS = ROOT / "validation" / "gpu_plans"
CALIBRATED = ROOT / "validation" / "results" / "gpu-2026-11-27-run3" / "calibrated.yaml"


@pytest.mark.parametrize("name", ["tiny-at-4096", "mlperf-dlrm-v1-32-at-16384"])
def test_floor_lies_below_the_prediction_and_ignores_calibration(name):
    """Below the datasheet prediction (which pays every kernel's launch), far below it on a model of small kernels,
    close to it where bytes dominate; a calibrated spec of the same GPU gives the same floor (its op costs left
    out), and the floor's machine has no fixed cost per GPU kernel."""
    wl = load_workload(PLANS / "workloads" / f"{name}.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "h100-pcie-host.yaml"), wl.dense.dtype)
    plan = load_plan(PLANS / "plans" / name / "ilp.json")
    predicted = predict(CostModel(topo, wl), plan)["step_time_s"]
    floor = floor_step_s(topo, wl, plan)
    assert 0 < floor < predicted
    if name.startswith("tiny"):
        assert floor < 0.2 * predicted
    else:
        assert floor > 0.8 * predicted
    gpu = topo.gpus[0]
    assert floor_topology(topo).op_costs(gpu).fixed("lookup") == 0.0 < topo.op_costs(gpu).fixed("lookup")
    calibrated = Topology(load_hardware(CALIBRATED, allow_implausible=True), wl.dense.dtype)
    spec = calibrated.spec
    assert any(t.gpus.op_costs is not None for t in spec.templates.values())
    plain = spec.model_copy(update={"templates": {n: t.model_copy(update={"gpus": t.gpus.model_copy(
        update={"op_costs": None})}) for n, t in spec.templates.items()}})
    assert floor_step_s(calibrated, wl, plan) == pytest.approx(
        floor_step_s(Topology(plain, wl.dense.dtype), wl, plan), rel=1e-12)
    assert predict(CostModel(calibrated, wl), plan)["step_time_s"] != pytest.approx(
        predict(CostModel(Topology(plain, wl.dense.dtype), wl), plan)["step_time_s"], rel=1e-3)
