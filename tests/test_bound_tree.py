"""The HiGHS relaxation (planner/lp.py) and branch and bound on the bound (planner/bound_tree.py): the same LP as
the PuLP model, and a tree bound that never passes the true optimum while it rises above the root's."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placer.planner import ilp
from placer.planner.bound_tree import BoundTree
from placer.planner.budget import Budget
from placer.planner.lp import Relaxation
from placer.planner.problem import CountRow, Problem
from placer.planner.stage1 import peak_levels
from placer.planner.types import RowKey, RowKind


def random_groups(rng: np.random.Generator, tables: int) -> list[list[int]]:
    """Option ids numbered from 0, 2-3 options per table."""
    groups, oid = [], 0
    for _ in range(tables):
        n = int(rng.integers(2, 4))
        groups.append(list(range(oid, oid + n)))
        oid += n
    return groups


def _random_problem(seed: int, tables: int = 5) -> Problem:
    """Tables with 2-3 options: per-table peaks in phase 0 (as stage 1 writes them), a class average in phase 0,
    a link in phase 1, one memory."""
    rng = np.random.default_rng(seed)
    groups = random_groups(rng, tables)
    oid = groups[-1][-1] + 1
    load_rows = {}
    for ti, g in enumerate(groups):
        load_rows[(0, RowKey(RowKind.TABLE, ti))] = (np.asarray(g), rng.uniform(0.1, 5.0, len(g)) * 1e-3)
    ids = np.arange(oid)
    load_rows[(0, "average")] = (ids, rng.uniform(0.0, 1.0, oid) * 1e-3)
    load_rows[(1, "link")] = (ids, rng.uniform(0.0, 2.0, oid) * 1e-3)
    mem = rng.uniform(1.0, 3.0, oid) * 2**30
    return Problem(groups=groups, num_phases=2, load_rows=load_rows, load_base={(1, "link"): 1e-4},
                   mem_rows={"hbm": (ids, mem)},
                   mem_capacity={"hbm": float(sum(mem[g].min() for g in groups)) * 1.3}, fixed_s=2e-5)


def brute_force(problem: Problem) -> float:
    return min(problem.objective(list(c)) for c in itertools.product(*problem.groups) if problem.fits(list(c)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_highs_relaxation_is_the_pulp_relaxation(seed):
    """Same rows (levels and pigeonhole counts included), same optimum as ilp.relaxation's PuLP model."""
    problem = _random_problem(seed)
    problem.levels = peak_levels(problem, count=4)
    ids = np.arange(problem.num_options)
    problem.counts = [CountRow(1, 1e-4, 1e-3, 2, ids[::2], np.ones(len(ids[::2]), dtype=np.int64),
                               ids[1::3], np.full(len(ids[1::3]), 1e-4))]
    _, expected = ilp.relaxation(problem)
    values, bound = Relaxation(problem).solve(10.0)
    assert bound == pytest.approx(expected, rel=1e-6)
    assert np.allclose([values[g].sum() for g in problem.groups], 1.0)


def test_relaxation_counts_added_later_equal_counts_built_in():
    problem = _random_problem(7)
    ids = np.arange(problem.num_options)
    row = CountRow(1, 1e-4, 1.5e-3, 2, ids, np.ones(len(ids), dtype=np.int64), ids[:0], np.zeros(0))
    later = Relaxation(problem)
    later.solve(10.0)
    problem.counts = [row]
    later.add_counts([row])
    assert later.solve(10.0)[1] == pytest.approx(Relaxation(problem).solve(10.0)[1], rel=1e-9)


def test_relaxation_bounds_and_infeasibility():
    """Forcing an option raises the bound to at least that option's peak; a phase box below every option of a
    table is infeasible (inf), not an error."""
    problem = _random_problem(3, tables=3)
    lp = Relaxation(problem)
    _, root = lp.solve(10.0)
    g = problem.groups[0]
    peaks = problem.table_peaks()
    worst = g[int(np.argmax(peaks[0, g]))]
    lower = np.zeros(problem.num_options)
    lower[worst] = 1.0
    _, forced = lp.solve(10.0, lower=lower)
    assert forced >= max(root, peaks[0, worst] + problem.fixed_s) - 1e-12
    box = (np.zeros(2), np.array([peaks[0, g].min() * 0.5, np.inf]))
    assert lp.solve(10.0, phase_box=box) == (None, float("inf"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.02, 0.1]))
