"""One memory figure (issue 52): solve's 'HBM used / usable', explain's 'HBM free' and the plot all count against
the capacity less the spec's reserve, and the reserve is shown. solve showed 75.5 of 79.6 GiB (the raw capacity)
while explain counted 153 MiB free (after the 4 GiB reserve)."""
from __future__ import annotations

import pytest

from placer.cost import CostModel
from placer.explain import explain_plan
from placer.planner.solve import SolveConfig, solve
from placer.report import make_console, memory_use, plan_summary
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from placer.units import fmt_bytes
from tests.conftest import ROOT

GiB = 2**30


@pytest.fixture(scope="module")
def v1_plan():
    wl = load_workload(ROOT / "workloads" / "mlperf-dlrm-v1.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "h100-sxm-host.yaml"), wl.dense.dtype)
    return topo, wl, solve(topo, wl, SolveConfig(method="ilp", work_limit=500))


def test_used_usable_and_free_are_one_figure(v1_plan):
    topo, wl, plan = v1_plan
    gpu = plan.predicted["devices"]["node0/gpu0"]
    assert gpu["hbm_reserve_bytes"] == 4 * GiB and plan.predicted["devices"]["node0/host"]["host_reserve_bytes"] \
        == 16 * GiB
    used, usable, kind = memory_use(gpu)
    assert kind == "HBM" and usable == gpu["hbm_capacity_bytes"] - 4 * GiB
    free = explain_plan(CostModel(topo, wl), plan, ["C1"])["tables"][0]["hbm_free_bytes"]
    assert usable - used == pytest.approx(free, abs=1.0)  # what solve shows and what explain counts agree


def test_summary_shows_usable_and_the_reserve(v1_plan):
    _topo, wl, plan = v1_plan
    console = make_console()
    with console.capture() as cap:
        plan_summary(plan, wl, console)
    text = cap.get()
    gpu = plan.predicted["devices"]["node0/gpu0"]
    assert "HBM used / usable" in text
    assert f"{fmt_bytes(gpu['hbm_used_bytes'])} / {fmt_bytes(gpu['hbm_capacity_bytes'] - 4 * GiB)}" in text
    assert "HBM 79.6 GiB - 4.0 GiB (1 GPU); host 128.0 GiB - 16.0 GiB (1 host)" in text


def test_plans_without_a_recorded_reserve_read_as_none():
    v = {"hbm_used_bytes": 1.0, "hbm_capacity_bytes": 8.0, "busy_s": {}}
    assert memory_use(v) == (1.0, 8.0, "HBM")
