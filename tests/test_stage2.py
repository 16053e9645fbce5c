"""Stage 2's portfolio (planner/stage2.py): the runs split between this process and a forked child give the best
of every variant; a child that dies costs only its half; a work budget never forks."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from placer.cost import CostModel
from placer.options import OptionConfig
from placer.planner import stage2
from placer.planner.assign import Assigner
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.stage1 import solve_stage1
from placer.planner.symmetry import Symmetry
from placer.planner.types import Stage2Result
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def case():
    """mlperf-dlrm-v2 on two DGX H100 nodes (16 GPUs): its context, kinds, stage-1 problem and choice."""
    workload = load_workload(ROOT / "workloads" / "mlperf-dlrm-v2.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), workload.dense.dtype)
    ctx = Context.of(CostModel(topo, workload), Symmetry.of(topo), OptionConfig())
    kinds = KindFolder(ctx).kinds(processes=1)
    # a work budget: stage 1 chooses the same on a loaded machine (under 10 s of wall time its choice could vary)
    first = solve_stage1(ctx, kinds, Budget.of_work(10_000), gap=0.005, backend="cbc", threads=None)
    return ctx, kinds, first.problem, first.result.chosen


def _each_variant(case) -> list[float]:
    """Every distinct variant run alone, to its end: its step (s)."""
    ctx, kinds, problem, ids = case
    flat = [k for ks in kinds for k in ks]
    scales = {"counted": tuple(problem.phase_times(ids)), "plain": tuple(replace(problem, counts=[]).phase_times(ids))}
    variants = list(dict.fromkeys((scales[n], w) for n, w in stage2.STAGE2_VARIANTS))
    return [stage2._runs(Assigner(ctx), [flat[i] for i in ids], kinds, [v], Budget.unlimited()).step_s
            for v in variants]



def _pair(result: Stage2Result) -> tuple[list, float]:
    return result.placements, result.step_s

@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the child runs only with a second core")
def test_the_child_runs_the_other_half_and_its_best_comes_back(case, monkeypatch):
    ctx, kinds, problem, ids = case
    steps = _each_variant(case)
    assert len(steps) >= 2
    halves, real_runs, real_child = [], stage2._runs, stage2._child_runs

    def spy_runs(assigner, chosen, kinds_, variants, budget):
        halves.append(len(variants))
        return real_runs(assigner, chosen, kinds_, variants, budget)

    def marked_child(*args):  # runs in the child: its best, marked 1 s lower so that it must win
        best = real_child(*args)
        return replace(best, step_s=best.step_s - 1.0)

    monkeypatch.setattr(stage2, "_runs", spy_runs)
    monkeypatch.setattr(stage2, "_child_runs", marked_child)
    placements, step = _pair(stage2.place_choice(Assigner(ctx), problem, kinds, ids, Budget(600), beside=True))
    assert halves == [(len(steps) + 1) // 2]  # this process's half (the child's call is in the child)
    assert len(placements) == len(kinds)
    assert step == pytest.approx(min(steps[1::2]) - 1.0, rel=1e-12)  # the child ran the other half


def test_every_variant_runs_here_without_a_second_core(case):
    ctx, kinds, problem, ids = case
    placements, step = _pair(stage2.place_choice(Assigner(ctx), problem, kinds, ids, Budget(600), beside=False))
    assert len(placements) == len(kinds) and step == pytest.approx(min(_each_variant(case)), rel=1e-12)


def test_a_child_that_dies_costs_only_its_half(case, monkeypatch):
    ctx, kinds, problem, ids = case
    monkeypatch.setattr(stage2, "_child_runs", lambda *a: os._exit(1))
    monkeypatch.setattr(stage2, "cores", lambda: 2)
    placements, step = _pair(stage2.place_choice(Assigner(ctx), problem, kinds, ids, Budget(600), beside=True))
    assert len(placements) == len(kinds) and step == pytest.approx(min(_each_variant(case)[0::2]), rel=1e-12)


def test_a_work_budget_never_forks(case, monkeypatch):
    ctx, kinds, problem, ids = case

    def no_fork(*a, **k):
        raise AssertionError("forked under a work budget")

    monkeypatch.setattr(stage2.Child, "start", no_fork)
    monkeypatch.setattr(stage2, "cores", lambda: 2)
    placements = stage2.place_choice(Assigner(ctx), problem, kinds, ids, Budget.of_work(1e6), beside=True).placements
    assert len(placements) == len(kinds)

