"""Stage 2 of the two-stage planner (two_stage.py): devices for the kinds stage 1 chose (stage1.py, kinds.py).

Kinds are assigned largest first, each onto the device where the predicted step time grows least among those
where it fits (the loads on the device's own resources are compared exactly; the spread part of its exchange
is the same wherever it goes), ties going to the emptier device (sum of squared loads relative to stage 1's
phase times). Then ``improve`` re-inserts tables the same way in sweeps while that helps; swap.py (pairs of
tables exchanged), repack.py and fill.py move tables through ``move_exactly`` and read ``where``, the kind and
symmetry key of every table placed.
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Callable

import numpy as np

from placer.cost import PHASES, Cost, CostModel
from placer.forms.shardings import sharding_of
from placer.plan import Placement
from placer.planner import effort
from placer.planner.accumulator import Accumulator, load_index, packed
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.symmetry import Symmetry
from placer.planner.types import Assignment, Family, Kind, Kinds
from placer.program.ops import GroupKey
from placer.topology import Topology


#: Loads that Assigner.price keeps priced, packed (24 bytes each with their positions and phases: ~50 MB at most; a
#: single-GPU table's cost on 128 GPUs has ~510, its exchange reaching every link). synthetic-1000 @
#: dgx-h100-32node, 60 s: peak summed PSS over all processes 1,854 MB with it, 1,818 MB without.
PRICED_LOADS = 2_000_000
#: Placements Assigner.relabeled keeps (~1 KB each) before it starts afresh.
RELABELED_KEPT = 50_000

#: Orders in which stage 2 places kinds, largest first: by the largest relative load on one of their own
#: resources (vector bin packing), or by the sum of their peaks.
ORDERS: dict[str, Callable[[Assigner, Kind], float]] = {
    "size": lambda stage2, kind: stage2.size(kind),
    "weight": lambda stage2, kind: kind.weight,
}


class Assigner:
    """Stage 2's state for one Context: the balance measure (``scale``, per-phase seconds; ``excess_weight``,
    see _scores) and ``where``: table -> (kind, symmetry key) of the assignment made last (``assign``).
    ``budget`` is charged for the scoring and exact pricing done (``best_key``, ``price``; effort.py):
    two_stage.py sets it to stage 2's; unlimited by default."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        # per-phase load scale for stage 2's balance measure (stage 1's phase times once known), seconds
        self.scale = [1e-3] * len(PHASES)
        self.excess_weight = 0.0
        self.where: dict[int, tuple[Kind, tuple]] = {}
        self.spread: dict[int, Kind] = {}  # table -> its kind over all GPUs, of the assignment made last
        self._load_index = load_index(ctx.model)
        self._index_cache: dict[tuple, tuple[list[tuple], np.ndarray, np.ndarray]] = {}
        self._group_id_cache: dict[tuple, np.ndarray] = {}  # see _group_ids
        self._folder: KindFolder | None = None  # for ``place``, folding one placement at a time
        self.budget = Budget.unlimited()
        # bytes per memory (Accumulator's memory index) held back during ``assign`` for the multi-GPU kinds not yet
        # placed (see _reservations); None outside ``assign``
        self._reserve: np.ndarray | None = None
        # id(p) -> (p, packed cost): an entry holds p, so that no other object has its id while it is kept (no alias)
        self._priced: OrderedDict[int, tuple[Placement, Cost]] = OrderedDict()
        self._priced_loads = 0  # loads of the costs in _priced
        # (id(kind), key) -> (kind, placement): an entry holds its kind, so its id names no other (no alias)
        self._relabeled: dict[tuple[int, tuple], tuple[Kind, Placement]] = {}

    def price(self, p: Placement) -> Cost:
        """``p``'s exact cost (model.placement_cost), charged to ``budget`` whether or not it was priced before:
        a placement made by ``relabeled`` stays priced (packed, accumulator.packed) while it is among the
        PRICED_LOADS loads priced last (stage 2 prices the same few thousand placements again and again)."""
        kept = self._priced.get(id(p))
        if kept is not None and kept[0] is p:
            self._priced.move_to_end(id(p))
            cost = kept[1]
        else:
            cost = packed(self.model.placement_cost(p), self._load_index)
            self._priced[id(p)] = (p, cost)
            self._priced_loads += len(cost.loads)
            while self._priced_loads > PRICED_LOADS and len(self._priced) > 1:
                _, (_, old) = self._priced.popitem(last=False)
                self._priced_loads -= len(old.loads)
        self.budget.charge(effort.PRICING_S_PER_LOAD * len(cost.loads))
        return cost

    @property
    def model(self) -> CostModel:
        return self.ctx.model

    @property
    def sym(self) -> Symmetry:
        return self.ctx.sym

    @property
    def topo(self) -> Topology:
        return self.ctx.topo

    def set_scale(self, phase_times) -> None:
        """Per-phase load scale (s) for the balance measure: stage 1's phase times where positive."""
        self.scale = [float(v) if v > 0 else old for v, old in zip(phase_times, self.scale)]

    def size(self, kind: Kind) -> float:
        """How hard a kind is to fit: its largest load on one of its own resources relative to that phase's
        scale (vector bin packing goes largest dimension first)."""
        return max((v / self.scale[ph] for ph, _, v in kind.own), default=0.0)

    def candidates(self, kind: Kind) -> list[tuple]:
        sym, topo = self.sym, self.topo
        if kind.family == Family.GPU:
            return [sym.gpu_key(g) for g in topo.gpus]
        if kind.family == Family.NODE:
            return [sym.node_key(n) for n in topo.nodes]
        if kind.family == Family.BLOCK:
            pieces = len(kind.placement.shards)
            blocks = sym.gpus_per_node // pieces
            return [sym.block_key(n, b, pieces) for n in topo.nodes for b in range(blocks)]
        if kind.family == Family.LOCAL:  # every node's replica moved alike: node0's local relabelings
            pieces = len(kind.placement.shards) // len(topo.nodes)
            if pieces == 1:
                return [sym.gpu_key(g) for g in topo.gpus_of_node(topo.nodes[0])]
            if pieces < sym.gpus_per_node:
                return [sym.block_key(topo.nodes[0], b, pieces) for b in range(sym.gpus_per_node // pieces)]
        return [(0, ())]

    def relabeled(self, kind: Kind, key: tuple) -> Placement:
        """``kind``'s placement moved onto symmetry key ``key``: the same object for the same pair (so that
        ``price`` finds it priced), while RELABELED_KEPT pairs are kept."""
        if key == (0, ()):
            return kind.placement
        kept = self._relabeled.get((id(kind), key))
        if kept is not None and kept[0] is kind:
            return kept[1]
        rl = self.sym.relabel
        p = kind.placement.model_copy(update={"shards": [
            s.model_copy(update={"device": rl(key, s.device)}) for s in kind.placement.shards]})
        if len(self._relabeled) >= RELABELED_KEPT:
            self._relabeled.clear()
        self._relabeled[(id(kind), key)] = (kind, p)
        return p

    def assign_best(self, chosen: list[Kind], fallbacks: Kinds,
                    pinned: dict[int, tuple[Kind, tuple]] | None = None) -> Assignment:
        """``assign`` in each order of ORDERS; the one with the least step time (its choices kept in
        ``self.where``)."""
        best = None
        for order_by in ORDERS:
            got = self.assign(chosen, fallbacks, order_by, pinned)
            if got.placements and (best is None or got.acc.step < best[0].acc.step):
                best = (got, self.where, self.spread)
        if best is None:
            return got
        self.where, self.spread = best[1], best[2]
        return best[0]

    def assign(self, chosen: list[Kind], fallbacks: Kinds, order_by: str = "size",
               pinned: dict[int, tuple[Kind, tuple]] | None = None) -> Assignment:
        """Devices for the chosen kinds, largest first (by ``order_by``, one of ORDERS); a kind that fits
        nowhere falls back to the same table's kinds with less HBM, then host. ``pinned`` (table -> (kind,
        symmetry key)) go first, where they say (fill.py). Its placements are [] if some table fits nowhere."""
        model = self.model
        measure = ORDERS[order_by]
        acc = Accumulator(model)
        placed: dict[int, Placement] = {}
        self.where, self.spread = {}, {}
        for k in [k for k in chosen if k.family == Family.ALL]:
            full = k.full_placement()
            c = self.price(full)
            if acc.fits(c):
                acc.add(c)
                placed[k.table] = full
                self.spread[k.table] = k
        for ti, (k, key) in (pinned or {}).items():
            p = self.relabeled(k, key)
            c = self.price(p)
            if acc.fits(c):
                acc.add(c)
                placed[ti] = p
                self.where[ti] = (k, key)
        order = sorted((k for k in chosen if k.family != Family.ALL and k.table not in placed),
                       key=lambda k: -measure(self, k))
        order += [k for k in chosen if k.family == Family.ALL and k.table not in placed]
        shares = self._reservations(acc, order)
        self._reserve = sum(shares.values(), np.zeros(len(acc.index.usable)))
        try:
            for k in order:
                if id(k) in shares:
                    self._reserve -= shares[id(k)]
                tries = [k] if k.family != Family.ALL else []
                tries += [f for f in fallbacks[k.table] if f.family != Family.ALL and f.hbm_bytes < k.hbm_bytes]
                tries += [f for f in fallbacks[k.table] if not sharding_of(f.placement).on_gpus]
                got = self._first_fit(acc, tries)
                if got is None:
                    return Assignment([], acc)
                placed[k.table] = got[0]
                self.where[k.table] = (got[2], got[1])
        finally:
            self._reserve = None
        return Assignment([placed[i] for i in range(len(model.wl.tables))], acc)

    def _first_fit(self, acc: Accumulator, tries: list[Kind]) -> tuple[Placement, tuple, Kind] | None:
        """(placement, symmetry key, kind) of the first of ``tries`` that fits somewhere, on its best device, added
        to ``acc``: first leaving the memory held back for the multi-GPU kinds still to come (``_reserve``), then,
        where none does, without holding it back. None if none fits."""
        for holding in (True, False):
            if not holding:
                if not self._reserve.any():
                    return None
                kept, self._reserve = self._reserve, None
            try:
                for kind in tries:
                    got = self._best_device(acc, kind)
                    if got is not None:
                        return got[0], got[1], kind
            finally:
                if not holding:
                    self._reserve = kept
        return None

    def _reservations(self, acc: Accumulator, order: list[Kind]) -> dict[int, np.ndarray]:
        """id(kind) -> the bytes per memory held back for it while the kinds before it are placed, for each kind of
        ``order`` over several GPUs of one node or block (a host table keeps a buffer on every GPU of its node):
        its memory on its own devices, averaged over its candidate positions. Without it, the largest tables first
        can fill one GPU to within bytes of its capacity, and a host table that comes later, needing a few MiB on
        every GPU, fits nowhere (production-856 @ pcie-4gpu-workstation: every stage-2 run failed so, and the
        plan fell back to FAE's, 2179 ms against a bound of 475 ms)."""
        shares: dict[int, np.ndarray] = {}
        for k in order:
            if k.family not in (Family.NODE, Family.BLOCK, Family.LOCAL) or not k.own_mem:
                continue
            _, _, mem_at = self._own_indices(k)
            share = np.zeros(len(acc.index.usable))
            size = np.array([b for _, b in k.own_mem])
            for row in mem_at:
                np.add.at(share, row, size / len(mem_at))
            shares[id(k)] = share
        return shares

    def improve(self, placements: list[Placement], acc: Accumulator, budget: Budget) -> int:
        """Re-insert tables, hardest to fit first, each onto its best device (step time first, then balance), in
        sweeps until a sweep moves nothing or ``budget`` is spent. A move never makes the exact step time worse.
        Returns the number of moves; ``placements`` and ``acc`` are updated in place."""
        moves = 0
        order = sorted(self.where, key=lambda ti: -self.size(self.where[ti][0]))
        costs: dict[int, Cost] = {}  # of the placements now, priced once
        moved = True
        while moved and not budget.expired():
            moved = False
            for ti in order:
                if budget.expired():
                    break
                kind, key = self.where[ti]
                step = acc.step
                if ti not in costs:
                    costs[ti] = self.price(placements[ti])
                old_cost = costs[ti]
                acc.remove(old_cost)
                best = self.best_key(acc, kind, stay=key)
                if best is not None:
                    p = self.relabeled(kind, best[0])
                    c = self.price(p)
                    if acc.fits(c):
                        acc.add(c)
                        if acc.step <= step * (1 + 1e-12):
                            placements[ti], costs[ti] = p, c
                            self.where[ti] = (kind, best[0])
                            moves += 1
                            moved = True
                            continue
                        acc.remove(c)
                acc.add(old_cost)
        return moves

    def single_gpu_tables(self) -> list[int]:
        """The tables placed (``where``) with a single-GPU kind: those swaps, repacking and fill.py move."""
        return [ti for ti, (kind, _) in self.where.items() if kind.family == Family.GPU]

    def move_exactly(self, placements: list[Placement], acc: Accumulator, moves: list[tuple[int, tuple]],
                     keep: Callable[[], bool]) -> bool:
        """Move every table of ``moves`` ((table, symmetry key) pairs) onto its key, priced exactly in ``acc``;
        kept (``placements`` and ``where`` updated) if every new placement fits and ``keep()`` then holds, else
        undone. Returns whether it was kept."""
        old = [self.price(placements[t]) for t, _ in moves]
        new = [self.relabeled(self.where[t][0], key) for t, key in moves]
        for cost in old:
            acc.remove(cost)
        added: list[Cost] = []
        for p in new:
            cost = self.price(p)
            if not acc.fits(cost):
                break
            acc.add(cost)
            added.append(cost)
        else:
            if keep():
                for (t, key), p in zip(moves, new):
                    placements[t] = p
                    self.where[t] = (self.where[t][0], key)
                return True
        for cost in reversed(added):
            acc.remove(cost)
        for cost in old:
            acc.add(cost)
        return False

    def place(self, acc: Accumulator, canonical: Placement) -> Placement | None:
        """Put a canonical placement on its best device (as stage 2 does); None if it fits nowhere."""
        if self._folder is None:
            self._folder = KindFolder(self.ctx)
        kind = self._folder.fold(0, canonical)
        got = None if kind is None else self._best_device(acc, kind)
        return None if got is None else got[0]

    def _scores(self, acc: Accumulator, kind: Kind) -> tuple[list[tuple], np.ndarray, np.ndarray]:
        """For every candidate device of ``kind`` (its symmetry keys): the step time (s) with ``kind`` added
        there (inf where it does not fit), and the imbalance. The step counts the loads on the device's own
        resources (the spread part of its exchange is the same wherever it goes); imbalance is the growth of
        the sum of squared loads, each relative to its phase's scale (and of memory relative to capacity):
        among equal steps, the emptier device wins. With ``excess_weight``, imbalance also counts, that many
        times over, the growth of the squared load above the phase's scale (stage 1's phase time): a device
        that one table already fills to stage 1's time is avoided even while the step does not show it."""
        keys, load_at, mem_at = self._own_indices(kind)
        load = np.array([v for _, _, v in kind.own])
        phase = np.array([ph for ph, _, _ in kind.own], dtype=np.int64)
        scale = np.asarray(self.scale)[phase]
        now = acc.load_array[load_at]  # (candidates, own resources)
        load = load + self._group_opening(acc, kind, keys)  # (candidates, own resources)
        after = now + load
        step = np.full(len(keys), sum(acc.phase_max))
        for ph in np.unique(phase):
            rise = after[:, phase == ph].max(axis=1) - acc.phase_max[ph]
            step += np.maximum(rise, 0.0)
        imbalance = (load * (2 * now + load) / scale**2).sum(axis=1)
        if self.excess_weight:
            excess = np.maximum(after - scale, 0.0)**2 - np.maximum(now - scale, 0.0)**2
            imbalance += self.excess_weight * (excess / scale**2).sum(axis=1)
        if kind.own_mem:
            used = acc.memory_array[mem_at]
            cap = acc.index.usable[mem_at]
            if self._reserve is not None:
                cap = cap - self._reserve[mem_at]
            size = np.array([b for _, b in kind.own_mem])
            step[np.any(used + size > cap, axis=1)] = np.inf
            imbalance += (size * (2 * used + size) / cap**2).sum(axis=1)
        return keys, step, imbalance

    def _group_opening(self, acc: Accumulator, kind: Kind, keys: list[tuple]) -> np.ndarray:
        """(candidates, own resources): the fixed costs (s) of the fused groups ``kind`` would open on each
        candidate device, where no table placed there uses them yet: zero where it joins open groups."""
        extra = np.zeros((len(keys), len(kind.own)))
        for g, charges in kind.groups:
            closed = acc.users_of(self._group_ids(acc, g, kind, keys)) == 0
            for pos, seconds in charges:
                extra[closed, pos] += seconds
        return extra

    def _group_ids(self, acc: Accumulator, g: GroupKey, kind: Kind, keys: list[tuple]) -> np.ndarray:
        """The numbers (LoadIndex.group_id) of the canonical fused group ``g`` on each candidate device ``keys``
        of ``kind`` (cached: the candidates depend only on the kind's family and number of shards)."""
        cache_key = (g, kind.family, len(kind.placement.shards))
        if cache_key not in self._group_id_cache:
            rl = self.sym.relabel
            self._group_id_cache[cache_key] = np.array(
                [acc.index.group_id(dataclasses.replace(g, device=rl(key, g.device))) for key in keys],
                dtype=np.int64)
        return self._group_id_cache[cache_key]

    def _own_indices(self, kind: Kind) -> tuple[list[tuple], np.ndarray, np.ndarray]:
        """(candidate keys, (candidates, own loads) indices into Accumulator.load_array, (candidates, own
        memories) indices into memory_array), cached by the names of the kind's own resources."""
        cache_key = (kind.family, len(kind.placement.shards), tuple((ph, r) for ph, r, _ in kind.own),
                     tuple(m for m, _ in kind.own_mem))
        if cache_key not in self._index_cache:
            index, rl = self._load_index, self.sym.relabel
            keys = self.candidates(kind)
            load_at = np.array([[index.of[(ph, rl(key, r))] for ph, r, _ in kind.own] for key in keys],
                               dtype=np.int64).reshape(len(keys), len(kind.own))
            mem_at = np.array([[index.mem_of[rl(key, m)] for m, _ in kind.own_mem] for key in keys],
                              dtype=np.int64).reshape(len(keys), len(kind.own_mem))
            self._index_cache[cache_key] = (keys, load_at, mem_at)
        return self._index_cache[cache_key]

    def best_key(self, acc: Accumulator, kind: Kind, stay: tuple | None = None) -> tuple[tuple, float] | None:
        """(symmetry key, step s) of the candidate device with the least step time, ties (within 1e-12
        relative) to the least imbalance; None if ``kind`` fits nowhere. With ``stay`` (a key): None also
        unless the best beats staying there (the tables already sit at their own positions)."""
        keys, step, imbalance = self._scores(acc, kind)
        self.budget.charge(effort.SCORE_CALL_S
                           + len(keys) * (effort.SCORE_S_PER_ENTRY * (len(kind.own) + len(kind.own_mem))
                                          + effort.GROUP_S_PER_ENTRY * len(kind.groups)))
        least = step.min()
        if not np.isfinite(least):
            return None
        tied = np.flatnonzero(step <= least + 1e-12 * least)
        best = int(tied[np.argmin(imbalance[tied])])
        if stay is not None:
            here = keys.index(stay)
            if best == here or not better((step[best], imbalance[best]), (step[here], imbalance[here])):
                return None
        return keys[best], float(step[best])

    def _best_device(self, acc: Accumulator, kind: Kind):
        """(placement, symmetry key) of ``kind`` on its best device (see _scores), added to ``acc``; None if it
        fits nowhere."""
        best = self.best_key(acc, kind)
        if best is None:
            return None
        p = self.relabeled(kind, best[0])
        c = self.price(p)
        if not acc.fits(c):
            return None
        acc.add(c)
        return p, best[0]


def better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Lexicographic (step, imbalance) with a relative tolerance (1e-12) on the step (also rekind.py's test)."""
    tol = 1e-12 * max(abs(a[0]), abs(b[0]))
    return a[0] < b[0] - tol or (a[0] <= b[0] + tol and a[1] < b[1])
