"""Stage 2's pairwise repacking: two GPUs split their single-GPU tables between them anew.

Re-insertions move one table, swaps exchange two; neither can lower a phase's busiest resource once the
other GPUs are packed to some phase's maximum (synthetic-1000 on 256 GPUs: 463 of the 512 NIC links within
0.5% of the exchange's maximum, the forward full on the GPUs of the column-wise blocks). Here the GPU that
holds a phase's busiest resource and each other GPU pool their single-GPU tables (at most ``MAX_POOLED``) and
every split of the pool between the two is scored at once in numpy, on the two GPUs' own resources (loads
relabeled through the cluster's symmetry, with the fixed costs of the fused groups each split leaves open on
each GPU; the rest of the cluster as it is). The split with the least step time, then the least
peak of the two in that phase, then the least sum of squared loads, wins when it lowers the busiest resource
and puts no new load at another phase's maximum (so repacks cannot trade one phase against another in
circles); it is then priced exactly and kept only if no phase's exact maximum rose.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np

from placer.cost import PHASES
from placer.plan import Placement
from placer.planner import effort
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner
from placer.planner.budget import Budget

#: Most tables two GPUs split (2**MAX_POOLED splits are scored per pair); pairs holding more are left out (a
#: sub-pool of the tables loading the phase most did worse: production-856 on 16 GPUs 31.8 -> 32.3 ms).
MAX_POOLED = 12
#: Repacking stops after this many repacks in a row that left the step time as it was: each lowers one GPU's
#: busiest resource, and where many GPUs share a phase's maximum that rarely reaches the step (production-856
#: on 128 GPUs: 2 of 1,299 repacks in 30 s lowered it, by 0.0004 ms; synthetic-1000 on 256 GPUs: 8 of 9).
PATIENCE = 16
_LOCAL = ("node0/gpu0", "node0/nic0")  # a canonical resource naming these belongs to one GPU alone


def _local(name: str) -> bool:
    return any(token in name for token in _LOCAL)


class GpuFrame:
    """The single-GPU tables of a plan in the coordinates of one GPU: every canonical own resource (phase,
    name) that belongs to the GPU alone is a dimension; each table is a vector of its loads (s) there, each
    GPU a row of indices into Accumulator.load_array; GPU memory likewise."""

    def __init__(self, stage2: Assigner, acc: Accumulator, tables: list[int]):
        where, rl, index = stage2.where, stage2.sym.relabel, acc.index
        dims = sorted({(ph, r) for ti in tables for ph, r, _ in where[ti][0].own if _local(r)})
        mems = sorted({m for ti in tables for m, _ in where[ti][0].own_mem if _local(m)})
        self.dims, self.phase = dims, np.array([ph for ph, _ in dims], dtype=np.int64)
        at = {d: i for i, d in enumerate(dims)}
        mat = {m: i for i, m in enumerate(mems)}
        self.load = {}
        self.mem = {}
        for ti in tables:
            v = np.zeros(len(dims))
            for ph, r, s in where[ti][0].own:
                if (ph, r) in at:
                    v[at[(ph, r)]] += s
            b = np.zeros(len(mems))
            for m, n_bytes in where[ti][0].own_mem:
                if m in mat:
                    b[mat[m]] += n_bytes
            self.load[ti], self.mem[ti] = v, b
        self.keys = [stage2.sym.gpu_key(g) for g in stage2.topo.gpus]
        self.load_at = {k: np.array([index.of[(ph, rl(k, r))] for ph, r in dims], dtype=np.int64) for k in self.keys}
        self.mem_at = {k: np.array([index.mem_of[rl(k, m)] for m in mems], dtype=np.int64) for k in self.keys}
        self.owner = {int(i): k for k in self.keys for i in self.load_at[k]}  # load index -> GPU key
        self._groups(stage2, acc, tables, at)

    def _groups(self, stage2: Assigner, acc: Accumulator, tables: list[int], at: dict) -> None:
        """The fused groups the tables use on their GPU (canonical), numbered: ``uses`` maps a table to the numbers
        of its groups, ``fixed`` (groups, dims) holds their fixed costs (s), paid once per GPU where a table uses
        the group; ``group_at`` maps a GPU key to the LoadIndex.group_id of every group relabeled onto it."""
        where, rl, index = stage2.where, stage2.sym.relabel, acc.index
        column: dict = {}
        charges: list[np.ndarray] = []
        self.uses = {}
        for ti in tables:
            kind = where[ti][0]
            row = []
            for g, per_pos in kind.groups:
                if g not in column:
                    column[g] = len(charges)
                    vec = np.zeros(len(self.dims))
                    for pos, seconds in per_pos:
                        ph, r, _ = kind.own[pos]
                        if (ph, r) in at:
                            vec[at[(ph, r)]] += seconds
                    charges.append(vec)
                row.append(column[g])
            self.uses[ti] = row
        self.fixed = np.array(charges).reshape(len(charges), len(self.dims))
        groups = list(column)
        self.group_at = {k: np.array([index.group_id(dataclasses.replace(g, device=rl(k, g.device)))
                                      for g in groups], dtype=np.int64) for k in self.keys}

    def membership(self, tables: list[int]) -> np.ndarray:
        """(tables, groups): 1 where the table uses the group."""
        out = np.zeros((len(tables), len(self.fixed)))
        for i, ti in enumerate(tables):
            out[i, self.uses[ti]] = 1.0
        return out

    def group_base(self, acc: Accumulator, key: tuple, leaving: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For the GPU ``key`` once ``leaving`` (per group: how many tables there that use it) are gone: (the fixed
        costs (s, over dims) of the groups that then close, whether each group stays open through other placements
        there)."""
        users = acc.users_of(self.group_at[key])
        left = users - leaving
        closing = (users > 0) & (left <= 0)
        return closing.astype(np.float64) @ self.fixed, left > 0


