"""Tie-break for the two-stage path: a local search that moves lookups off host DRAM / UVM into free HBM.

The single-stage planner runs a second ILP after its solve (planner/tiebreak.py); the two-stage path
(planner/two_stage.py, big cases) has no ILP over exact per-GPU options to re-run, so its plan (two-stage or a
baseline, whichever prices faster) can leave a host or UVM table whose rows a GPU's free HBM would hold at no
step-time cost. After that plan is chosen this module improves it one table at a time, priced exactly:

* tables served (wholly or partly) from host DRAM / UVM, in order of expected host-served lookups per step
  (``tiebreak.slow_lookups``; ties by table name: the order is deterministic);
* for each, the options of ``options.table_options`` (with the planner's extra levels) at the table's precision
  that serve fewer lookups from slow memory and are either table-wise on one of the ``TARGET_GPUS`` GPUs with
  the most free HBM, or the table's own sharding on its own devices (a higher hot fraction), plus, table-wise on
  those GPUs, the hot fraction that fills the GPU's free HBM (memory is linear in the fraction strictly between
  0 and 1: two priced probes give it, as ``tiebreak.fill_options`` does);
* each is priced incrementally against the plan's loads held once in an Accumulator (accumulator.py, the
  planner's one incremental pricer: ``swap_delta`` and ``phase_maxima_with`` give the step time as
  ``simulate.phase_times`` does, the memories the option touches are checked as ``memory_overflows`` does); the
  option with the fewest slow lookups (then the lowest step) that fits and keeps the step at most the cap is
  kept (``Accumulator.replace``), and the next table is priced against the updated plan.

The cap is the single-stage tie-break's: ``max(first step, min(min(bound, first step) x (1 + gap), ceiling))``
with ``ceiling`` the best baseline's step, so the plan is never slower than the first plan's step x (1 + gap),
nor than the best baseline (unless the first plan already was). The search stops at the end of its share of
the limit (schedule.Schedule.tie_break_s: 20% of the main limit, 1 to 10 s); the final plan is re-priced from
scratch (``simulate.total_cost``) and kept only if it fits, keeps the cap and serves fewer lookups from slow
memory. The record has the keys of the single-stage one (``objective``, ``before``, ``after``, ``result``,
``wall_s``, ...) plus the moves made.
"""
from __future__ import annotations

import time

from placer.cost import Cost, CostModel
from placer.forms import table_wise
from placer.options import OptionConfig, table_options
from placer.plan import Placement, Plan
from placer.planner import effort
from placer.planner.accumulator import Accumulator
from placer.planner.budget import Budget
from placer.planner.tiebreak import OBJECTIVE, slow_lookups
from placer.simulate import MEMORY_SLACK, memory_overflows, phase_times, total_cost

METHOD = "local search: one table at a time, priced exactly (two-stage path)"
#: table-wise moves are tried on this many GPUs, those with the most free HBM first
TARGET_GPUS = 4
REL = 1e-9


class _Pricer:
    """The plan's loads and memory in an Accumulator, one cost per table: a one-table swap priced exactly
    (``swap``) and kept (``keep``) without re-summing every table."""

    def __init__(self, model: CostModel, placements: list[Placement]):
        self.model = model
        self.index = {p.table: i for i, p in enumerate(placements)}
        self.costs = [model.placement_cost(p) for p in placements]
        self.acc = Accumulator(model, self.costs)
        self.latency = model.fixed_latency_s
        self.step = self._step(self.acc.phase_max)

    def _step(self, maxima: list[float]) -> float:
        """Step time (s): each phase's busiest load (none below 0) plus its fixed latency, summed."""
        return sum(max(t, 0.0) + self.latency[p] for p, t in enumerate(maxima))

    def swap(self, table: str, new: Cost) -> tuple[float, bool]:
        """(step time in s, whether a memory overflows) with ``table``'s cost replaced by ``new``."""
        old = self.costs[self.index[table]]
        step = self._step(self.acc.phase_maxima_with(self.acc.swap_delta(old, new)))
        usable, placed = self.model.usable_memory, self.acc.memory
        over = any(placed[m] - old.memory.get(m, 0.0) + b > usable[m] * (1 + MEMORY_SLACK) + 1
                   for m, b in new.memory.items())
        return step, over

    def keep(self, table: str, new: Cost) -> None:
        i = self.index[table]
        self.acc.replace(self.costs[i], new)
        self.costs[i] = new
        self.step = self._step(self.acc.phase_max)


