"""Tie-break: among plans as fast as the best one (within the solver's gap), the one that serves the fewest
lookups from slow memory.

The step-time ILP is indifferent between plans whose step time differs by less than its gap, and the dense
phase often dominates so that where the last cold rows live does not move the step time: a plan may then keep
1% of a big table in HBM while HBM sits empty. After the main solve this module solves a second ILP over the
same options and constraints:

    minimize   expected lookups per step served from host DRAM / UVM (share of all lookups)
               + 1e-4 * (step time / first plan's step time)      (ties: the faster)
    subject to every row of the main ILP, and  step time <= cap

with ``cap = max(first plan's step time, min(min(lower bound, first step) * (1 + gap), ceiling))``: every
plan it may return is within the gap tolerance of the best valid lower bound, as the first plan was (or no
slower than the first plan), and no slower than ``ceiling`` (the best baseline's step: ILP <= every baseline).
It starts from the first plan (a CBC MIP start) with a short time limit, and the result is taken only when it
fits, keeps the cap (re-priced exactly) and serves fewer lookups from slow memory. Its share of the limit is
schedule.py's (Schedule.tie_break_s).

Slow lookups of an option (row ids are spread evenly over a table, so a shard of n of N rows gets n/N of
the lookups, and its hottest ``hbm_rows`` rows get coverage(hbm_rows / n) of those):
    lookups per step * sum over shards of (n / N) * (cols / dim) * (1 - coverage(hbm_rows / n))
so a host or UVM table counts all its lookups, a hot/cold split its cold share, an all-HBM option none.
"""
from __future__ import annotations

import time

import numpy as np
import pulp

from placer.cost import CostModel
from placer.forms import table_wise
from placer.forms.shardings import sharding_of
from placer.plan import Placement
from placer.planner import ilp
from placer.planner.budget import Budget
from placer.planner.problem import Problem
from placer.planner.tuning import STEP_WEIGHT  # the weight of the (normalised) step time in the second objective

OBJECTIVE = "expected lookups per step served from host DRAM or UVM"


def slow_lookups(model: CostModel, p: Placement) -> float:
    """Expected lookups per step of ``p``'s table served from slow memory (module docstring)."""
    t = model.wl.tables[model.wl.table_index[p.table]]
    lookups = model.B * model.wl.lookups_per_sample(p.table)
    form = sharding_of(p)
    if not form.on_gpus:
        return lookups
    if form.whole_copies:
        return 0.0
    access = model.wl.access_models[p.table]
    slow = 0.0
    for s in p.shards:
        if s.host_rows == 0:
            continue
        cov = float(access.coverage(s.hbm_rows / s.num_rows)) if s.hbm_rows else 0.0
        slow += (s.num_rows / t.rows) * (s.num_cols / t.dim) * (1.0 - cov)
    return lookups * slow / (len(model.topo.nodes) if p.node_local else 1)  # a replica per node: its node's share


