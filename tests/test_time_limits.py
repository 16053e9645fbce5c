"""A solve under a time limit ends within it: the two-stage solve takes the baselines priced by the end of its
stages and does not wait for the rest (noted as cut by the limit); under a work limit it waits for all of them."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from placer.planner import solve as solve_module
from placer.planner.baselines import BASELINES
from placer.planner.solve import BASELINE_ORDER, SolveConfig, solve
from placer.specs.hardware import load_hardware
from placer.specs.workload import load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent


def test_every_baseline_is_priced_in_the_order():
    assert sorted(BASELINE_ORDER) == sorted(BASELINES)


def _one_then_stuck(model, seed):
    """The real first baseline, then one that takes ten minutes."""
    yield next(iter(_REAL(model, seed)))
    time.sleep(600)


_REAL = solve_module._priced_baselines


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the baselines' child is forked (Linux only)")
def test_two_stage_solve_does_not_wait_past_its_limit_for_the_baselines(monkeypatch):
    monkeypatch.setattr(solve_module, "_priced_baselines", _one_then_stuck)
    workload = load_workload(ROOT / "workloads" / "tiny.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), workload.dense.dtype)
    t0 = time.perf_counter()
    plan = solve(topo, workload, SolveConfig(time_limit_s=10))
    assert time.perf_counter() - t0 < 12  # the plan priced and its what-ifs too
    assert "two-stage" in plan.solver.backend and plan.solver.wall_s < 10
    assert "baselines" in plan.solver.ran_out and "baselines" in plan.solver.note


def _all_slowly(model, seed):
    """Every real baseline, the last after 8 s."""
    items = list(_REAL(model, seed))
    yield from items[:-1]
    time.sleep(8)
    yield items[-1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the baselines' child is forked (Linux only)")
def test_work_limited_solve_waits_for_every_baseline(monkeypatch):
    """Under a work limit the plan must not depend on how far the child got: it waits for all of them."""
    monkeypatch.setattr(solve_module, "_priced_baselines", _all_slowly)
    workload = load_workload(ROOT / "workloads" / "tiny.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), workload.dense.dtype)
    plan = solve(topo, workload, SolveConfig(work_limit=2000))
    assert "two-stage" in plan.solver.backend and "baselines" not in plan.solver.ran_out
    assert plan.solver.wall_s >= 8.0
