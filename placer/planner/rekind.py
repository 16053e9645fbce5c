"""Stage 2's kind changes: a table leaves the kind stage 1 chose for another of its kinds, where that helps.

Stage 1 chooses kinds by class averages, and some of its choices cannot be balanced on the devices: on
criteo-terabyte-full @ dgx-h100-2node it chose four tables column-wise over a node's 8 GPUs and twelve whole on
one GPU each (1.711 ms in stage 1), which stage 2 realises at 1.84 ms (a node's GPUs hold two column blocks and
a table each, half the other node's only the blocks), while sixteen whole tables, one per GPU, realise 1.711 ms.
Re-insertions, swaps and repacking keep every table's kind and cannot get there.

Here each placed table tries every other kind of its table (Kind lists from kinds.py), each on its best device
(assign.Assigner.best_key; an option over all GPUs has one). A lower estimate of the step with it screens the
kinds first (a single-device kind's loads on its own resources, best_key's step; an option over all GPUs' load
per member of each class, which every member carries alike, on the class's busiest member): pricing exactly
costs 10 ms on 128 GPUs, and only kinds whose estimate does not exceed the step now are priced in the
Accumulator. The best change is kept when it lowers the step time, or keeps it and lowers the potential: the
sum of squared loads, each relative to its phase's scale (stage 1's phase time). The potential is exact and
global, so kept changes never cycle; it lets a table leave a column block for an emptier GPU while another phase
still sets the step, which the next change then lowers.

Pairs (rekind_pairs), where single changes and the other moves change nothing: two tables split over the same
GPUs (column blocks on one block) leave it together, each to any of its kinds on its best device, the first
placed before the second is scored. One table alone cannot: on criteo-terabyte-full @ dgx-h100-2node two tables
in column halves on GPUs 2 and 3 become whole tables on those GPUs only both at once (either alone puts a whole
table beside the other's half), and that is the plan TorchRec's planner found: 1.71158 -> 1.71106 ms.
"""
from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np

from placer.cost import Cost
from placer.plan import Placement
from placer.planner import effort
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner, better
from placer.planner.budget import Budget
from placer.planner.symmetry import resource_class
from placer.planner.types import Family, Kind, Kinds

#: Pair changes try the pairs of at most this many tables per block, the largest (each pair prices every pair of
#: their kinds: production-856 @ dgx-a100 has twelve tables on one block, whose 66 pairs took 0.22 s).
PAIR_TABLES_MAX = 16

#: Relative amount a potential must fall by at an equal step (assign.better's tolerance): float noise never counts.
POTENTIAL_TOL = 1e-9


def potential(stage2: Assigner, acc: Accumulator) -> float:
    """Sum over every (phase, resource) of (load / the phase's scale)**2 (dimensionless); charged to
    ``stage2.budget``."""
    stage2.budget.charge(effort.POTENTIAL_S_PER_LOAD * acc.load_array.size)
    width = acc.index.width
    scale = np.repeat(np.asarray(stage2.scale, dtype=np.float64), width)
    return float(((acc.load_array / scale) ** 2).sum())


def rekind(stage2: Assigner, placements: list[Placement], acc: Accumulator, budget: Budget, kinds: Kinds) -> int:
    """One sweep over the placed tables (most loaded kind first), each moved to its best other kind where that
    lowers (step time, potential) lexicographically (see the module docstring). Returns the number of changes;
    ``placements``, ``acc``, ``stage2.where`` and ``stage2.spread`` change in place."""
    classes = _class_positions(acc)
    current = {ti: kind for ti, (kind, _) in stage2.where.items()} | dict(stage2.spread)
    order = sorted(current, key=lambda ti: -stage2.size(current[ti]))
    changes = 0
    for ti in order:
        if budget.expired():
            break
        others = [k for k in kinds[ti] if k is not current[ti]]
        if not others:
            continue
        old_cost = stage2.price(placements[ti])
        before = (acc.step, potential(stage2, acc))
        acc.remove(old_cost)
        best: tuple[tuple[float, float], Kind, tuple | None, Placement, Cost] | None = None
        for kind in others:
            got = _candidate(stage2, acc, kind, classes, before[0])
            if got is None:
                continue
            key, p, cost = got
            acc.add(cost)
            score = (acc.step, potential(stage2, acc))
            acc.remove(cost)
            if best is None or _lower(score, best[0]):
                best = (score, kind, key, p, cost)
        if best is not None and _lower(best[0], before):
            _, kind, key, p, cost = best
            acc.add(cost)
            _put(stage2, placements, ti, kind, key, p)
            current[ti] = kind
            changes += 1
        else:
            acc.add(old_cost)
    return changes


