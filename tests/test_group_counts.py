"""Group counts (problem.GroupCounts, planner/stage1_groups.py): the MIP's rows say what Problem.phase_times says
(the solvers' optimum is the brute-force optimum of the counted problem), and on a real case they raise stage 1's
optimum while staying below every plan found."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from placer.cost import CostModel
from placer.options import OptionConfig
from placer.planner import ilp
from placer.planner.assign import Assigner
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.problem import CountedGroup, FixedGroup, GroupCounts, Problem
from placer.planner.stage1 import solve_stage1
from placer.planner.stage1_groups import group_counts
from placer.planner.stage2 import place_choice
from placer.planner.symmetry import Symmetry
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT, baseline_steps
from tests.test_bound_tree import _random_problem, brute_force


def _counted(seed: int) -> tuple[Problem, Problem]:
    """A random problem (test_bound_tree's, its phase-0 average tripled) and the same with group counts on that
    average: one type open on every member when a fixed group is used, one never; a spread in phase 0; 2 slots;
    the level near the average's value."""
    plain = _random_problem(seed, tables=5)
    rng = np.random.default_rng(seed + 1)
    ids = np.arange(plain.num_options)
    avg_ids, avg = plain.load_rows[(0, "average")]
    plain.load_rows[(0, "average")] = (avg_ids, avg * 3)  # so that the average (where the counts go) often binds
    plain.fixed_groups = [FixedGroup({(0, "average"): 2e-4}, [np.asarray(g[:1]) for g in plain.groups[:3]])]
    plain.spread = {0: (ids[::4], rng.uniform(0.0, 3e-4, len(ids[::4])))}
    types = []
    for every, chosen in ((-1, ids[1::2]), (0, ids[::3])):
        loads = rng.uniform(0.1, 1.0, len(chosen)) * 1e-3
        types.append(CountedGroup(float(rng.uniform(3e-4, 1e-3)), chosen, loads, every, float(loads.sum())))
    x = np.zeros(plain.num_options)
    x[[g[0] for g in plain.groups]] = 1.0
    level = float(rng.uniform(0.5, 1.4)) * plain.load_row_value((0, "average"), x)  # 'over' costs something
    counts = GroupCounts(0, (0, "average"), 2, 0.0, level, types)
    return plain, dataclasses.replace(plain, group_counts=[counts])


@pytest.mark.parametrize("backend", ["highs", "cbc"])
@pytest.mark.parametrize("seed", [0, 3, 23, 27])  # two optima on each side of 'over', all raised
def test_the_solvers_optimum_is_the_counted_brute_force_optimum(backend, seed):
    _, counted = _counted(seed)
    best = brute_force(counted)
    got = ilp.solve(counted, backend=backend, gap=0.0, time_limit_s=30.0)
    assert got.status == "optimal"
    assert got.objective_s == pytest.approx(best, rel=1e-7)
    assert got.lower_bound_s <= best * (1 + 1e-7)


def test_counts_raise_the_optimum_of_some_random_problems():
    """Not a vacuous check above: the counts change the optimum of some of these problems, never lower it."""
    raised = 0
    for seed in range(12):
        plain, counted = _counted(seed)
        a, b = brute_force(plain), brute_force(counted)
        assert b >= a * (1 - 1e-12)
        raised += b > a * (1 + 1e-9)
    assert raised >= 3


def test_a_start_gets_the_values_phase_times_gives_it():
    """ilp._set_start's over/count values are a feasible point at the start's step time (HiGHS's cutoff is that)."""
    _, counted = _counted(5)
    start = next(list(c) for c in itertools.product(*counted.groups) if counted.fits(list(c)))
    prob, x, y = ilp._build(counted)
    ilp._set_start(counted, prob, x, y, start)
    for name, row in prob.constraints.items():
        assert row.valid(1e-9), name
    assert sum(v.varValue for v in y) / ilp.TIME_SCALE + counted.fixed_s == pytest.approx(counted.objective(start))


def test_every_plan_meets_the_count_rows_with_the_values_it_implies():
    """The rows hold for every plan (so the bound is valid), the u term included: for choices of three random
    counted problems (the type open on every GPU given loads of 0.3-1.0x the level per option), the values
    ilp._set_start derives from each choice that fits (phase times, u, over, the counts as Problem.phase_times
    takes them) meet every row of the model. Not vacuous: some choices open that type on every GPU (u = 1) with
    'over' off and more of its load than half of slots x level, where the count row's u term at half its size
    fails."""
    exercised = 0
    for seed in range(3):
        _, counted = _counted(seed)
        gc = counted.group_counts[0]
        rng = np.random.default_rng(seed)
        gc.types = [t if t.every < 0 else dataclasses.replace(
            t, loads_s=rng.uniform(0.3, 1.0, len(t.ids)) * gc.level_s) for t in gc.types]
        gc.types = [dataclasses.replace(t, most_s=float(t.loads_s.sum())) for t in gc.types]
        prob, x, y = ilp._build(counted)
        over = next(v for v in prob.variables() if v.name == "o0")
        choices = [list(c) for c in itertools.product(*counted.groups) if counted.fits(list(c))]
        for k in rng.permutation(len(choices))[:40]:
            chosen = choices[k]
            ilp._set_start(counted, prob, x, y, chosen)
            for name, row in prob.constraints.items():
                assert row.valid(1e-9), (seed, chosen, name)
            xs = np.zeros(counted.num_options)
            xs[chosen] = 1.0
            exercised += over.varValue == 0 and any(
                t.every >= 0 and counted.fixed_groups[t.every].used(xs) == 1
                and float(t.loads_s @ xs[t.ids]) > 0.5 * gc.slots * gc.level_s for t in gc.types)
    assert exercised >= 5, exercised


def test_counted_stage1_stays_below_every_plan_on_production_856():
    """production-856 @ dgx-h100-2node: the counts raise stage 1's MIP optimum (59.41 -> 59.51 ms when measured),
    and the counted bound lies below the plan stage 2 makes of the counted choice and below every baseline."""
    wl = load_workload(ROOT / "workloads" / "production-856.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), wl.dense.dtype)
    model = CostModel(topo, wl)
    ctx = Context.of(model, Symmetry.of(topo), OptionConfig())
    kinds = KindFolder(ctx).kinds()
    # a work budget: the same choice on a loaded machine (a 10 s one stopped before the rounding there)
    stage1 = solve_stage1(ctx, kinds, Budget.of_work(10_000), gap=0.0, backend="highs", threads=None)
    counts = group_counts(ctx, kinds, stage1.problem, stage1.result.chosen)
    assert counts and counts[0].types
    plain = ilp.solve(dataclasses.replace(stage1.problem, levels=[]), backend="highs", gap=0.0,
                      warm_start=stage1.result.chosen, budget=Budget(60.0))
    counted = ilp.solve(dataclasses.replace(stage1.problem, levels=[], group_counts=counts), backend="highs",
                        gap=0.0, warm_start=stage1.result.chosen, budget=Budget(60.0))
    assert plain.status == counted.status == "optimal"
    assert counted.objective_s > plain.objective_s * (1 + 1e-4)
    placed = place_choice(Assigner(ctx), stage1.problem, kinds, counted.chosen, Budget.of_work(5_000))
    placements, step = placed.placements, placed.step_s
    assert placements
    steps = {"stage 2": step + sum(model.fixed_latency_s.values())}
    steps.update(baseline_steps(topo, wl, ("greedy_size", "round_robin", "fae", "uvm")))
    for method, seconds in steps.items():
        assert counted.lower_bound_s <= seconds * (1 + 1e-9), method
