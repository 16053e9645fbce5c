"""Stage 1's bound tree in a forked child beside stage 2 (planner/stage1_tree.py): its bound is the tree's own,
stage 1 leaves the tree to a caller that takes it, and a short two-stage solve raises its bound with it."""
from __future__ import annotations

import sys

import pytest

from placer.cost import CostModel
from placer.options import OptionConfig
from placer.planner.bound_tree import BoundTree
from placer.planner.budget import Budget
from placer.planner.lp import Relaxation
from placer.planner.stage1 import peak_levels
from placer.planner.stage1_tree import BesideTree
from placer.specs.hardware import load_hardware
from placer.specs.workload import load_workload
from placer.topology import Topology
from tests.test_bound_tree import _random_problem, brute_force

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked (Linux only)")


@linux_only
@pytest.mark.parametrize("seed", [11, 4, 17])
def test_child_bound_is_the_tree_bound(seed):
    """The child splits the parent's relaxation (solved here first, so HiGHS ran in this process) as the tree
    would here: the same bound, never above the brute-force optimum."""
    problem = _random_problem(seed, tables=4)
    problem.levels = peak_levels(problem, count=4)
    best = brute_force(problem)
    relaxation = Relaxation(problem)
    _, root = relaxation.solve(10.0)
    here = BoundTree(problem, Relaxation(problem)).run(best * 2, Budget(30.0))
    beside = BesideTree(problem, relaxation, best * 2, seconds=30.0)
    assert beside.running
    got = beside.result()
    assert got is not None and not beside.running
    assert got.bound_s == pytest.approx(here.bound_s, rel=1e-9)
    assert root - 1e-12 <= got.bound_s <= best * (1 + 1e-9)


def test_no_child_for_too_little_time():
    problem = _random_problem(3, tables=4)
    tree = BesideTree(problem, Relaxation(problem), 1.0, seconds=0.5)
    assert not tree.running and tree.result() is None


@linux_only
def test_short_two_stage_solve_takes_the_tree_beside_stage_2():
    """Too little time for stage 1's MIP beside stage 2 (schedule.Schedule.mip_min_s): the tree runs there instead,
    and its splits raise the bound the plan's gap is measured against, never above the plan."""
    from placer.planner.symmetry import Symmetry
    from placer.planner.two_stage import solve_two_stage

    workload = load_workload(ROOT / "workloads" / "criteo-kaggle-dlrm.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), workload.dense.dtype)
    model = CostModel(topo, workload)
    stages = solve_two_stage(model, Symmetry.of(topo), OptionConfig(), budget=Budget(8.0), gap=0.0, backend="cbc",
                             threads=None)
    placements, bound, stage1 = stages.placements, stages.bound_s, stages.stage1
    assert placements
    assert "beside stage 2" in stage1.backend and "splits of the relaxation beside stage 2" in stage1.backend
    assert "highs branch and bound beside" not in stage1.backend
    assert "splits of the relaxation, " not in stage1.backend  # stage 1 left its own tree to the child
    assert bound <= stage1.objective_s * (1 + 1e-12)
