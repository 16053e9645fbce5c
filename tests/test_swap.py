"""Stage 2's swaps (planner/swap.py) and the caches they lean on (the Accumulator's, the Assigner's prices)."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from placer.cost import PHASES, CostModel
from placer.options import OptionConfig
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.swap import SwapFrame, _best_partners, swap
from placer.planner.symmetry import Symmetry
from placer.planner.types import Family
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def greedy():
    """production-856 on 16 GPUs, every table on one GPU (its first single-GPU kind), assigned greedily by
    weight: (assigner, placements, accumulator)."""
    workload = load_workload(ROOT / "workloads" / "production-856.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), workload.dense.dtype)
    ctx = Context.of(CostModel(topo, workload), Symmetry.of(topo), OptionConfig())
    kinds = KindFolder(ctx).kinds()
    chosen = [next(k for k in ks if k.family == Family.GPU) for ks in kinds]
    assigner = Assigner(ctx)
    got = assigner.assign(chosen, kinds, "weight")
    placements, acc = got.placements, got.acc
    assert placements
    return assigner, placements, acc


def _reference_partners(stage2: Assigner, acc: Accumulator, top: tuple, ph: int, level: float):
    """The swap rule written plainly, pair by pair (the module docstring of swap.py): for each table loading
    ``top``, heaviest there first, the partner of largest gain whose loads pass the own-resource test and
    that fits in memory (ties: the first in single_gpu_tables order)."""
    rl, where = stage2.sym.relabel, stage2.where
    single = stage2.single_gpu_tables()

    def own(ti, key):
        at = defaultdict(float)
        for p, r, v in where[ti][0].own:
            at[(p, rl(key, r))] += v
        return at

    def fits(ti, key, leaving):
        for m, b in where[ti][0].own_mem:
            name = rl(key, m)
            freed = sum(b2 for m2, b2 in where[leaving][0].own_mem if rl(where[leaving][1], m2) == name)
            if acc.memory[name] - freed + b > stage2.model.usable_memory[name]:
                return False
        return True

    holders = sorted((ti for ti in single if own(ti, where[ti][1]).get(top, 0.0) > 0),
                     key=lambda ti: -own(ti, where[ti][1])[top])
    out = []
    for t in holders:
        kt = where[t][1]
        load_t, best = own(t, kt), None
        for u in single:
            ku = where[u][1]
            if ku == kt:
                continue
            load_u, t_there, u_here = own(u, ku), own(t, ku), own(u, kt)
            gain = load_t[top] - u_here.get(top, 0.0)
            if gain <= 0 or (best is not None and gain <= best[0]):
                continue
            ok = all(not (acc.loads[key] + v - moved_out.get(key, 0.0) > limit * (1 - 1e-12)
                          and acc.loads[key] + v - moved_out.get(key, 0.0) > acc.loads[key] + 1e-18)
                     for moved_in, moved_out in ((u_here, load_t), (t_there, load_u))
                     for key, v in moved_in.items()
                     for limit in [level if key[0] == ph else acc.phase_max[key[0]]])
            if ok and fits(u, kt, t) and fits(t, ku, u):
                best = (gain, u)
        if best is not None:
            out.append((t, best[1]))
    return out


def test_swap_partners_are_the_plain_rules(greedy):
    """The vectorized scan (_best_partners) names, for every phase's busiest resource, the same partners as
    the rule checked pair by pair, and some phase has a partner to test (the test is not vacuous)."""
    assigner, _, acc = greedy
    single = assigner.single_gpu_tables()
    frame = SwapFrame(assigner, acc, single)
    keys = [assigner.where[ti][1] for ti in single]
    pos = frame.positions(assigner.where)
    found = 0
    for ph in range(len(PHASES)):
        top, level = acc.busiest(ph)
        if level <= 0:
            continue
        got = [(single[t], single[u]) for t, u in
               _best_partners(assigner, frame, acc, keys, pos, acc.index.of[top], ph, level, Budget.unlimited())]
        assert got == _reference_partners(assigner, acc, top, ph, level)
        found += len(got)
    assert found > 0


def test_swaps_keep_the_books_exact(greedy):
    """Swapping lowers the step, and the incremental loads stay those of the placements priced afresh."""
    assigner, placements, acc = greedy
    before = acc.step
    assert swap(assigner, placements, acc, Budget.unlimited()) > 0
    assert acc.step < before
    fresh = Accumulator(assigner.model)
    for p in placements:
        fresh.add(assigner.model.placement_cost(p))
    assert fresh.step == pytest.approx(acc.step, rel=1e-9)
    assert all(fresh.memory[m] == pytest.approx(acc.memory[m]) for m in fresh.memory)


def test_an_accumulator_reindexes_a_cost_that_changed(greedy):
    """A cost keeps its indexed loads for the next add or remove, until ``+=`` changes it."""
    assigner, placements, _ = greedy
    model = assigner.model
    a, b = model.placement_cost(placements[0]), model.placement_cost(placements[1])
    acc = Accumulator(model)
    acc.add(a)
    acc.remove(a)
    a += b
    acc.add(a)
    ref = Accumulator(model)
    ref.add(model.placement_cost(placements[0]))
    ref.add(b)
    assert list(acc.load_array) == pytest.approx(list(ref.load_array))
    assert list(acc.memory_array) == pytest.approx(list(ref.memory_array))


def test_group_users_by_number(greedy):
    """users_of counts the placements using each fused group, by LoadIndex.group_id, and 0 for groups never
    added."""
    assigner, placements, _ = greedy
    model = assigner.model
    cost = next(c for c in (model.placement_cost(p) for p in placements) if c.once)
    acc = Accumulator(model)
    ids = [acc.index.group_id(g) for g in cost.once]
    never = acc.index.group_id(("a group", "no placement uses"))
    acc.add(cost)
    acc.add(cost)
    assert list(acc.users_of(np.array(ids + [never]))) == [2] * len(ids) + [0]
    acc.remove(cost)
    assert list(acc.users_of(np.array(ids))) == [1] * len(ids)


def test_a_packed_cost_adds_as_its_cost_does(greedy):
    """accumulator.packed keeps a cost's loads as arrays only: it reads the same by name, and added and taken
    out again (groups opened and closed: the first add of a table opens its groups) it moves the books exactly
    as the cost itself does."""
    from placer.planner.accumulator import packed

    assigner, placements, _ = greedy
    model = assigner.model
    costs = [model.placement_cost(p) for p in placements[:40]]
    acc, ref = Accumulator(model), Accumulator(model)
    for p, cost in zip(placements, costs):
        small = packed(model.placement_cost(p), acc.index)
        assert len(small.loads) == len(cost.loads) and dict(small.loads.items()) == dict(cost.loads)
        key = next(iter(cost.loads))
        assert small.loads[key] == cost.loads[key] and list(small.loads) == list(cost.loads)
        assert small.once == cost.once and dict(small.memory) == dict(cost.memory)
        acc.add(small)
        ref.add(cost)
        assert np.array_equal(acc.load_array, ref.load_array) and acc.phase_max == ref.phase_max
    for cost in costs[::-1]:
        small = packed(cost, acc.index)
        acc.remove(small)
        ref.remove(cost)
        assert np.array_equal(acc.load_array, ref.load_array) and acc.phase_max == ref.phase_max
    assert np.array_equal(acc.memory_array, ref.memory_array)


def test_the_assigner_prices_a_placement_once_and_charges_every_time(greedy):
    """Assigner.relabeled gives the same object for the same kind and key, and Assigner.price the same cost for
    it, charging its budget as if it priced it afresh (a work budget's plan must not depend on what is kept)."""
    from placer.planner import effort

    assigner, _, _ = greedy
    kind, key = next(iter(assigner.where.values()))
    p = assigner.relabeled(kind, key)
    assert assigner.relabeled(kind, key) is p
    budget = Budget.of_work(1e9)
    assigner.budget = budget
    first = assigner.price(p)
    spent = budget.elapsed()
    assert assigner.price(p) is first
    assert budget.elapsed() == pytest.approx(2 * spent) and spent >= effort.PRICING_S_PER_LOAD * len(first.loads)
    fresh = assigner.model.placement_cost(p)
    assert dict(first.loads.items()) == dict(fresh.loads) and first.once == fresh.once
    assigner.budget = Budget.unlimited()