def tie_break(model: CostModel, problem: Problem, option_lists: list[list[Placement]], chosen: list[int],
              lower_bound_s: float, gap: float, *, backend: str = "cbc", time_limit_s: float = 10.0,
              threads: int | None = None, ceiling_s: float | None = None, budget: Budget | None = None
              ) -> tuple[list[int], dict]:
    """(choice, record): the first plan ``chosen`` (one option id per group of ``problem``; ``option_lists[i]``
    the placements of group i in order) or a plan at most as slow as the cap (module docstring) that serves
    fewer lookups from slow memory, found within ``budget`` (default: ``time_limit_s`` of wall time). The
    record is the plan's ``solver.tie_break`` block."""
    t0 = time.perf_counter()
    budget = budget if budget is not None else Budget(time_limit_s)
    slow = np.zeros(problem.num_options)
    for group, opts in zip(problem.groups, option_lists):
        for oid, p in zip(group, opts):
            slow[oid] = slow_lookups(model, p)
    total = sum(model.B * model.wl.lookups_per_sample(t.name) for t in model.wl.tables) or 1.0
    first_step = problem.objective(chosen)
    before = float(slow[chosen].sum())
    cap = min(lower_bound_s, first_step) * (1 + gap)
    if ceiling_s is not None:  # e.g. the best baseline's step: the ILP's plan is never slower than a baseline
        cap = min(cap, ceiling_s)
    cap = max(cap, first_step)
    record = {"objective": OBJECTIVE, "before": before, "after": before, "share_before": before / total,
              "step_time_before_s": first_step, "step_time_after_s": first_step, "step_time_cap_s": cap}
    if before <= 1e-9 * total:
        record.update(result="nothing served from slow memory", wall_s=time.perf_counter() - t0)
        return chosen, record
    prob, x, y = ilp._build(problem)
    scale_ms = (first_step - problem.fixed_s) * ilp.TIME_SCALE or 1.0
    prob.setObjective(pulp.LpAffineExpression([(x[i], 100.0 * slow[i] / total) for i in np.nonzero(slow)[0]]
                                              + [(v, 100.0 * STEP_WEIGHT / scale_ms) for v in y]))
    prob += pulp.lpSum(y) <= (cap - problem.fixed_s) * ilp.TIME_SCALE, "tie_break_step_cap"
    ilp._set_start(problem, prob, x, y, chosen)
    try:
        ilp.run_mip(prob, backend, budget, max(1.0, budget.left()), gapRel=0.001, threads=threads, warmStart=True)
        new = ilp._decode(problem, x)
    except (pulp.PulpSolverError, OSError) as exc:
        record.update(result=f"second solve failed ({exc}); first plan kept", wall_s=time.perf_counter() - t0)
        return chosen, record
    proven = prob.sol_status == pulp.LpSolutionOptimal
    if new is None or not problem.fits(new):
        record.update(result="second solve found no plan; first plan kept", wall_s=time.perf_counter() - t0)
        return chosen, record
    step, after = problem.objective(new), float(slow[new].sum())
    if step > cap * (1 + 1e-9) or after >= before * (1 - 1e-9):
        record.update(result="no better plan under the cap; first plan kept", wall_s=time.perf_counter() - t0)
        return chosen, record
    record.update(after=after, share_after=after / total, step_time_after_s=step,
                  result="optimal" if proven else f"{budget.limit_name}: improved, not proven best",
                  wall_s=time.perf_counter() - t0)
    return new, record


def fill_options(model: CostModel, placements: list[Placement]) -> dict[str, list[Placement]]:
    """Extra options for the tie-break: each table-wise table of the first plan with cold rows gets, on its GPU,
    the hot fraction that fills that GPU's free HBM (usable bytes less the plan's tables) with its rows, and half
    of that step. The default levels jump (0.5 -> 1): without these a plan can leave GiB of HBM unused. Memory
    is linear in the fraction strictly between 0 and 1, so two priced probes give it; each level is priced and
    dropped unless the whole plan with it fits."""
    from placer.plan import Plan
    from placer.simulate import memory_overflows, total_cost

    topo = model.topo
    plan = Plan.model_construct(placements=list(placements))
    cost = total_cost(model, plan)
    base = model.base_cost.memory
    out: dict[str, list[Placement]] = {}
    for i, p in enumerate(placements):
        if p.sharding != table_wise.NAME or p.shards[0].host_rows == 0:
            continue
        s = p.shards[0]
        mem = topo.memory_of(s.device)
        if mem == topo.memory_of(topo.host_of(s.device)):
            continue  # unified memory: nothing to fill
        free = model.usable_memory[mem] - (cost.memory.get(mem, 0.0) - base.get(mem, 0.0))
        n = s.num_rows

        def at(f: float) -> Placement:
            k = int(round(f * n))
            return p.model_copy(update={"shards": [s.model_copy(update={"hbm_rows": k, "host_rows": n - k})]})

        a = model.placement_cost(at(0.25)).memory.get(mem, 0.0)
        b = model.placement_cost(at(0.75)).memory.get(mem, 0.0)
        slope = (b - a) / 0.5
        if slope <= 0:
            continue
        now = model.placement_cost(p).memory.get(mem, 0.0)
        target = (now + free - (a - 0.25 * slope)) / slope * (1 - 1e-4) - 2.0 / n
        current = s.hbm_rows / n
        extra = []
        for f in (target, (current + target) / 2):
            f = round(f, 6)
            if not current < f < 1 or any(abs(f - q.shards[0].hbm_rows / n) < 1e-4 for q in extra):
                continue
            q = at(f)
            trial = Plan.model_construct(placements=placements[:i] + [q] + placements[i + 1:])
            if not memory_overflows(model, total_cost(model, trial)):
                extra.append(q)
        if extra:
            out[p.table] = extra
    return out
