"""The step's price where it replays as CUDA graphs (program/graph_price.py): device work and launches, no host
issue per op."""
from __future__ import annotations

from pathlib import Path

import pytest

from placer.cost import CostModel
from placer.plan import load_plan
from placer.program.floor import floor_step_s
from placer.program.graph_price import graph_topology, predict_graph
from placer.program.opcosts import GRAPH_KERNEL_US, KERNELS
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from placer.units import us_to_s

ROOT = Path(__file__).resolve().parent.parent
PLANS = ROOT / "validation" / "gpu_plans"
CALIBRATED = ROOT / "validation" / "results" / "gpu-2026-11-27-run3" / "calibrated.yaml"


def _case(name: str, spec: Path):
    wl = load_workload(PLANS / "workloads" / f"{name}.yaml")
    topo = Topology(load_hardware(spec, allow_implausible=True), wl.dense.dtype)
    return wl, topo, load_plan(PLANS / "plans" / name / "ilp.json")


@pytest.mark.parametrize("name", ["tiny-at-4096", "mlperf-dlrm-v1-32-at-16384"])
def test_graph_price_lies_between_the_floor_and_the_eager_price(name):
    """A graph replay pays each kernel's device time (more than the floor's none) but no host issue (less than the
    eager step); far less on a model of small kernels; one launch per graph is added."""
    wl, topo, plan = _case(name, ROOT / "hardware_specs" / "h100-pcie-host.yaml")
    eager = predict(CostModel(topo, wl), plan)["step_time_s"]
    one, two = (predict_graph(topo, wl, plan, graphs=n) for n in (1, 2))
    assert floor_step_s(topo, wl, plan) < one["step_time_s"] < eager
    if name.startswith("tiny"):
        assert one["step_time_s"] < 0.7 * eager
    launch = us_to_s(topo.spec.templates[next(iter(topo.spec.templates))].gpus.kernel_launch_us)
    assert two["step_time_s"] - one["step_time_s"] == pytest.approx(launch) == one["graph_launch_s"]
    gpu = topo.gpus[0]
    costs = graph_topology(topo).op_costs(gpu)
    assert costs.fixed("lookup") == pytest.approx(us_to_s(GRAPH_KERNEL_US) * KERNELS["lookup"])
    assert costs.fixed("embedding_op") == costs.fixed("dense_op") == 0.0


def test_calibrated_graph_costs_replace_the_eager_fixed_costs():
    """A calibrated GPU's tight-loop fixed costs (host-bound) are not a graph's: graph_fixed_us where measured,
    graph_kernel_us per kernel elsewhere; the host issue per op is gone; rates stay the calibrated ones."""
    wl, topo, plan = _case("tiny-at-4096", CALIBRATED)
    spec = topo.spec
    name = next(n for n, t in spec.templates.items() if t.gpus.op_costs is not None)
    gpus = spec.templates[name].gpus
    assert gpus.op_costs.fixed_us.get("embedding_op", 0) > 0 or gpus.op_costs.fixed_us.get("dense_op", 0) > 0
    measured = gpus.model_copy(update={"graph_kernel_us": 1.0, "op_costs": gpus.op_costs.model_copy(
        update={"graph_fixed_us": {"lookup": 7.0, "embedding_op": 3.0}})})
    topo2 = Topology(spec.model_copy(update={"templates": {**spec.templates, name: spec.templates[name].model_copy(
        update={"gpus": measured})}}), wl.dense.dtype)
    gpu = topo2.gpus[0]
    costs = graph_topology(topo2).op_costs(gpu)
    assert costs.fixed("lookup") == pytest.approx(us_to_s(7.0))
    assert costs.fixed("sort") == pytest.approx(us_to_s(1.0) * KERNELS["sort"])
    assert costs.fixed("embedding_op") == 0.0
    assert costs.gather["fp32"](128) == topo2.op_costs(gpu).gather["fp32"](128)
    assert predict_graph(topo2, wl, plan)["step_time_s"] < predict(CostModel(topo2, wl), plan)["step_time_s"]


def test_fp16_rows_are_priced_per_row_not_per_byte_unless_measured():
    """Issue 48 item 5: an fp16 row's gather and update cost an fp32 row's time of the same width where the spec
    does not measure fp16 (the runner delivered no per-row speed-up on an H100), as measured where it does; so with
    HBM to spare the ILP keeps every table of tiny@4096 at fp32 on the datasheet spec."""
    from placer.planner.solve import SolveConfig, solve

    wl, topo, _plan = _case("tiny-at-4096", ROOT / "hardware_specs" / "h100-pcie-host.yaml")
    costs = topo.op_costs(topo.gpus[0])
    for w in (16, 64):
        assert costs.gather["fp16"](2 * w) == pytest.approx(costs.gather["fp32"](4 * w) / 2)
        t32 = costs.update_s("adagrad", "fp32", 8 * w, 1000, False, width=w)
        assert costs.update_s("adagrad", "fp16", 6 * w, 1000, False, width=w) == pytest.approx(t32)
        # host rows: the link still carries the fp16 row's own bytes
        assert costs.update_s("adagrad", "fp16", 6 * w, 1000, True, width=w) < costs.update_s(
            "adagrad", "fp32", 8 * w, 1000, True, width=w)
    calibrated = Topology(load_hardware(CALIBRATED, allow_implausible=True), wl.dense.dtype)
    measured = calibrated.op_costs(calibrated.gpus[0])
    assert measured.fp16_updates_measured and measured.update_s("adagrad", "fp16", 96, 1000, False, width=16) == \
        pytest.approx(1000 * 96 / measured.update["adagrad"]["fp16"](96))
    plan = solve(topo, wl, SolveConfig(method="ilp", time_limit_s=20))
    assert {p.precision for p in plan.placements} == {"fp32"}