def repack(stage2: Assigner, placements: list[Placement], acc: Accumulator, budget: Budget) -> int:
    """Repack pairs of GPUs (module docstring) while the busiest resource of some phase comes down, the step
    time does too at least once in PATIENCE repacks, and ``budget`` lasts. Returns the number of pairs repacked;
    ``placements``, ``acc`` and ``stage2.where`` change in place."""
    tables = stage2.single_gpu_tables()
    if not tables:
        return 0
    frame = GpuFrame(stage2, acc, tables)
    scale = np.asarray(stage2.scale)[frame.phase]
    done = stalled = 0
    progress = True
    while progress and not budget.expired() and stalled < PATIENCE:
        progress = False
        on: dict[tuple, list[int]] = {k: [] for k in frame.keys}
        for ti in tables:
            on[stage2.where[ti][1]].append(ti)
        for ph in sorted(range(len(PHASES)), key=lambda p: -acc.phase_max[p] / stage2.scale[p]):
            if budget.expired():
                break
            top, level = acc.busiest(ph)
            g = frame.owner.get(acc.index.of[top])
            if g is None or level <= 0 or not on[g]:
                continue
            best = _best_split(frame, acc, on, g, ph, level, scale)
            budget.charge(effort.REPACK_S_PER_PARTNER * len(frame.keys))
            step = acc.step
            if best is not None and _apply(stage2, placements, acc, on, g, best, top, level):
                done += 1
                stalled = 0 if acc.step < step * (1 - 1e-9) else stalled + 1
                progress = True
                break
    return done


def _best_split(frame: GpuFrame, acc: Accumulator, on: dict[tuple, list[int]], g: tuple, ph: int, level: float,
                scale: np.ndarray):
    """(partner key, tables that end on g, tables that end on the partner) of the best split that lowers the
    peak of phase ``ph`` on both GPUs below ``level`` without raising the step (on their own resources); None
    if no pair does."""
    loads = acc.load_array
    in_phase = frame.phase == ph
    # each phase's largest loads elsewhere: the step's other terms (the two GPUs' own entries left out below)
    order = {p: np.argsort(-loads[acc.index.phase(p)])[:4 * len(frame.dims) + 1] + acc.index.phase(p).start
             for p in set(frame.phase.tolist())}
    phases = sorted(order)
    step_now = acc.step
    best = None
    from_g = on[g]
    for h in frame.keys:
        from_h = on[h]
        pool = from_g + from_h
        if h == g or not from_h or len(pool) > MAX_POOLED:
            continue
        split, load_g, load_h, fits = split_loads(frame, acc, on, g, h)
        mine = set(frame.load_at[g].tolist()) | set(frame.load_at[h].tolist())
        now = np.maximum(loads[frame.load_at[g]], loads[frame.load_at[h]])
        step = np.zeros(len(split))
        ok = fits.copy()
        for p in phases:
            rest = next((loads[i] for i in order[p] if int(i) not in mine), 0.0)
            cols = frame.phase == p
            peak_p = np.maximum(load_g[:, cols].max(axis=1), load_h[:, cols].max(axis=1))
            step += np.maximum(rest, peak_p)
            if p != ph:  # no new load at another phase's maximum: repacks cannot cycle between phases
                ok &= peak_p <= max(float(now[cols].max()), acc.phase_max[p] * (1 - 1e-9))
        step += sum(acc.phase_max[p] for p in range(len(PHASES)) if p not in order)
        peak = np.maximum(load_g[:, in_phase].max(axis=1), load_h[:, in_phase].max(axis=1))
        ok &= (step <= step_now * (1 + 1e-12)) & (peak < level * (1 - 1e-9))
        if not ok.any():
            continue
        imbalance = ((load_g**2 + load_h**2) / scale**2).sum(axis=1)
        cand = np.flatnonzero(ok)
        i = cand[np.lexsort((imbalance[cand], peak[cand], step[cand]))[0]]
        score = (step[i], peak[i], imbalance[i])
        if best is None or score < best[0]:
            chosen = split[i].astype(bool)
            best = (score, h, [t for t, c in zip(pool, chosen) if c], [t for t, c in zip(pool, chosen) if not c])
    return None if best is None else best[1:]


