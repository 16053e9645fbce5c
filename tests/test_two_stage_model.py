"""The two-stage planner's model of a large cluster: option kinds fold exactly what their full placements cost,
the stream rows with their spread term (stage1._stream_rows) keep every bound valid in HiGHS and in PuLP alike,
and the baselines computed beside the stages (planner/background.py) come back whole."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placer.cost import CostModel
from placer.errors import InfeasibleError
from placer.options import OptionConfig, table_options
from placer.planner import ilp
from placer.executor import Background
from placer.planner.bound_tree import BoundTree
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.lp import Relaxation
from placer.planner.problem import FixedGroup, Problem
from placer.planner.solve import SolveConfig, solve
from placer.planner.symmetry import Symmetry, resource_class
from placer.planner.types import Family, RowKey, RowKind, row_kind
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT, baseline_steps
from tests.test_bound_tree import brute_force, random_groups


def _problem_with_spread(seed: int, tables: int = 5) -> Problem:
    """Per-table rows in phase 0 that also carry s_0, the load some options put on every member; a class
    average in phase 0 and a link in phase 1; one memory."""
    rng = np.random.default_rng(seed)
    groups = random_groups(rng, tables)
    oid = groups[-1][-1] + 1
    ids = np.arange(oid)
    load_rows = {(0, RowKey(RowKind.STREAM, ti)): (np.asarray(g), rng.uniform(0.0, 5.0, len(g)) * 1e-3)
                 for ti, g in enumerate(groups)}
    load_rows[(0, "average")] = (ids, rng.uniform(0.0, 1.0, oid) * 1e-3)
    load_rows[(1, "link")] = (ids, rng.uniform(0.0, 2.0, oid) * 1e-3)
    every = ids[rng.uniform(size=oid) < 0.4]
    mem = rng.uniform(1.0, 3.0, oid) * 2**30
    # a group that some options open on every member (a replica group): its fixed cost on every stream row
    opening = [np.asarray([g[-1]]) for g in groups[:3]]
    streams = [(0, RowKey(RowKind.STREAM, ti)) for ti in range(tables)]
    fixed = FixedGroup({(0, "average"): 4e-4, **{key: 4e-4 for key in streams}}, opening)
    return Problem(groups=groups, num_phases=2, load_rows=load_rows,
                   load_base={(1, "link"): 1e-4, **{key: 2e-4 for key in streams}},
                   mem_rows={"hbm": (ids, mem)},
                   mem_capacity={"hbm": float(sum(mem[g].min() for g in groups)) * 1.3}, fixed_s=2e-5,
                   spread={0: (every, rng.uniform(0.1, 2.0, len(every)) * 1e-3)},
                   spread_rows=frozenset((0, RowKey(RowKind.STREAM, ti)) for ti in range(tables)), fixed_groups=[fixed])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000))
def test_spread_rows_same_in_highs_and_pulp_and_below_the_optimum(seed):
    """The relaxation with s_phase and a fixed group is the same LP in HiGHS (lp.py) and PuLP (ilp.py); its bound
    and the tree's never pass the brute-force optimum of the objective that adds s_phase and the group's fixed
    cost to the stream rows; the MIP finds that optimum."""
    problem = _problem_with_spread(seed)
    _, expected = ilp.relaxation(problem)
    values, bound = Relaxation(problem).solve(10.0)
    best = brute_force(problem)
    assert bound == pytest.approx(expected, rel=1e-6)
    assert bound <= best * (1 + 1e-9)
    tree = BoundTree(problem).run(incumbent_s=best * 1.02, budget=Budget(20.0))
    assert tree.bound_s <= best * (1 + 1e-9)
    result = ilp.solve(problem, time_limit_s=20.0, gap=0.0)
    assert result.objective_s == pytest.approx(best, rel=1e-6)


def test_spread_raises_a_stream_row_by_what_every_member_carries():
    """At an integer point a stream row reads base + the table's option + s_phase of every chosen option."""
    problem = _problem_with_spread(3)
    chosen = [g[0] for g in problem.groups]
    x = np.zeros(problem.num_options)
    x[chosen] = 1.0
    ids, coef = problem.spread[0]
    s0 = float(coef @ x[ids])
    rows = [2e-4 + float(c @ x[i]) + s0 for key, (i, c) in problem.load_rows.items()
            if row_kind(key[1]) is RowKind.STREAM]
    assert problem.phase_times(chosen)[0] >= max(rows) * (1 - 1e-12)


