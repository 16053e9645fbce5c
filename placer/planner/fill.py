"""Stage 2's fill of starved GPUs: a MIP chooses what the GPUs that a multi-GPU option fills should hold.

A hot table's column-wise block can fill its node's 8 GPUs to the forward's maximum; the assignment then puts
nothing that sends on them (anything raises the forward), so their NIC links idle in the exchange while every
other GPU's are packed (production-856 on 128 GPUs: 0.25 ms against 1.48 ms), and the node's links, which
receive the exchange of every table off the node, receive the most. Letting the forward grow a little there
pays when the tables that send most per byte of HBM read go to those GPUs. Re-insertions cannot find this
(the first table moved raises the step and lowers nothing), so here:

* starved GPUs: those whose load in the phase furthest above stage 1's time (at least EXCESS) is under
  STARVED of its maximum, while another phase is at FULL of its maximum on them, BLOCK_SHARE of it from
  multi-GPU options (at most MAX_STARVED, the most starved); the starved phases: those
  above stage 1's time where all of them are starved; the full phases: the others where any of them is full;
* a MIP (HiGHS) picks the single-GPU tables they hold, minimizing the estimated step time: each starved phase
  at the most of the starved GPUs' loads and of its maximum now less what every other GPU sheds on average;
  each full phase at the most of its maximum now and the starved GPUs' loads (at most MAX_GROWTH higher);
  every other phase within its maximum; memory within capacity;
* the pins: those tables, and the multi-GPU options on those GPUs, stay there while stage 2 assigns the rest
  anew (stage2.py), which keeps the new plan only if its exact step time is less.

Measured on production-856 on 128 GPUs (one stage-1 choice): 8.862 -> 8.761 ms; the MIP's estimate of each
phase was within 0.01 ms of the plan's. Loads are on each GPU's own resources as repack.py frames them.
"""
from __future__ import annotations

import highspy
import numpy as np
import scipy.sparse as sp

from placer.planner import effort
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner
from placer.planner.budget import Budget
from placer.planner.highs_banner import new_highs
from placer.planner.repack import GpuFrame
from placer.planner.types import Family, Kind

#: A starved GPU's load in a starved phase is under this fraction of the phase's maximum ...
STARVED = 0.5
#: ... and in some other phase at or above this fraction of that phase's maximum.
FULL = 0.95
#: ... the multi-GPU options on them alone taking this fraction of that maximum.
BLOCK_SHARE = 0.5
#: Most starved GPUs one MIP fills (the MIP has a column per table and starved GPU).
MAX_STARVED = 16
#: A phase is starved-for when stage 2's maximum exceeds stage 1's time by this factor.
EXCESS = 1.01
#: Most growth of a full phase, as a fraction of its maximum.
MAX_GROWTH = 0.05
#: Least estimated gain, as a fraction of the step time, worth assigning the rest anew around the pins (which
#: disturbs it: synthetic-1000 on 256 GPUs, estimated 0.34% better, came out 1.8% worse; production-856 on 128
#: GPUs, estimated 0.9%, came out 1.1% better).
MIN_GAIN = 0.005
#: The MIP's time (the best split found by then is used): schedule.Schedule.fill_mip_s.


