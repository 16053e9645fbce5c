"""Stage 2's swaps: two single-GPU tables exchange their GPUs where that lowers a phase's busiest resource.

Single moves (Assigner.improve) cannot lower it once another phase is packed to its maximum everywhere
(synthetic-1000 on 256 GPUs: the exchange within 0.2%, so no table can leave the GPUs that a column-wise block
fills in the forward). For each phase's busiest resource, the tables loading it are tried, heaviest there
first, against every single-GPU table elsewhere: first on both GPUs' own resources (no load may reach the one
being lowered, nor pass another phase's maximum), then exactly (Assigner.move_exactly). The first test is
scored for all partners at once in numpy (SwapFrame: every table's own loads as a vector over the canonical
resources, and where each canonical resource lies for each GPU); the partner with the largest gain that passes
it and fits in memory is the one priced.
"""
from __future__ import annotations

import numpy as np

from placer.cost import PHASES
from placer.plan import Placement
from placer.planner import effort
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner
from placer.planner.budget import Budget


#: Swapping stops after this many swaps in a row that left the step time as it was (each lowers one phase's
#: busiest resource, which reaches the step only when no other resource shares that maximum): on production-856
#: on 128 GPUs all 241 swaps lowered the step; on synthetic-1000 on 256 GPUs the first 5 did and the next 6,974
#: (55 s) did not.
PATIENCE = 16


class SwapFrame:
    """The single-GPU tables ``tables`` of a stage-2 assignment in canonical coordinates: ``load`` (tables,
    dims) holds each table's own loads (s) over the canonical (phase, resource) dims of all of them; ``at``
    maps a GPU's symmetry key to the Accumulator.load_array index of every dim relabeled onto that GPU."""

    def __init__(self, stage2: Assigner, acc: Accumulator, tables: list[int]):
        where, rl, of = stage2.where, stage2.sym.relabel, acc.index.of
        dims = sorted({(ph, r) for ti in tables for ph, r, _ in where[ti][0].own})
        col = {d: i for i, d in enumerate(dims)}
        self.tables = tables
        self.row = {ti: i for i, ti in enumerate(tables)}
        self.load = np.zeros((len(tables), len(dims)))
        for i, ti in enumerate(tables):
            for ph, r, v in where[ti][0].own:
                self.load[i, col[(ph, r)]] += v
        self.phase = np.array([ph for ph, _ in dims], dtype=np.int64)
        keys = {where[ti][1] for ti in tables} | {stage2.sym.gpu_key(g) for g in stage2.topo.gpus}
        self.at = {k: np.array([of[(ph, rl(k, r))] for ph, r in dims], dtype=np.int64) for k in keys}

    def positions(self, where: dict) -> np.ndarray:
        """(tables, dims): the load_array index of every table's dims where it sits now."""
        return np.stack([self.at[where[ti][1]] for ti in self.tables])


def swap(stage2: Assigner, placements: list[Placement], acc: Accumulator, budget: Budget) -> int:
    """Swap pairs of single-GPU tables (module docstring) while some phase's busiest resource comes down, the
    step time does too at least once in PATIENCE swaps, and ``budget`` lasts. Returns the number of swaps;
    ``placements``, ``acc`` and ``stage2.where`` change in place."""
    single = stage2.single_gpu_tables()
    if len(single) < 2:
        return 0
    frame = SwapFrame(stage2, acc, single)
    keys = [stage2.where[ti][1] for ti in single]
    pos = frame.positions(stage2.where)
    swaps = stalled = 0
    progress = True
    while progress and not budget.expired() and stalled < PATIENCE:
        progress = False
        for ph in sorted(range(len(PHASES)), key=lambda p: -acc.phase_max[p] / stage2.scale[p]):
            if budget.expired():
                break
            top, level = acc.busiest(ph)
            if level <= 0:
                continue
            partner = _best_partners(stage2, frame, acc, keys, pos, acc.index.of[top], ph, level, budget)
            for t, u in partner:
                kt, ku = keys[t], keys[u]
                step = acc.step
                if stage2.move_exactly(placements, acc, [(single[t], ku), (single[u], kt)],
                                       keep=lambda: acc.step <= step * (1 + 1e-12)
                                       and acc.loads[top] < level * (1 - 1e-12)):
                    keys[t], keys[u] = ku, kt
                    pos[t], pos[u] = frame.at[ku], frame.at[kt]
                    swaps += 1
                    stalled = 0 if acc.step < step * (1 - 1e-9) else stalled + 1
                    progress = True
                    break
            if progress:
                break
    return swaps


def _best_partners(stage2: Assigner, frame: SwapFrame, acc: Accumulator, keys: list[tuple], pos: np.ndarray,
                   top: int, ph: int, level: float, budget: Budget):
    """For each table loading the load_array index ``top`` (heaviest there first), (its row, the row of the
    partner with the largest gain that passes the own-resource test and fits in memory), lazily: the caller
    stops at the first swap it keeps."""
    loads = acc.load_array
    on_top = np.where(pos == top, frame.load, 0.0).sum(axis=1)
    holders = np.flatnonzero(on_top > 0)
    holders = holders[np.argsort(-on_top[holders], kind="stable")]
    limit = np.array([level if p == ph else acc.phase_max[p] for p in frame.phase.tolist()])
    ids: dict[tuple, int] = {}
    key_id = np.array([ids.setdefault(k, len(ids)) for k in keys])
    for t in holders.tolist():
        kt = keys[t]
        at_t, load_t = pos[t], frame.load[t]
        d_top = int(np.flatnonzero(at_t == top)[0])
        gain = load_t[d_top] - frame.load[:, d_top]
        # u's loads on t's GPU, t's leaving; t's on u's GPU, u's leaving (as the loads are now)
        here = loads[pos]  # (tables, dims): the loads now where each table's dims lie
        into_t = loads[at_t][None, :] + frame.load - load_t[None, :]
        into_u = here + load_t[None, :] - frame.load
        ok = (gain > 0) & (key_id != key_id[t])
        ok &= ~np.any((into_t > limit * (1 - 1e-12)) & (into_t > loads[at_t][None, :] + 1e-18), axis=1)
        ok &= ~np.any((into_u > limit * (1 - 1e-12)) & (into_u > here + 1e-18), axis=1)
        budget.charge(effort.SWAP_S_PER_PAIR * len(keys))
        for u in np.flatnonzero(ok)[np.argsort(-gain[ok], kind="stable")].tolist():  # none on t's GPU (key_id)
            if _fits(stage2, acc, frame.tables[u], kt, frame.tables[t]) and \
                    _fits(stage2, acc, frame.tables[t], keys[u], frame.tables[u]):
                yield t, u
                break


def _fits(stage2: Assigner, acc: Accumulator, ti: int, key: tuple, leaving: int) -> bool:
    """Whether table ``ti`` fits in memory on the GPU of ``key`` once table ``leaving`` has left it."""
    rl, where, usable = stage2.sym.relabel, stage2.where, stage2.model.usable_memory
    for m, b in where[ti][0].own_mem:
        name = rl(key, m)
        freed = sum(b2 for m2, b2 in where[leaving][0].own_mem if rl(where[leaving][1], m2) == name)
        if acc.memory[name] - freed + b > usable[name]:
            return False
    return True