def test_tree_bound_lies_between_the_relaxation_and_the_optimum(seed, gap):
    """Every split keeps every integer plan in some leaf, so the tree's bound never passes the brute-force
    optimum, also where it leaves out leaves within ``gap`` of its incumbent; it never falls below the root
    relaxation; a leaf it reports is a real choice with its objective."""
    problem = _random_problem(seed)
    problem.levels = peak_levels(problem, count=4)
    best = brute_force(problem)
    _, root = Relaxation(problem).solve(10.0)
    result = BoundTree(problem).run(incumbent_s=best * 1.02, budget=Budget(20.0), gap=gap)
    assert root - 1e-12 <= result.bound_s <= best * (1 + 1e-9)
    if result.chosen is not None:
        assert problem.fits(result.chosen)
        assert result.objective_s == pytest.approx(problem.objective(result.chosen))
        assert result.objective_s >= best * (1 - 1e-9)


def test_tree_closes_small_problems():
    """With time to spare the tree proves the optimum of a small problem (bound = optimum, the leaf found)."""
    problem = _random_problem(11, tables=4)
    problem.levels = peak_levels(problem, count=4)
    best = brute_force(problem)
    _, root = Relaxation(problem).solve(10.0)
    assert root < best * 0.9  # a real gap to close (6.65 vs 8.45 ms)
    result = BoundTree(problem, candidates=4).run(incumbent_s=best * 2, budget=Budget(30.0))
    assert result.nodes > 0
    assert result.bound_s == pytest.approx(best, rel=1e-6)
    assert result.objective_s == pytest.approx(best, rel=1e-6)


def _with_counts(seed: int, tables: int = 5) -> Problem:
    """_random_problem with a pigeonhole row on phase 1: each option puts 0-2 loads of 1 ms on a class of 3
    links, so some link carries ceil(N / 3) of them."""
    problem = _random_problem(seed, tables)
    rng = np.random.default_rng(seed + 1)
    ids = np.arange(problem.num_options)
    problem.counts = [CountRow(1, 1e-4, 1e-3, 3, ids, rng.integers(0, 3, len(ids)), ids[:0], np.zeros(0))]
    problem.levels = peak_levels(problem, count=4)
    return problem


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from([0.0, 0.02, 0.1]))
def test_tree_with_counts_stays_below_the_optimum(seed, gap):
    """Splits on a pigeonhole count (z <= floor / z >= ceil) keep every integer plan in some leaf too."""
    problem = _with_counts(seed)
    best = brute_force(problem)
    _, root = Relaxation(problem).solve(10.0)
    result = BoundTree(problem).run(incumbent_s=best * 1.02, budget=Budget(20.0), gap=gap)
    assert root - 1e-12 <= result.bound_s <= best * (1 + 1e-9)
    if result.chosen is not None:
        assert result.objective_s == pytest.approx(problem.objective(result.chosen))


def test_tree_closes_the_rounding_of_counts():
    """Every option of 4 tables puts one 5 ms load on a class of 3 links: some link carries 2 of them, while
    the relaxation's count is 4/3 whatever it chooses. Only a split on the count closes that gap."""
    problem = _random_problem(3, tables=4)
    ids = np.arange(problem.num_options)
    problem.counts = [CountRow(1, 1e-4, 5e-3, 3, ids, np.ones(len(ids), dtype=np.int64), ids[:0], np.zeros(0))]
    problem.levels = peak_levels(problem, count=4)
    best = brute_force(problem)
    _, root = Relaxation(problem).solve(10.0)
    assert root < best * 0.95
    result = BoundTree(problem, candidates=4).run(incumbent_s=best * 2, budget=Budget(30.0))
    assert result.bound_s == pytest.approx(best, rel=1e-6)