def rekind_pairs(stage2: Assigner, placements: list[Placement], acc: Accumulator, budget: Budget,
                 kinds: Kinds) -> int:
    """Pairs of tables on the same column block, each moved to its best kind together where that lowers (step
    time, potential) lexicographically (see the module docstring): every pair of kinds but the two they have,
    the larger table placed first on its best device, then the other on its (the PAIR_TABLES_MAX largest tables
    of a block). Returns the number of pairs changed; ``placements``, ``acc``, ``stage2.where`` and
    ``stage2.spread`` change in place."""
    on_block: dict[tuple, list[int]] = defaultdict(list)
    for ti in stage2.where:
        block = _block_of(stage2, ti)
        if block is not None:
            on_block[block].append(ti)
    classes = _class_positions(acc)
    changes = 0
    for block, tables in on_block.items():
        tables.sort(key=lambda ti: -stage2.size(stage2.where[ti][0]))
        for a, b in itertools.combinations(tables[:PAIR_TABLES_MAX], 2):
            if budget.expired():
                return changes
            if not _block_of(stage2, a) == _block_of(stage2, b) == block:
                continue  # one of them left the block with an earlier pair
            changes += _pair_move(stage2, placements, acc, kinds, classes, a, b)
    return changes


def _block_of(stage2: Assigner, ti: int) -> tuple | None:
    """(symmetry key, number of column blocks) of table ``ti`` where it lies in column blocks, else None."""
    kind, key = stage2.where.get(ti, (None, None))
    return (key, len(kind.placement.shards)) if kind is not None and kind.family == Family.BLOCK else None


def _pair_move(stage2: Assigner, placements: list[Placement], acc: Accumulator, kinds: Kinds,
               classes: dict[str, np.ndarray], a: int, b: int) -> int:
    """Tables ``a`` then ``b`` to the best pair of kinds on their best devices, where that is lower; 1 if moved."""
    current = (stage2.where[a][0], stage2.where[b][0])
    old = (stage2.price(placements[a]), stage2.price(placements[b]))
    before = (acc.step, potential(stage2, acc))
    acc.remove(old[0])
    acc.remove(old[1])
    best = None
    for kind_a in kinds[a]:
        got_a = _candidate(stage2, acc, kind_a, classes, before[0])
        if got_a is None:
            continue
        acc.add(got_a[2])
        for kind_b in kinds[b]:
            if kind_a is current[0] and kind_b is current[1]:
                continue
            got_b = _candidate(stage2, acc, kind_b, classes, before[0])
            if got_b is None:
                continue
            acc.add(got_b[2])
            score = (acc.step, potential(stage2, acc))
            acc.remove(got_b[2])
            if best is None or _lower(score, best[0]):
                best = (score, ((a, kind_a) + got_a, (b, kind_b) + got_b))
        acc.remove(got_a[2])
    if best is None or not _lower(best[0], before):
        acc.add(old[0])
        acc.add(old[1])
        return 0
    for ti, kind, key, p, cost in best[1]:
        acc.add(cost)
        _put(stage2, placements, ti, kind, key, p)
    return 1


def _put(stage2: Assigner, placements: list[Placement], ti: int, kind: Kind, key: tuple | None,
         p: Placement) -> None:
    """Table ``ti`` is now ``p``: ``kind`` on symmetry key ``key`` (None: an option over all GPUs)."""
    placements[ti] = p
    stage2.where.pop(ti, None)
    stage2.spread.pop(ti, None)
    if key is None:
        stage2.spread[ti] = kind
    else:
        stage2.where[ti] = (kind, key)


def _class_positions(acc: Accumulator) -> dict[str, np.ndarray]:
    """Resource class -> positions of its members within one phase of Accumulator.load_array."""
    at: dict[str, list[int]] = defaultdict(list)
    for i, (_, r) in enumerate(acc.index.keys[:acc.index.width]):
        at[resource_class(r)].append(i)
    return {c: np.array(v, dtype=np.int64) for c, v in at.items()}


def _spread_estimate(acc: Accumulator, kind: Kind, classes: dict[str, np.ndarray]) -> float:
    """A lower estimate of the step time (s) with ``kind``, an option over all GPUs, added: every member of a
    class carries its load per member (Kind.members), the class's busiest member among them."""
    width = acc.index.width
    new_max = list(acc.phase_max)
    for (ph, c), loads in kind.members.items():
        if c in classes:
            busiest = float(acc.load_array[ph * width + classes[c]].max())
            new_max[ph] = max(new_max[ph], busiest + loads[0])
    return sum(new_max)


def _candidate(stage2: Assigner, acc: Accumulator, kind: Kind, classes: dict[str, np.ndarray],
               ceiling: float) -> tuple[tuple | None, Placement, Cost] | None:
    """(symmetry key or None for an option over all GPUs, placement, its cost) of ``kind`` on its best device;
    None where it fits nowhere or where a lower estimate of the step with it exceeds ``ceiling`` (s)."""
    limit = ceiling * (1 + 1e-9)
    if kind.family == Family.ALL:
        if _spread_estimate(acc, kind, classes) > limit:
            return None
        p = kind.full_placement()
        cost = stage2.price(p)
        return (None, p, cost) if acc.fits(cost) else None
    best = stage2.best_key(acc, kind)
    if best is None or best[1] > limit:
        return None
    p = stage2.relabeled(kind, best[0])
    cost = stage2.price(p)
    return (best[0], p, cost) if acc.fits(cost) else None


def _lower(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """(step, potential) ``a`` below ``b``: a lower step, or an equal step and a potential lower by more than
    POTENTIAL_TOL (relative)."""
    return better(a, (b[0], b[1] * (1 - POTENTIAL_TOL)))