def fill_starved(stage2: Assigner, acc: Accumulator, budget: Budget, seconds: float
                 ) -> dict[int, tuple[Kind, tuple]] | None:
    """Pins (table -> (kind, symmetry key)) for assigning the plan in ``acc`` / ``stage2.where`` anew with its
    starved GPUs filled (module docstring); None if it has none, or the MIP finds nothing in ``seconds`` of
    ``budget`` (charged for its work) that it estimates MIN_GAIN better."""
    where = stage2.where
    tables = stage2.single_gpu_tables()
    if not tables:
        return None
    frame = GpuFrame(stage2, acc, tables)
    keys = frame.keys
    at = np.array([frame.load_at[k] for k in keys])  # (GPUs, own dims) indices into acc.load_array
    loads = acc.load_array[at]  # s
    phases = sorted(set(frame.phase.tolist()))
    peak = {p: loads[:, frame.phase == p].max(axis=1) for p in phases}
    top = {p: acc.phase_max[p] for p in phases}
    # what multi-GPU options alone put on each GPU's own resources: a GPU counts as full only through them
    multi = np.zeros(len(acc.load_array))
    for kind, key in where.values():
        if kind.family in (Family.BLOCK, Family.NODE):
            for ph, r, v in kind.own:
                i = acc.index.of.get((ph, stage2.sym.relabel(key, r)))
                if i is not None:
                    multi[i] += v
    by_multi = multi[at]
    full = {p: (peak[p] >= FULL * top[p]) & (by_multi[:, frame.phase == p].max(axis=1) >= BLOCK_SHARE * top[p])
            for p in phases}
    starved = {p: peak[p] <= STARVED * top[p] for p in phases}
    # the phase furthest above stage 1's time that some GPU, full in another phase, is starved in
    worst = None
    for p in sorted(phases, key=lambda p: -top[p] / stage2.scale[p]):
        if top[p] <= stage2.scale[p] * EXCESS:
            break
        if (starved[p] & np.any([full[q] for q in phases if q != p], axis=0)).any():
            worst = p
            break
    if worst is None:
        return None
    picked = np.flatnonzero(starved[worst] & np.any([full[q] for q in phases if q != worst], axis=0))
    gpus = np.sort(picked[np.argsort(peak[worst][picked], kind="stable")[:MAX_STARVED]])  # the most starved
    if len(gpus) == len(keys):
        return None
    starved_phases = [p for p in phases if top[p] > stage2.scale[p] * EXCESS and starved[p][gpus].all()]
    full_phases = [q for q in phases if q not in starved_phases and full[q][gpus].any()]
    on = {k: [] for k in keys}
    for t in tables:
        on[where[t][1]].append(t)
    vec = np.array([frame.load[t] for t in tables])  # (tables, dims), s
    mem = np.array([frame.mem[t] for t in tables]).reshape(len(tables), -1)
    row = {t: i for i, t in enumerate(tables)}
    base = loads[gpus].copy()  # the starved GPUs without their single-GPU tables
    mem_at = np.array([frame.mem_at[keys[g]] for g in gpus]).reshape(len(gpus), -1)
    free = acc.index.usable[mem_at] - acc.memory_array[mem_at]
    for j, g in enumerate(gpus):
        for t in on[keys[g]]:
            base[j] -= vec[row[t]]
            free[j] += mem[row[t]]
    # the dimension that sets each starved phase: its busiest column
    busiest = {p: int(np.argmax(np.where(frame.phase == p, loads.max(axis=0), -np.inf))) for p in starved_phases}
    got = _choose(frame.phase, vec, mem, base, free, top, starved_phases, full_phases, busiest,
                  loads[gpus].sum(axis=0), len(keys) - len(gpus), MIN_GAIN * acc.step, budget, seconds)
    if got is None or got[1] < MIN_GAIN * acc.step:
        return None
    held = got[0]
    pins: dict[int, tuple[Kind, tuple]] = {}
    for j, g in enumerate(gpus):
        for i in np.flatnonzero(held[:, j] > 0.5):
            pins[tables[i]] = (where[tables[i]][0], keys[g])
    gpu_names = list(stage2.topo.gpus)  # in the order of frame.keys
    names = {gpu_names[g] for g in gpus}
    for t, (kind, key) in where.items():  # multi-GPU options on the starved GPUs stay with them
        if (kind.family not in (Family.GPU, Family.ALL)
                and names & {s.device for s in stage2.relabeled(kind, key).shards}):
            pins[t] = (kind, key)
    return pins


