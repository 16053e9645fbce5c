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
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from placer.cost import Cost
from placer.plan import Placement
from placer.planner import effort
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner, better
from placer.planner.budget import Budget
from placer.planner.kinds import Kind
from placer.planner.symmetry import resource_class

#: Relative amount a potential must fall by at an equal step (assign.better's tolerance): float noise never counts.
POTENTIAL_TOL = 1e-9


def potential(stage2: Assigner, acc: Accumulator) -> float:
    """Sum over every (phase, resource) of (load / the phase's scale)**2 (dimensionless); charged to
    ``stage2.budget``."""
    stage2.budget.charge(effort.POTENTIAL_S_PER_LOAD * acc.load_array.size)
    width = acc.index.width
    scale = np.repeat(np.asarray(stage2.scale, dtype=np.float64), width)
    return float(((acc.load_array / scale) ** 2).sum())


def rekind(stage2: Assigner, placements: list[Placement], acc: Accumulator, kinds: list[list[Kind]],
           budget: Budget) -> int:
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
            placements[ti] = p
            stage2.where.pop(ti, None)
            stage2.spread.pop(ti, None)
            if key is None:
                stage2.spread[ti] = kind
            else:
                stage2.where[ti] = (kind, key)
            current[ti] = kind
            changes += 1
        else:
            acc.add(old_cost)
    return changes


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
    if kind.family == "all":
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
