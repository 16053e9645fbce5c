"""Group counts for stage 1's MIP (problem.GroupCounts): the fused groups that options on single GPUs, blocks and
nodes open GPU by GPU, which stage 1's class-average rows do not count.

Stage 1 (stage1.py) charges a fused group's fixed cost to the GPUs' class average only where an option over all
GPUs opens it on every GPU; the groups single-GPU tables open are in their own per-table rows but nowhere in the
average. On production-856 @ dgx-h100-16node that is what stage 2's plans pay above stage 1 (measured at
2116b08: 0.145 ms of a 0.25 ms gap in the backward streams' mean). Counting them needs the most own load one
stream can take, which is not a constant; GroupCounts takes a level for it (``LEVEL`` times the own load of the
average stream under the rounding's choice) and a binary for the plans that exceed it, so the rows hold for every
plan. Measured there (the MIP of stage 1 as stage1_mip.py runs it, HiGHS 1.16, the rounding's choice as start;
``python3 validation/tune_planner.py group-level`` measures it again): stage 1's optimum 22.556 ms without the
counts (16 s on one core); with the backward phase's 14 group types counted, 22.608 ms at level 1.1, 22.606 at
1.15, 22.602-22.604 at 1.2, in 23-40 s; one level at 1.01 of the optimum's own load gave only 22.565 ms (plans
escape over it by moving replicas). Counting only the 5 types the start opens GPU by GPU gave the same 22.604 ms
in 19 s (the others are open on every GPU or unused); counting the forward phase too added 0.006 ms and took
32-43 s. So one phase, where the groups' fixed costs weigh most,
and the types the start opens GPU by GPU (any subset of the rows is valid).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from placer.planner.context import Context
from placer.planner.problem import CountedGroup, GroupCounts, Problem
from placer.planner.tuning import GROUP_LEVEL
from placer.planner.types import Family, Kind, Kinds

#: The level of a stream's own load, as a multiple of the average stream's under the start's choice (fitted:
#: tuning.GROUP_LEVEL).
LEVEL = GROUP_LEVEL


def group_counts(ctx: Context, kinds: Kinds, problem: Problem, chosen: list[int]) -> list[GroupCounts]:
    """GroupCounts for ``problem`` (stage 1's, built by stage1.build_stage1 from ``kinds``) in the phase where the
    groups' fixed costs are the largest share of the phase time under ``chosen``, with the level taken from
    ``chosen``; [] where nothing is to count."""
    stream_class = ctx.gpu_classes[0]
    flat = [k for ks in kinds for k in ks]
    x = np.zeros(problem.num_options)
    x[chosen] = 1.0
    times = problem.phase_times(x)
    spread = problem.spread_values(x)
    every = {fg.key: n for n, fg in enumerate(problem.fixed_groups) if fg.key}
    group_of = {i: gi for gi, g in enumerate(problem.groups) for i in g}
    charges = problem.fixed_charges(x)
    slots = ctx.sym.class_size[stream_class]
    best: tuple[float, GroupCounts | None] = (0.0, None)
    for ph, (fixed, loads) in _per_type(ctx, flat).items():
        row = (ph, stream_class)
        if row not in problem.load_rows or times[ph] <= 0:
            continue
        base = ctx.base_min.get(row, 0.0)
        level = LEVEL * (times[ph] - base - spread[ph] - charges.get(row, 0.0))
        types = [CountedGroup(fixed[t], np.asarray(list(per), dtype=np.int64), np.asarray(list(per.values())),
                              every.get(t, -1), _most(per, group_of))
                 for t, per in sorted(loads.items()) if fixed[t] < level and any(per.values())]
        # only the types that ``chosen`` opens GPU by GPU (HiGHS: 19 s where all 14 types took 23-40 s, same bound)
        types = [t for t in types
                 if t.needed(x, level, slots, problem.fixed_groups[t.every].used(x) if t.every >= 0 else 0.0) > 0]
        weight = max((t.fixed_s for t in types), default=0.0) / times[ph]
        if types and weight > best[0]:
            best = (weight, GroupCounts(ph, row, slots, base, level, types))
    return [best[1]] if best[1] is not None else []


def _most(loads: dict[int, float], group_of: dict[int, int]) -> float:
    """The most of ``loads`` (option id -> s) one choice can take: each table's largest, summed (s)."""
    most: dict[int, float] = defaultdict(float)
    for i, v in loads.items():
        most[group_of[i]] = max(most[group_of[i]], v)
    return sum(most.values())


def _per_type(ctx: Context, flat: list[Kind]) -> dict[int, tuple[dict, dict]]:
    """Per phase: (group type -> its smallest fixed cost on a GPU's stream, s; group type -> {option id: the
    load the option puts on the streams of the GPUs where it opens the type, s}). Types are (location, dtype,
    width); options over all GPUs are left out (their groups are open on every GPU: Problem.fixed_groups)."""
    topo = ctx.topo
    out: dict[int, tuple[dict, dict]] = defaultdict(lambda: ({}, defaultdict(lambda: defaultdict(float))))
    for i, k in enumerate(flat):
        if k.family == Family.ALL or not k.groups:
            continue
        own: dict[tuple[int, str], float] = defaultdict(float)
        for ph, r, v in k.own:
            own[(ph, r)] += v
        for g, charges in k.groups:
            if g.device not in ctx.gpu_set:
                continue
            stream = topo.stream_of(g.device)
            t = (g.location, g.dtype, g.width)
            for pos, seconds in charges:
                ph, r, _ = k.own[pos]
                if r != stream or seconds <= 0:
                    continue
                fixed, loads = out[ph]
                fixed[t] = min(fixed.get(t, seconds), seconds)
                loads[t][i] += own[(ph, stream)]
    return dict(out)