def step_cap(first_step_s: float, lower_bound_s: float, gap: float, ceiling_s: float | None) -> float:
    """The single-stage tie-break's cap (planner/tiebreak.py): within the gap of the bound (or no slower than
    the first plan), and no slower than ``ceiling`` (the best baseline) unless the first plan already is."""
    cap = min(lower_bound_s, first_step_s) * (1 + gap)
    if ceiling_s is not None:
        cap = min(cap, ceiling_s)
    return max(cap, first_step_s)


def _free_hbm(model: CostModel, ex: _Pricer) -> dict[str, float]:
    """Free HBM bytes per GPU with its own (not unified) memory, under the plan ``ex`` prices."""
    topo = model.topo
    out = {}
    for g in topo.gpus:
        mem = topo.memory_of(g)
        if mem == topo.memory_of(topo.host_of(g)):
            continue
        out[g] = model.usable_memory[mem] - ex.acc.memory[mem]
    return out


def _fill_level(model: CostModel, p: Placement, t, gpu: str, free: float) -> Placement | None:
    """Table-wise on ``gpu`` at the hot fraction whose HBM use is ``free`` bytes (the GPU's free HBM, plus what
    ``p`` holds there now), or None when no fraction strictly between 0 and 1 does."""
    mem = model.topo.memory_of(gpu)
    n = t.rows

    def at(f: float) -> Placement:
        k = int(round(f * n))
        return table_wise.placement(t, gpu, p.precision, k)

    a = model.placement_cost(at(0.25)).memory.get(mem, 0.0)
    b = model.placement_cost(at(0.75)).memory.get(mem, 0.0)
    slope = (b - a) / 0.5
    if slope <= 0:
        return None
    budget = free + model.placement_cost(p).memory.get(mem, 0.0)
    f = round((budget - (a - 0.25 * slope)) / slope * (1 - 1e-4) - 2.0 / n, 6)
    if not 0 < f < 1:
        return None
    return at(f)


def _devices(p: Placement) -> tuple:
    return tuple(s.device for s in p.shards)


def _key(p: Placement) -> tuple:
    return (p.sharding, p.precision, tuple((s.device, tuple(s.rows), tuple(s.cols), s.hbm_rows) for s in p.shards))


def candidates(model: CostModel, p: Placement, cfg: OptionConfig, free: dict[str, float]) -> list[Placement]:
    """Moves of ``p`` (module docstring), in a deterministic order, not yet filtered by slow lookups."""
    t = model.wl.tables[model.wl.table_index[p.table]]
    ranked = sorted(free, key=lambda g: (-free[g], model.topo.gpus.index(g)))
    targets = set(ranked[:TARGET_GPUS])
    own = _devices(p)
    if p.sharding == table_wise.NAME and own[0] in free:
        targets.add(own[0])
    out, seen = [], {_key(p)}
    for q in table_options(t, model.topo, model.wl, cfg):
        if q.precision != p.precision:
            continue
        if (q.sharding == table_wise.NAME and q.shards[0].device in targets) or \
                (q.sharding == p.sharding and _devices(q) == own):
            if _key(q) not in seen:
                seen.add(_key(q))
                out.append(q)
    for g in sorted(targets, key=model.topo.gpus.index):
        q = _fill_level(model, p, t, g, free[g])
        if q is not None and _key(q) not in seen:
            seen.add(_key(q))
            out.append(q)
    return model.rules.allowed(out)  # the workload's constraints (table_options holds its own to them)


