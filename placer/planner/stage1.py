"""Stage 1 of the two-stage planner (two_stage.py): an aggregated ILP over option kinds (kinds.py).

A kind is an option on the canonical device node0/gpu0, node0, ...; the symmetry maps it onto any other. For
every resource class c (all HBMs, all NIC->fabric links, ...) with |c| members, the busiest member carries at
least the class average, and at least the load one table's kind alone puts on a member on top of the smallest
base load there:

    y_p >= (base[p,c] + sum_k x_k total_k[p,c]) / |c| + sum_g fixed_g[p] u_g    for every phase p, class c
    y_p >= sum_{k of t} x_k max_c (base_min[p,c] + peak_k[p,c])               for every table t, phase p
    y_p >= base_min[p,stream] + sum_{k of t} x_k stream_peak_k[p] + s_p       for the tables with the largest
          s_p = sum_k x_k every_gpu_k[p] + sum_g fixed_g[p] u_g              load on one GPU's stream
    sum_k x_k mem_k[c] <= |c| * usable(c)                                     for every memory class c

(peak_k and stream_peak_k include the fixed costs of the fused groups the kind uses on its device; s_p is what
every GPU's stream carries alike from the options chosen; u_g >= x_k for the options over all GPUs that open
group g on every GPU, whose fixed costs every GPU pays once; a replica group's in every stream row too, an hbm
or uvm group's only in the class average: see _every_gpu_groups.)

Every full plan satisfies these, so stage 1's optimum, and any valid bound on it, bounds the full
problem from below: that is the lower bound reported with the plan. The per-table peak rows are weak in
the relaxation (many tables each take a fraction of a kind with a high peak), so stage 1 adds peak levels
(problem.PeakLevels), placed where a first relaxation puts the phases. CBC's branch and bound barely moves
either side of this model in a minute (measured: production-856 on 128 GPUs), so stage 1 is the relaxation
(lp.py, HiGHS), a rounding of it (its integral tables stay, a small MIP chooses the rest), and then branch
and bound on the relaxation's bound with the time left (bound_tree.py: it splits where the relaxation mixes
a high-peak choice with a low one; production-856: 8.414 -> 8.51 ms in 18 s), whose integral leaves are
choices too.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Callable

import numpy as np

from placer.cost import AR, PHASES
from placer.forms.shardings import sharding_of
from placer.planner import ilp
from placer.planner.bound_tree import BoundTree
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.lp import Relaxation
from placer.planner.problem import CountRow, FixedGroup, PeakLevels, Problem
from placer.planner.schedule import SCHEDULE
from placer.planner.types import Family, Kind, Kinds, RowKey, RowKind, Stage1Result, row_kind


def solve_stage1(ctx: Context, kinds: Kinds, budget: Budget, gap: float, backend: str,
                 threads: int | None, problem: Problem | None = None,
                 rounded: Callable[[Problem, list[int], Relaxation], bool] | None = None) -> Stage1Result:
    """Solve the aggregated ILP as far as the time allows: its relaxation with peak levels
    (problem.PeakLevels) gives a first bound; a rounding of it (ilp.complete_relaxation), corrected by
    pigeonhole rows (problem.CountRow) where it packs loads that cannot be spread, gives the kinds; then
    branch and bound on the relaxation (bound_tree.py) raises the bound and may find a better choice.
    ``backend`` solves the whole MIP only if the relaxation fails. Time: ``budget``, split by schedule.py (the
    relaxations at least 10 s each). ``problem``: the aggregated problem (default: build_stage1's; it gains peak
    levels and pigeonhole rows here)."""
    tracker = ctx.tracker
    problem = problem if problem is not None else build_stage1(ctx, kinds)
    nvars = problem.num_options + problem.num_phases
    tracker.update("stage 1: relaxation", bound_s=problem.simple_lower_bound())
    lp_time = SCHEDULE.relaxation_s(budget)  # everything after needs a relaxation: let it finish
    # first without peak levels (a smaller LP: 1.4 s on production-856 on 128 GPUs), to see where the phases
    # lie; then the levels up to twice that, added to it (0.7 s more from its basis; the bound 21.657 ms,
    # where a relaxation with 32 levels first and 64 up to its phase times, each afresh, took 5.9 s to 21.654)
    problem.levels = []
    relaxation = Relaxation(problem)
    values, lp_bound = relaxation.solve(budget.child(lp_time))
    if values is not None:
        tracker.update(bound_s=lp_bound)
        problem.levels = peak_levels(problem, 64, cap=2 * problem.phase_times(values))
        relaxation.add_levels(problem.levels)
        again, bound = relaxation.solve(budget.child(lp_time))
        if again is not None:
            values, lp_bound = again, max(lp_bound, bound)
            tracker.update(bound_s=lp_bound)
        else:  # not solved in time: the levels are in its rows, and the last values are from before them
            relaxation = Relaxation(problem)
    tracker.update("stage 1: rounding")
    if values is None:
        # the whole MIP would overrun a spent time limit
        if not budget.deterministic and not budget.allows(SCHEDULE.whole_mip_min_s):
            return Stage1Result(ilp.IlpResult(None, "no_solution", None, problem.simple_lower_bound(),
                                              budget.elapsed(), nvars, 0, "none", backend), problem, [])
        return Stage1Result(ilp.solve(problem, backend=backend, gap=gap, threads=threads, budget=budget), problem, [])
    chosen = ilp.complete_relaxation(problem, values, budget=budget.child(SCHEDULE.rounding_s(budget)))
    found = [chosen] if chosen is not None else []  # every choice stage 1 makes on the way
    flat = [k for ks in kinds for k in ks]
    group_of = {i: gi for gi, g in enumerate(problem.groups) for i in g}
    while chosen is not None and budget.allows(SCHEDULE.pigeonhole_need_s(budget)):
        # pigeonhole: N loads of s seconds on m identical resources put ceil(N/m) of them on one; where
        # the rounding ignores that, add the row and round again, freeing the tables that carry such loads
        x = np.zeros(problem.num_options)
        x[chosen] = 1.0
        rows = count_rows(ctx, problem, flat, x, per_class=2)
        if not rows:
            break
        problem.counts += rows
        relaxation.add_counts(rows)
        free = {group_of[int(i)] for row in rows for i in row.ids if x[i] > 0}
        if len(free) > len(problem.groups) / 3:  # that rounding would be the whole MIP again
            break
        again = ilp.complete_relaxation(problem, values, free=free,
                                        budget=budget.child(SCHEDULE.rounding_s(budget)))
        if again is None or problem.objective(again) >= problem.objective(chosen):
            break
        chosen = again
        found.append(chosen)
    tree = None
    tree_beside = chosen is not None and rounded is not None and rounded(problem, chosen, relaxation)
    # a second of splits raises the bound (0.6 ms on production-856)
    if chosen is not None and not tree_beside and budget.allows(SCHEDULE.tree_min_s):
        tracker.update("stage 1: branch and bound on the bound")
        # no gap: the plan lands above stage 1's incumbent, so leaves within the gap of it still matter
        tree = BoundTree(problem, relaxation).run(problem.objective(chosen), budget)
        lp_bound = max(lp_bound, tree.bound_s)
        tracker.update(bound_s=lp_bound)
        if tree.chosen is not None:
            chosen = tree.chosen
            found.append(chosen)
    wall = budget.elapsed()
    others = sorted((c for i, c in enumerate(found) if c != chosen and c not in found[:i]), key=problem.objective)
    if chosen is None:
        return Stage1Result(ilp.IlpResult(None, "no_solution", None, lp_bound, wall, nvars, 0, "none", backend),
                            problem, others)
    objective = problem.objective(chosen)
    bound = min(max(lp_bound, problem.simple_lower_bound()), objective)
    how = "relaxation with peak levels, rounded" + (
        f"; {tree.nodes} splits of the relaxation, {tree.lp_solves} LPs" if tree is not None else "")
    result = ilp.IlpResult(chosen, "optimal" if objective - bound <= gap * objective else "feasible", objective,
                           bound, wall, nvars, len(problem.load_rows) + len(problem.mem_rows), "none",
                           f"{backend} + highs ({how})")
    return Stage1Result(result, problem, others)


def count_rows(ctx: Context, problem: Problem, flat: list[Kind], values: np.ndarray,
               per_class: int = 1) -> list[CountRow]:
    """Pigeonhole rows (problem.CountRow) that ``values`` (a choice, or a relaxation's values) violates:
    on a class of m resources, N loads of at least s seconds put ceil(N / m) of them on one member. For
    each (phase, class), the ``per_class`` sizes s whose rows are most violated."""
    y = problem.phase_times(values)
    items: dict[tuple[int, str], tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    spread: dict[tuple[int, str], tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for i, k in enumerate(flat):
        target = spread if k.family == Family.ALL else items
        for key, loads in k.members.items():
            ids, sizes = target[key]
            ids.extend([i] * len(loads))
            sizes.extend(loads)
    rows = []
    for (ph, c), (ids, sizes) in items.items():
        m = ctx.sym.class_size[c]
        if m < 2:
            continue
        ids_a, sizes_a = np.asarray(ids), np.asarray(sizes)
        order = np.argsort(-sizes_a)
        cum = np.cumsum(values[ids_a[order]])  # relaxed count of loads >= each size
        s_ids, s_coef = spread.get((ph, c), ([], []))
        s_ids, s_coef = np.asarray(s_ids, dtype=np.int64), np.asarray(s_coef)
        base = ctx.base_min.get((ph, c), 0.0) + float(s_coef @ values[s_ids])
        lhs = base + sizes_a[order] * np.ceil(cum / m - 1e-6)
        last = np.append(sizes_a[order][1:] != sizes_a[order][:-1], True)  # last of each size: its full count
        lhs[~last] = -np.inf
        for pos in np.argsort(-lhs)[:per_class]:
            if lhs[pos] <= y[ph] * (1 + 1e-6):
                break
            size = float(sizes_a[order][pos])
            sel = sizes_a >= size * (1 - 1e-12)
            uniq, counts = np.unique(ids_a[sel], return_counts=True)
            rows.append(CountRow(ph, ctx.base_min.get((ph, c), 0.0), size, m, uniq, counts, s_ids, s_coef))
    return rows


def without_stream_rows(problem: Problem) -> Problem:
    """``problem`` as build_stage1 wrote it, less the stream rows, their spread and the fixed groups (a weaker
    bound; a different choice for stage 2 to try): no peak levels or pigeonhole rows yet."""
    load_rows = {k: v for k, v in problem.load_rows.items() if row_kind(k[1]) is not RowKind.STREAM}
    return dataclasses.replace(problem, levels=[], counts=[], spread={}, spread_rows=frozenset(), fixed_groups=[],
                               load_rows=load_rows)


def build_stage1(ctx: Context, kinds: Kinds) -> Problem:
    """The aggregated ILP as a Problem (rows described in the module docstring)."""
    flat = [k for ks in kinds for k in ks]
    groups, oid = [], 0
    for ks in kinds:
        groups.append(list(range(oid, oid + len(ks))))
        oid += len(ks)
    load_cols: dict[tuple[int, str], tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for i, k in enumerate(flat):
        for (ph, c), v in k.totals.items():
            ids, vals = load_cols[(ph, c)]
            ids.append(i)
            vals.append(v / ctx.sym.class_size[c])
    for ti, ks in enumerate(kinds):
        for ph in range(len(PHASES)):
            if any(k.peak[ph] for k in ks):
                load_cols[(ph, RowKey(RowKind.TABLE, ti))] = (groups[ti], [k.peak[ph] for k in ks])
    load_base = {(ph, c): v / ctx.sym.class_size[c] for (ph, c), v in ctx.base_total.items()}
    # The all-reduce rings are not symmetric (they wrap around the nodes), but every all-reduce over all
    # GPUs loads the links in the same proportions: on the link the dense model's all-reduce loads most,
    # the load is exactly base + sum of the data-parallel tables' bytes x that link's seconds per byte.
    ar_links = {r: v for (ph, r), v in ctx.model.base_cost.loads.items() if ph == AR and "->" in r}
    if ar_links:
        worst = max(ar_links, key=ar_links.get)
        unit = dict(ctx.model.traffic.unit_allreduce(tuple(ctx.topo.gpus)))
        ids = [i for i, k in enumerate(flat) if sharding_of(k.placement).whole_copies and k.family == Family.ALL]
        key = (AR, RowKey(RowKind.EXACT, worst))
        load_base[key] = ar_links[worst]
        if ids and worst in unit:
            load_cols[key] = (ids, [ctx.model.tables[flat[i].placement.table].rows
                                    * ctx.model.tables[flat[i].placement.table].dim * 4 * unit[worst]
                                    for i in ids])
    mem_cols: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for i, k in enumerate(flat):
        for c, b in k.mem_totals.items():
            ids, vals = mem_cols[c]
            ids.append(i)
            vals.append(b)
    spread, spread_rows = _stream_rows(ctx, kinds, groups, load_cols, load_base)
    fixed_groups = _every_gpu_groups(ctx, kinds, groups, spread_rows)
    problem = Problem(
        groups=groups, num_phases=len(PHASES),
        load_rows={k: (np.asarray(i, dtype=np.int64), np.asarray(v)) for k, (i, v) in load_cols.items()},
        load_base=load_base,
        mem_rows={k: (np.asarray(i, dtype=np.int64), np.asarray(v)) for k, (i, v) in mem_cols.items()},
        mem_capacity={c: ctx.sym.class_size[c] * ctx.mem_usable[c] for c in mem_cols},
        fixed_s=sum(ctx.model.fixed_latency_s.values()), spread=spread, spread_rows=frozenset(spread_rows),
        fixed_groups=fixed_groups)
    return problem


def _every_gpu_groups(ctx: Context, kinds: Kinds, groups: list[list[int]], spread_rows: list) -> list:
    """The fused groups that options over all GPUs open on every GPU, whose fixed costs every GPU's stream then
    pays once (FixedGroup, problem.py). A replica group (location 'replica': only options over all GPUs use
    it) counts in the class average and in every stream row; an hbm or uvm group (a row-wise table over all
    GPUs) only in the class average: single-GPU options may share it, and a stream row counts their groups in
    the table's own stream peak (counting it twice would not be valid), while the class average counts no
    single-GPU option's group."""
    stream_class = ctx.gpu_classes[0]
    by_type: dict[tuple, tuple[list[float], dict[int, list[int]]]] = {}
    for ti, ks in enumerate(kinds):
        for k, oid in zip(ks, groups[ti]):
            for gtype, per_phase in k.every_gpu_groups:
                entry = by_type.setdefault(gtype, (per_phase, defaultdict(list)))
                entry[1][ti].append(oid)
    out = []
    for gtype, (per_phase, per_table) in by_type.items():
        charges = {}
        for ph, seconds in enumerate(per_phase):
            if seconds:
                charges[(ph, stream_class)] = seconds
                for key in (spread_rows if gtype[0] == "replica" else ()):
                    if key[0] == ph:
                        charges[key] = seconds
        if charges:
            out.append(FixedGroup(charges, [np.asarray(ids, dtype=np.int64) for ids in per_table.values()], gtype))
    return out


#: Per phase, the tables whose largest load on one GPU's stream is highest get a stream row (STREAM_ROWS of them).
STREAM_ROWS = 128


def _stream_rows(ctx: Context, kinds: Kinds, groups: list[list[int]], load_cols: dict,
                 load_base: dict) -> tuple[dict, list]:
    """Per-table rows on the GPU that holds the table: its stream carries the smallest base load, the table's
    own load there with its groups' fixed costs (Kind.stream_peak), and everything every GPU's stream carries
    alike from the options chosen (Kind.every_gpu, summed as the phase's spread s_phase, problem.py):

        y_phase >= base_min + sum_{k of t} x_k stream_peak_k + s_phase,   s_phase = sum_k x_k every_gpu_k

    Valid for every plan (an option over all GPUs has no stream peak of its own: its load is in s_phase). The
    class-average and peak rows see neither the loads options over all GPUs stack on a busy GPU nor the fixed
    costs of the groups. Adds to ``load_cols``/``load_base``; returns (spread, the rows' keys)."""
    stream_class = ctx.gpu_classes[0]
    flat = [k for ks in kinds for k in ks]
    spread = {}
    for ph in range(len(PHASES)):
        ids = [i for i, k in enumerate(flat) if k.every_gpu and k.every_gpu[ph] > 0]
        if ids:
            spread[ph] = (np.asarray(ids, dtype=np.int64), np.asarray([flat[i].every_gpu[ph] for i in ids]))
    keys = []
    for ph in range(len(PHASES)):
        peaks = [max((k.stream_peak[ph] for k in ks if k.stream_peak), default=0.0) for ks in kinds]
        top = [ti for ti in np.argsort(peaks)[::-1][:STREAM_ROWS] if peaks[ti] > 0]
        for ti in top:
            key = (ph, RowKey(RowKind.STREAM, int(ti)))
            load_cols[key] = (groups[ti], [k.stream_peak[ph] if k.stream_peak else 0.0 for k in kinds[ti]])
            load_base[key] = ctx.base_min.get((ph, stream_class), 0.0)
            keys.append(key)
    return spread, keys


def peak_levels(problem: Problem, count: int, cap: np.ndarray | None = None) -> list[PeakLevels]:
    """Peak levels (problem.PeakLevels) for every phase: ``count`` quantiles of the options' peaks above the
    phase's floor and up to ``cap`` (s, per phase; levels where the peaks are dense, so that each separates
    many options), and one at the highest peak."""
    peaks = problem.table_peaks()
    floor = problem.phase_floors()
    out = []
    for ph, pk in enumerate(peaks):
        top = float(pk.max())
        if top <= floor[ph] * (1 + 1e-9):
            continue
        above = np.unique(pk[pk > floor[ph]])
        if cap is not None and (above <= cap[ph]).any():
            above = above[above <= cap[ph]]
        levels = np.unique(np.append(np.quantile(above, np.linspace(0, 1, count)), top))
        members: list[list[np.ndarray]] = [[] for _ in levels]
        # a group's row at level j only where its set changes above j (the chain does the rest)
        for g in problem.groups:
            g_peaks = pk[g]
            reach = [frozenset(np.asarray(g)[g_peaks >= level * (1 - 1e-12)].tolist()) for level in levels]
            for j, ids in enumerate(reach):
                if ids and (j + 1 == len(levels) or reach[j + 1] != ids):
                    members[j].append(np.asarray(sorted(ids), dtype=np.int64))
        out.append(PeakLevels(ph, float(floor[ph]), list(np.diff(np.concatenate([[floor[ph]], levels]))), members))
    return out