def _choose(phase: np.ndarray, vec: np.ndarray, mem: np.ndarray, base: np.ndarray, free: np.ndarray,
            top: dict[int, float], starved: list[int], full: list[int], busiest: dict[int, int],
            held_now: np.ndarray, others: int, least_gain_s: float, budget: Budget, seconds: float
            ) -> tuple[np.ndarray, float] | None:
    """((tables, starved GPUs) 0/1, estimated gain s): which tables the starved GPUs hold, by a MIP that
    minimizes the estimated step time: each starved phase at the most of the starved GPUs' loads and of its
    maximum now less what every other GPU sheds on average (``held_now``: the starved GPUs' loads now, summed;
    ``others``: how many other GPUs), each full phase at the most of the starved GPUs' loads and its maximum now
    (growing at most MAX_GROWTH), every other phase within its maximum; memory within ``free``. None if it found
    nothing at least ``least_gain_s`` better than the plan now."""
    n_t, n_g = vec.shape[0], base.shape[0]
    n_x = n_t * n_g
    y_col = {p: n_x + i for i, p in enumerate(starved + full)}
    col = lambda t, g: t * n_g + g
    r, c, v, lo, hi = [], [], [], [], []

    def add(cols, vals, lower, upper):
        r.extend([len(lo)] * len(cols))
        c.extend(cols)
        v.extend(vals)
        lo.append(lower)
        hi.append(upper)

    inf = highspy.kHighsInf
    for t in range(n_t):  # at most one GPU each
        add([col(t, g) for g in range(n_g)], [1.0] * n_g, -inf, 1.0)
    for g in range(n_g):
        for d, p in enumerate(phase.tolist()):
            ts = np.flatnonzero(vec[:, d] > 0)
            if not len(ts):
                continue
            cols, vals = [col(t, g) for t in ts], (vec[ts, d] * 1e3).tolist()
            if p in y_col:  # Y_p >= base + loads
                add([y_col[p]] + cols, [1.0] + [-x for x in vals], float(base[g, d]) * 1e3, inf)
            else:
                add(cols, vals, -inf, max(0.0, top[p] - float(base[g, d])) * 1e3)
        for m in range(mem.shape[1]):
            ts = np.flatnonzero(mem[:, m] > 0)
            if len(ts):
                add([col(t, g) for t in ts], (mem[ts, m] / 2**30).tolist(), -inf,
                    max(0.0, float(free[g, m])) / 2**30)
    for p in starved:  # Y_p >= top - (held after - held now) / others
        d = busiest[p]
        ts = np.flatnonzero(vec[:, d] > 0)
        cols = [col(t, g) for t in ts for g in range(n_g)]
        add([y_col[p]] + cols, [1.0] + [float(vec[t, d]) * 1e3 / others for t in ts for g in range(n_g)],
            (top[p] - (float(base[:, d].sum()) - float(held_now[d])) / others) * 1e3, inf)
    d0 = busiest[starved[0]]
    for g in range(n_g - 1):  # identical GPUs: the first carries the most (one of the equal splits, not all)
        if np.allclose(base[g], base[g + 1]) and np.allclose(free[g], free[g + 1]):
            ts = np.flatnonzero(vec[:, d0] > 0)
            add([col(t, g) for t in ts] + [col(t, g + 1) for t in ts],
                (vec[ts, d0] * 1e3).tolist() + (-vec[ts, d0] * 1e3).tolist(), 0.0, inf)
    num_cols = n_x + len(y_col)
    cost = np.zeros(num_cols)
    col_lo, col_hi = np.zeros(num_cols), np.ones(num_cols)
    for p, j in y_col.items():
        cost[j] = 1.0
        col_lo[j] = 0.0 if p in starved else top[p] * 1e3
        col_hi[j] = top[p] * 1e3 * (1.0 if p in starved else 1.0 + MAX_GROWTH)
    a = sp.csr_matrix((v, (r, c)), shape=(len(lo), num_cols))
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = num_cols, a.shape[0]
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, col_lo, col_hi
    lp.row_lower_, lp.row_upper_ = np.asarray(lo), np.asarray(hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = a.indptr, a.indices, a.data
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = num_cols, a.shape[0]
    h = new_highs(threads=1)
    h.passModel(lp)  # first the relaxation: if even it gains too little, the MIP cannot
    h.run()
    info = h.getInfo()
    budget.charge(effort.lp_work(a.nnz, info.simplex_iteration_count, info.ipm_iteration_count,
                                 info.crossover_iteration_count))
    now_ms = sum(top[p] for p in y_col) * 1e3
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal or \
            now_ms - h.getInfo().objective_function_value < least_gain_s * 1e3:
        return None
    h.changeColsIntegrality(n_x, np.arange(n_x, dtype=np.int32), np.full(n_x, highspy.HighsVarType.kInteger))
    for option, value in effort.mip_limits(budget, seconds, a.nnz).items():
        h.setOptionValue(option, value)
    h.run()
    budget.charge(effort.mip_work(a.nnz, h.getInfo().mip_node_count))
    if h.getInfo().primal_solution_status != 2:
        return None
    gain_s = (now_ms - h.getInfo().objective_function_value) / 1e3
    return (np.asarray(h.getSolution().col_value)[:n_x].reshape(n_t, n_g) > 0.5).astype(np.float64), gain_s