def split_loads(frame: GpuFrame, acc: Accumulator, on: dict[tuple, list[int]], g: tuple, h: tuple
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every split of the single-GPU tables on GPUs ``g`` and ``h`` (``on``: GPU key -> its tables) between
    the two: (splits (2**n, n), 1 where the pool's table, ``on[g] + on[h]`` in order, ends on g; the loads (s) on
    g's and on h's frame dims after each split, with the fixed costs of the fused groups the split leaves open
    there; whether each split fits in memory). A group that another placement on the GPU also uses stays open
    (its fixed costs in the loads now); one only the pool's tables use closes where none of them stays."""
    loads, pool, n_g = acc.load_array, on[g] + on[h], len(on[g])  # the pool: g's tables, then h's
    vec = np.array([frame.load[t] for t in pool])
    mem = np.array([frame.mem[t] for t in pool])
    uses = frame.membership(pool)
    split = _splits(len(pool))
    closing_g, open_g = frame.group_base(acc, g, uses[:n_g].sum(axis=0))
    closing_h, open_h = frame.group_base(acc, h, uses[n_g:].sum(axis=0))
    base_g = loads[frame.load_at[g]] - vec[:n_g].sum(axis=0) - closing_g
    base_h = loads[frame.load_at[h]] - vec[n_g:].sum(axis=0) - closing_h
    on_g = split @ vec
    users_g = split @ uses  # (splits, groups): tables of the pool that use each group on g
    opened_g = ((users_g > 0) & ~open_g).astype(np.float64) @ frame.fixed
    opened_h = ((users_g < uses.sum(axis=0)) & ~open_h).astype(np.float64) @ frame.fixed
    load_g, load_h = base_g + on_g + opened_g, base_h + vec.sum(axis=0) - on_g + opened_h
    if not mem.shape[1]:
        return split, load_g, load_h, np.ones(len(split), dtype=bool)
    mem_g = split @ mem
    used_g = acc.memory_array[frame.mem_at[g]] - mem[:n_g].sum(axis=0)
    used_h = acc.memory_array[frame.mem_at[h]] - mem[n_g:].sum(axis=0)
    cap_g, cap_h = acc.index.usable[frame.mem_at[g]], acc.index.usable[frame.mem_at[h]]
    fits = np.all(used_g + mem_g <= cap_g, axis=1) & np.all(used_h + mem.sum(axis=0) - mem_g <= cap_h, axis=1)
    return split, load_g, load_h, fits


@lru_cache(maxsize=None)
def _splits(n: int) -> np.ndarray:
    """(2**n, n): every split of n tables between two GPUs (1: on the first)."""
    return ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(np.float64)


def _apply(stage2: Assigner, placements: list[Placement], acc: Accumulator, on: dict[tuple, list[int]],
           g: tuple, split, top: tuple[int, str], level: float) -> bool:
    """Move the tables of ``split`` (partner, to g, to partner) exactly; undo unless the busiest resource came
    down and no phase's maximum rose."""
    h, to_g, to_h = split
    moving = [(t, g) for t in to_g if stage2.where[t][1] != g] + [(t, h) for t in to_h if stage2.where[t][1] != h]
    before = list(acc.phase_max)
    if not moving or not stage2.move_exactly(
            placements, acc, moving, keep=lambda: acc.loads[top] < level * (1 - 1e-12)
            and all(a <= b * (1 + 1e-12) for a, b in zip(acc.phase_max, before))):
        return False
    for t, key in moving:
        on[key].append(t)
        on[h if key == g else g].remove(t)
    return True
