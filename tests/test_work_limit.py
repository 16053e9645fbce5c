"""A work limit (planner/budget.py, effort.py, ``placer solve --work-limit``): the clock moves only by charged
work, so the same inputs give the same plan and bound however fast the machine runs or however Python hashes
strings. Timing itself is a benchmark (validation/); these check that nothing in the search reads the clock."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pulp
import pytest

from placer.errors import SpecError
from placer.planner import effort, ilp
from placer.planner.budget import WORK_UNIT_S, Budget
from placer.planner.solve import SolveConfig, solve
from tests.conftest import ROOT, shipped_pair

HW_DIR, WL_DIR = ROOT / "hardware_specs", ROOT / "workloads"
#: the CLI, as the README runs it (an installed console script; ``python -m placer`` has no __main__)
CLI = [sys.executable, "-c", "import sys; from placer.cli import main; sys.exit(main())"]


def _essence(plan) -> tuple:
    """What must not vary: the placements, the step and bound, the work used."""
    s = plan.solver
    return (tuple(p.model_dump_json() for p in plan.placements), s.objective_step_time_s,
            s.lower_bound_step_time_s, s.status, s.work_used, tuple(sorted((s.stage_work or {}).items())),
            tuple(s.ran_out or ()))


def test_a_work_budget_moves_only_by_what_is_charged():
    b = Budget.of_work(100)  # 100 units = 0.1 nominal s
    assert b.deterministic and b.seconds == pytest.approx(100 * WORK_UNIT_S)
    time.sleep(0.01)
    assert b.elapsed() == 0.0 and not b.expired()
    child = b.child(0.05)
    child.charge(0.03)
    assert not child.expired()
    child.charge(0.03)
    assert child.expired()  # 0.06 of the child's 0.05
    assert b.elapsed() == pytest.approx(0.06) and not b.expired()  # the child's work is the parent's
    b.charge(0.05)
    assert b.expired()
    with b.stage("x"):
        b.charge(0.01)
    assert b.stage_work["x"] == pytest.approx(0.01) and b.stages["x"] >= 0.0


def test_a_time_budget_counts_charges_without_moving_its_clock():
    b = Budget(10.0)
    with b.stage("x"):
        b.child(5.0).charge(100.0)
    assert not b.deterministic and not b.expired() and b.left() > 9.0
    assert b.counted() == pytest.approx(100.0) and b.stage_work == {"x": pytest.approx(100.0)}
    assert b.ran_out == {}


def test_the_single_stage_search_leaves_the_limit_room_for_what_follows():
    """single_stage.search_s: under a time limit, the branch and bound gets what the limit leaves less the pricing
    after it (never less than the schedule's single_search_min_s); under a work limit, what is left of it."""
    from placer.cost import CostModel
    from placer.planner.schedule import SCHEDULE
    from placer.planner.single_stage import search_s as _search_s
    from placer.planner.solve_run import after_solve_s
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(WL_DIR / "mlperf-dlrm-v2.yaml")
    model = CostModel(Topology(load_hardware(HW_DIR / "dgx-h100.yaml"), wl.dense.dtype), wl)
    started = time.perf_counter() - 10.0  # the options and baselines took 10 s of a 30 s limit
    assert _search_s(model, Budget(30.0, start=started)) == pytest.approx(20.0 - after_solve_s(model), abs=0.5)
    assert _search_s(model, Budget(5.0, start=started)) == SCHEDULE.single_search_min_s
    work = Budget.of_work(30_000)
    work.charge(10.0)
    assert _search_s(model, work) == pytest.approx(work.seconds - 10.0)


def test_a_spent_budget_is_noted_in_the_stage_that_found_it():
    b = Budget(10.0)
    with b.stage("stage 1"):
        assert b.child(0.0).expired()  # a child with nothing left, found spent inside stage 1
        with b.stage("stage 2"):
            assert b.child(-1.0).left() < 0
            assert b.child(5.0).left() > 0  # not spent: not noted
    spent = Budget.of_work(1)
    spent.charge(1.0)
    assert spent.expired()  # outside any stage
    assert b.ran_out == {"stage 1": 1, "stage 2": 1} and spent.ran_out == {"solve": 1}


def test_solver_limits_are_iterations_and_nodes_in_a_work_budget():
    work, wall = Budget.of_work(1000), Budget(5.0)
    assert effort.lp_limits(wall, 5.0, 1000) == {"time_limit": 5.0}
    lim = effort.lp_limits(work, 1.0, 1000)
    assert set(lim) == {"simplex_iteration_limit", "ipm_iteration_limit"} and lim["simplex_iteration_limit"] >= 1
    assert effort.cbc_limits(work, 1.0, 1000)["timeLimit"] is None
    assert effort.cbc_limits(work, 1.0, 1000)["maxNodes"] >= 1
    assert effort.cbc_limits(wall, 0.2, 1000) == {"timeLimit": 1.0, "maxNodes": None}
    assert effort.mip_limits(work, 0.0, 10**9) == {"mip_max_nodes": 1}  # never zero: the solver needs one node
    log = "Enumerated nodes:               22\nTotal iterations:               700\n"
    assert effort.cbc_work(log, 1000) > effort.cbc_work("", 1000) > 0


class _FastClock:
    """time.perf_counter running ``factor`` times as fast: a machine that much slower, as the planner sees it."""

    def __init__(self, factor: float):
        self.factor, self.t0 = factor, time.perf_counter()
        self.real = time.perf_counter

    def __call__(self) -> float:
        return self.t0 + (self.real() - self.t0) * self.factor


@pytest.mark.parametrize("hw,wl,units", [("pcie-4gpu-workstation", "tiny", 3000),  # single-stage ILP
                                         ("dgx-h100-2node", "mlperf-dlrm-v2", 8000)])  # two stages
def test_the_same_plan_on_a_slower_machine(monkeypatch, hw, wl, units):
    topo, w = shipped_pair(hw, wl)
    first = solve(topo, w, SolveConfig(work_limit=units))
    assert first.solver.work_limit == units and 0 < first.solver.work_used
    monkeypatch.setattr(time, "perf_counter", _FastClock(20.0))  # every wall reading 20x later
    wall = Budget(1.0)
    time.sleep(0.06)
    assert wall.expired()  # the stand-in reaches every wall-time budget: a time limit would search less here
    again = solve(topo, w, SolveConfig(work_limit=units))
    assert _essence(again) == _essence(first)


def test_a_time_limited_plan_says_which_stages_the_clock_cut():
    topo, w = shipped_pair("pcie-4gpu-workstation", "tiny")
    done = solve(topo, w, SolveConfig(time_limit_s=60))  # proven optimal long before the limit
    assert done.solver.status == "optimal" and done.solver.ran_out == [] and done.solver.work_used > 0
    assert done.solver.work_limit is None and "cut" not in done.solver.note
    topo, w = shipped_pair("dgx-h100-2node", "mlperf-dlrm-v2")
    short = solve(topo, w, SolveConfig(time_limit_s=10))  # two stages: stage 1's CBC pass needs 30 s left
    assert "stage 1" in short.solver.ran_out and set(short.solver.ran_out) <= set(short.solver.stage_times_s)
    assert f"time limit cut: {', '.join(short.solver.ran_out)}" in short.solver.note
    assert short.solver.stage_work and set(short.solver.stage_work) == set(short.solver.stage_times_s)


def test_the_same_plan_whatever_the_hash_seed(tmp_path):
    out = []
    for seed in ("1", "2"):
        path = tmp_path / f"plan{seed}.json"
        run = subprocess.run(CLI + ["solve", str(HW_DIR / "dgx-h100-2node.yaml"),
                              str(WL_DIR / "mlperf-dlrm-v2.yaml"), "-q", "--work-limit", "8000", "-o", str(path)],
                             capture_output=True, text=True, env={**_env(), "PYTHONHASHSEED": seed}, timeout=600)
        assert run.returncode == 0, run.stderr
        assert "work " in run.stdout and "units (deterministic)" in run.stdout
        plan = json.loads(path.read_text())
        out.append((plan["placements"], plan["solver"]["lower_bound_step_time_s"], plan["solver"]["work_used"]))
    assert out[0] == out[1]


def _env() -> dict:
    import os

    return dict(os.environ)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "1e12", "lots"])