def local_tie_break(model: CostModel, placements: list[Placement], cap_s: float, cfg: OptionConfig, *,
                    time_limit_s: float = 10.0, budget: Budget | None = None) -> tuple[list[Placement], dict]:
    """(placements, record): ``placements`` or a plan that serves fewer lookups from slow memory with step time
    at most ``cap_s`` (module docstring), searched within ``budget`` (default: ``time_limit_s`` of wall time;
    a work budget is charged per option priced, effort.py). The record is the plan's ``solver.tie_break``
    block."""
    t0 = time.perf_counter()
    budget = budget if budget is not None else Budget(time_limit_s)
    first = list(placements)
    total = sum(model.B * model.wl.lookups_per_sample(t.name) for t in model.wl.tables) or 1.0
    slow = {p.table: slow_lookups(model, p) for p in first}
    before = sum(slow.values())
    cur = list(first)
    index = {p.table: i for i, p in enumerate(cur)}
    ex = _Pricer(model, cur)
    first_step = ex.step
    record = {"objective": OBJECTIVE, "method": METHOD, "before": before, "after": before,
              "share_before": before / total, "step_time_before_s": first_step, "step_time_after_s": first_step,
              "step_time_cap_s": cap_s, "moves": []}
    if before <= 1e-9 * total:
        record.update(result="nothing served from slow memory", wall_s=time.perf_counter() - t0)
        return first, record
    order = sorted((p for p in first if slow[p.table] > 0), key=lambda p: (-slow[p.table], p.table))
    tried = priced = 0
    timed_out = False
    for p in order:
        if budget.expired():
            timed_out = True
            break
        tried += 1
        p = cur[index[p.table]]
        s0 = slow_lookups(model, p)
        free = _free_hbm(model, ex)
        opts = [(slow_lookups(model, q), n, q) for n, q in enumerate(candidates(model, p, cfg, free))]
        opts = sorted((o for o in opts if o[0] < s0 * (1 - REL)), key=lambda o: (o[0], o[1]))
        best = None  # (slow, step, placement)
        for s, _, q in opts:
            if best is not None and s > best[0] * (1 + REL) + 1e-12:
                break  # every later option serves more from slow memory than the move found
            if budget.expired():
                timed_out = True
                break
            priced += 1
            cost = model.placement_cost(q)
            budget.charge(effort.TIE_BREAK_OPTION_S + effort.PRICING_S_PER_LOAD * len(cost.loads))
            step, over = ex.swap(p.table, cost)
            if over or step > cap_s * (1 + REL):
                continue
            if best is None or step < best[1]:
                best = (s, step, q, cost)
        if best is not None:
            cur[index[p.table]] = best[2]
            ex.keep(p.table, best[3])
            record["moves"].append({"table": p.table, "from": p.label(), "to": best[2].label(),
                                    "slow_before": s0, "slow_after": best[0], "step_after_s": ex.step})
        if timed_out:
            break
    record.update(tables_tried=tried, tables_with_slow_lookups=len(order), options_priced=priced)
    if not record["moves"]:
        record.update(result=(f"{budget.limit_name}: no move found" if timed_out else "no better plan under the cap; "
                              "first plan kept"), wall_s=time.perf_counter() - t0)
        return first, record
    # exact re-pricing of the whole plan, from scratch
    cost = total_cost(model, Plan.model_construct(placements=cur))
    step = sum(phase_times(model, cost)[0])
    after = sum(slow_lookups(model, p) for p in cur)
    if memory_overflows(model, cost) or step > cap_s * (1 + REL) or after >= before * (1 - REL):
        record.update(moves=[], result="re-priced plan fails the cap or memory; first plan kept",
                      wall_s=time.perf_counter() - t0)
        return first, record
    record.update(after=after, share_after=after / total, step_time_after_s=step,
                  result=(f"{budget.limit_name}: {len(record['moves'])} moves, {tried} of {len(order)} tables tried"
                          if timed_out else f"{len(record['moves'])} moves; every table tried"),
                  wall_s=time.perf_counter() - t0)
    return cur, record