def test_kinds_fold_what_their_full_placements_cost():
    """Every option kind of mlperf-dlrm-v1 on 16 GPUs, options over all GPUs included (one shard priced and
    repeated, the owners' ops for all shards once, what every GPU carries alike folded without a load per GPU):
    per (phase, class) its loads and memory are those of its full placement priced by the cost model. A
    row-wise option over all GPUs repeats its smallest shard: never above the full placement (a valid bound)
    where shards hold 16 rows or more, and within 2% where they hold 1,000 or more."""
    wl = load_workload(ROOT / "workloads" / "mlperf-dlrm-v1.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), wl.dense.dtype)
    model = CostModel(topo, wl)
    kinds = KindFolder(Context.of(model, Symmetry.of(topo), OptionConfig())).kinds()
    checked = {"all": 0, "other": 0}
    for k in (k for ks in kinds for k in ks):
        cost = model.placement_cost(k.full_placement())
        loads, memory = defaultdict(float), defaultdict(float)
        for (ph, r), v in cost.loads.items():
            loads[(ph, resource_class(r))] += v
        for m, b in cost.memory.items():
            memory[resource_class(m)] += b
        rows_per_shard = wl.tables[k.table].rows // len(k.full_placement().shards)
        for folded, full in ((k.totals, loads), (k.mem_totals, memory)):
            for key in set(full) | set(folded):
                a, b = folded.get(key, 0.0), full.get(key, 0.0)
                where = (k.placement.label(), key)
                if k.family != Family.ALL or k.placement.sharding == "data_parallel":
                    assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
                    continue
                if rows_per_shard >= 16:
                    assert a <= b * (1 + 1e-9) + 1e-12, where
                if rows_per_shard >= 1000:
                    assert a == pytest.approx(b, rel=2e-2), where
        checked["all" if k.family == Family.ALL else "other"] += 1
    assert checked["all"] > 10 and checked["other"] > 100


@pytest.mark.parametrize("hw", ["dgx-h100-2node", "pcie-4gpu-workstation"])
def test_shards_priced_once_and_relabeled_cost_what_the_placement_does(hw):
    """KindFolder._cost sums a row-wise or column-wise option's shards from one price per shard size, relabeled
    onto each GPU by the symmetry (NVSwitch swaps; PCIe switch pairs matched on the workstation): every load,
    fixed cost and memory under its own resource name equals the cost model's price of the whole placement."""
    wl = load_workload(ROOT / "workloads" / "mlperf-dlrm-v1.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / f"{hw}.yaml"), wl.dense.dtype)
    model = CostModel(topo, wl, include_exchange=False)
    folder = KindFolder(Context.of(CostModel(topo, wl), Symmetry.of(topo), OptionConfig()))
    cfg = OptionConfig(canonical=True, all_gpu_kinds=False)
    checked = 0
    for t in wl.tables:
        for p in table_options(t, topo, wl, cfg):
            if len(p.shards) < 2 or p.sharding not in ("row_wise", "column_wise"):
                continue
            got, want = folder._cost(p), model.placement_cost(p, every_gpu_folded=True)
            for a, b in ((got.loads, want.loads), (got.memory, want.memory)):
                assert set(a) == set(b), p.label()
                for key in b:
                    assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-18), (p.label(), key)
            assert set(got.once) == set(want.once), p.label()
            for g, charges in want.once.items():
                assert got.once[g] == pytest.approx(charges, rel=1e-12), (p.label(), g)
            checked += 1
    assert checked > 50


def test_two_stage_bound_lies_below_every_plan():
    """The two-stage bound (stream rows and group fixed costs included) is below the plan's step and below every
    baseline's on mlperf-dlrm-v1 @ dgx-h100-2node."""
    wl = load_workload(ROOT / "workloads" / "mlperf-dlrm-v1.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), wl.dense.dtype)
    plan = solve(topo, wl, SolveConfig(time_limit_s=10.0))
    bound = plan.solver.lower_bound_step_time_s
    assert "two-stage" in plan.solver.backend
    assert bound <= plan.predicted["step_time_s"] * (1 + 1e-9)
    for method, step in baseline_steps(topo, wl, ("greedy_size", "round_robin", "fae", "uvm")).items():
        assert bound <= step * (1 + 1e-9), method


def _fails():
    raise InfeasibleError("nothing fits")


def test_background_gives_the_value_or_the_error():
    assert Background(lambda: {"a": [1, 2.5]}).result(30.0) == {"a": [1, 2.5]}
    with pytest.raises(InfeasibleError, match="nothing fits"):
        Background(_fails).result(30.0)
    job = Background(lambda: sum(range(10)))
    job.close()  # a closed job (child gone) is computed in the caller
    assert job.result(1.0) == 45