def test_a_bad_work_limit_exits_2_naming_the_flag(value):
    run = subprocess.run(CLI + ["solve", str(HW_DIR / "pcie-4gpu-workstation.yaml"),
                          str(WL_DIR / "tiny.yaml"), "-q", "--work-limit", value], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 2 and "--work-limit" in run.stderr and "Traceback" not in run.stderr


def test_solve_config_checks_the_work_limit():
    with pytest.raises(SpecError, match="work limit"):
        SolveConfig(work_limit=0)
    with pytest.raises(SpecError, match="work limit"):
        SolveConfig(work_limit=float("inf"))


def _knapsack() -> tuple[pulp.LpProblem, list]:
    """A 40-item, 5-constraint knapsack that CBC and HiGHS do not close at the root."""
    rng = np.random.default_rng(0)
    w, v = rng.integers(10, 100, (5, 40)), rng.integers(10, 100, 40)
    prob = pulp.LpProblem("knapsack", pulp.LpMaximize)
    x = [pulp.LpVariable(f"x{i}", cat="Binary") for i in range(40)]
    prob += pulp.lpSum(int(v[i]) * x[i] for i in range(40))
    for j in range(5):
        prob += pulp.lpSum(int(w[j, i]) * x[i] for i in range(40)) <= int(w[j].sum() // 2)
    return prob, x


@pytest.mark.parametrize("backend", ["cbc", "highs"])
def test_a_mip_stopped_by_its_node_limit_keeps_its_solution_and_is_noted(backend):
    prob, x = _knapsack()
    spent = Budget.of_work(0.001)  # one node
    with spent.stage("tie-break"):
        ilp.run_mip(prob, backend, spent, 1e-6)  # HiGHS's node-limit status once raised KeyError inside PuLP
    assert spent.ran_out == {"tie-break": 1} and prob.sol_status == pulp.LpSolutionIntegerFeasible
    assert all(xi.varValue in (0.0, 1.0) for xi in x)
    prob, _ = _knapsack()
    ample = Budget(60.0)
    ilp.run_mip(prob, backend, ample, 30.0)
    assert ample.ran_out == {} and prob.sol_status == pulp.LpSolutionOptimal
