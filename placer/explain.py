"""Why each table of a plan sits where it does: its place, the memory around it, the load it puts on the step's
busiest streams, and the step time of its next-best option.

The next-best option re-prices the plan with that one table's placement replaced by each other candidate of
``options.table_options`` (the planner's menu). The cost model is linear (cost.py: total = base + the sum of
the placements' costs, plus each used fused group's fixed cost once), so a swap is priced incrementally: the
plan's total is built once and one placement's cost is taken out and another's put in; phase times follow
``simulate.phase_times`` (busiest resource per phase + fixed latency) and memory ``simulate.memory_overflows``.
The result equals ``simulate.predict`` of the swapped plan up to float rounding (tests/test_explain.py checks).
Times are seconds, memory bytes.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from placer.constraints import device_set
from placer.cost import PHASES, Cost, CostModel
from placer.errors import SpecError
from placer.explain_constraints import binding_constraints
from placer.forms import table_wise
from placer.forms.shardings import sharding_of
from placer.forms.storage import form_label
from placer.planner.trainers import options_for
from placer.report_sizes import stored_bytes
from placer.options import OptionConfig, table_options
from placer.plan import Placement, Plan
from placer.simulate import MEMORY_SLACK
from placer.units import fmt_bytes, fmt_seconds

DEFAULT_TOP = 10
#: tables whose removal frees the most step time are the candidates the default ranking prices in full
CANDIDATES_PER_SHOWN = 4


@dataclass
class Alternative:
    """One other option of a table, priced in the plan: step seconds and the bottleneck it would have."""

    label: str
    step_time_s: float
    delta_s: float
    delta_pct: float
    bottleneck: str
    placement: dict = field(repr=False, default_factory=dict)


@dataclass
class MemoryUse:
    """A memory the table uses: bytes it places there, and what is free there for tables (plan as is)."""

    memory: str
    kind: str  # "HBM" or "host DRAM"
    table_bytes: float
    free_bytes: float
    usable_bytes: float


@dataclass
class TableExplanation:
    table: str
    placement: str
    sharding: str
    precision: str
    devices: list[str]
    hot_fraction: float
    size_bytes: float
    memory: list[MemoryUse]
    hbm_wanted_bytes: float  # more HBM it would need to sit fully in HBM on its devices (0 when it does)
    hbm_free_bytes: float  # free HBM for tables on its GPUs (sum; for a host table its host's emptiest GPU)
    hbm_devices: list[str]  # the GPUs hbm_free_bytes counts
    main_load: dict  # {"phase", "resource", "seconds", "share"}: its largest load, share of that resource's load
    bottleneck_share: float  # its share of the step's bottleneck resource load (0 when it puts none there)
    options_priced: int
    options_infeasible: int
    infeasible_memories: list[str]
    next_best: Alternative | None
    # the answer to "it does not fit" it uses (forms.form_label: 'qr k=4', 'int8', 'node_local'), or None; the
    # bytes its compressed form saves against its rows as they are on the same devices; the best option without
    # any such form (None: none fits memory, or the table uses none)
    form: str | None = None
    form_saved_bytes: float = 0.0
    plain_best: Alternative | None = None
    sentence: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _key(p: Placement) -> tuple:
    return (p.sharding, p.precision,
            tuple((s.device, tuple(s.rows), tuple(s.cols), s.hbm_rows) for s in p.shards))


class Explainer:
    """Prices one-placement swaps of ``plan`` against the plan's total cost, held once."""

    def __init__(self, model: CostModel, plan: Plan, options: OptionConfig = OptionConfig()):
        # the alternatives the workload's trainer can run (no host-CPU table under torchrec: planner/trainers.py)
        self.model, self.plan, self.options = model, plan, options_for(model.wl, options)
        self.topo = model.topo
        self.specs = {t.name: t for t in model.wl.tables}
        self.index = {p.table: i for i, p in enumerate(plan.placements)}
        self.placed = {p.table: p for p in plan.placements}
        self.costs = [model.placement_cost(p) for p in plan.placements]
        base = model.base_cost
        loads: dict = defaultdict(float, base.loads)
        memory: dict = defaultdict(float, base.memory)
        self.group_count: dict = defaultdict(int)
        self.group_charges: dict = {}
        for g, ch in base.once.items():
            self.group_count[g] += 1
            self.group_charges.setdefault(g, ch)
        for c in self.costs:
            for k, v in c.loads.items():
                loads[k] += v
            for k, v in c.memory.items():
                memory[k] += v
            for g, ch in c.once.items():
                self.group_count[g] += 1
                self.group_charges.setdefault(g, ch)
        self.memory = memory
        full = defaultdict(float, loads)
        for g, n in self.group_count.items():
            if n > 0:
                for k, v in self.group_charges[g].items():
                    full[k] += v
        self.full = full
        self.latency = model.fixed_latency_s
        self._index_phases()
        self.worst = max(range(len(PHASES)), key=lambda p: self.times[p])
        self.bottleneck = self._bottleneck(self.times, self.resources)
        self.base_memory = base.memory
        self.usable = model.usable_memory

    # ---- incremental pricing ----------------------------------------------------------------------------

    def _index_phases(self) -> None:
        """Each phase's resources busiest first, from ``self.full``, and the plan's phase times and step."""
        self.by_phase: list[list[tuple[float, str]]] = [[] for _ in PHASES]
        for (ph, res), v in self.full.items():
            self.by_phase[ph].append((v, res))
        for lst in self.by_phase:  # stable: ties keep predict()'s order, so the same bottleneck is named
            lst.sort(key=lambda x: -x[0])
        self.times, self.resources = self._phases({})
        self.step = sum(self.times)

    def _load_delta(self, old: Cost, new: Cost) -> tuple[dict, dict]:
        """({(phase, resource): seconds added}, {group: placements using it after}) when a table's cost
        ``old`` is replaced by ``new``: its own loads, and each fused group's once-per-group charge where the
        group starts or stops being used."""
        delta: dict = defaultdict(float)
        for k, v in old.loads.items():
            delta[k] -= v
        for k, v in new.loads.items():
            delta[k] += v
        counts = {}
        for g in set(old.once) | set(new.once):
            n0 = self.group_count.get(g, 0)
            n1 = counts[g] = n0 - (g in old.once) + (g in new.once)
            if (n0 > 0) != (n1 > 0):
                charges = self.group_charges.get(g) or new.once[g]
                sign = 1.0 if n1 > 0 else -1.0
                for k, v in charges.items():
                    delta[k] += sign * v
        return delta, counts

    def _phases(self, changed: dict) -> tuple[list[float], list[str | None]]:
        """Phase times and busiest resources with ``changed`` {(phase, resource): new seconds} applied."""
        touched: dict[int, dict[str, float]] = defaultdict(dict)
        for (ph, res), v in changed.items():
            touched[ph][res] = v
        times, names = [], []
        for ph in range(len(PHASES)):
            best, name = 0.0, None
            t = touched.get(ph, {})
            for v, res in self.by_phase[ph]:
                if res not in t:
                    if v > 0:
                        best, name = v, res
                    break
            for res, v in t.items():
                if v > best:
                    best, name = v, res
            times.append(best + self.latency[ph])
            names.append(name)
        return times, names

    @staticmethod
    def _bottleneck(times, names) -> str:
        worst = max(range(len(PHASES)), key=lambda p: times[p])
        return f"{names[worst]} ({PHASES[worst]})" if names[worst] else "none"

    def swap(self, table: str, new: Cost | None) -> tuple[float, str, list[tuple[str, float, float]]]:
        """(step seconds, bottleneck, memory overflows) of the plan with ``table``'s cost replaced by ``new``
        (None: the table removed). Overflows as simulate.memory_overflows: (memory, placed, usable)."""
        old = self.costs[self.index[table]]
        new = new or Cost()
        delta, _ = self._load_delta(old, new)
        changed = {k: self.full.get(k, 0.0) + d for k, d in delta.items()}
        times, names = self._phases(changed)
        over = []
        for m, b in new.memory.items():
            placed = self.memory.get(m, 0.0) - old.memory.get(m, 0.0) + b - self.base_memory.get(m, 0.0)
            usable = self.usable[m]
            if placed > usable * (1 + MEMORY_SLACK) + 1:
                over.append((m, placed, usable))
        return sum(times), self._bottleneck(times, names), over

    def removal_gain(self, table: str) -> float:
        """Step seconds saved if the table cost nothing: how much of the step it carries (a ranking proxy)."""
        return self.step - self.swap(table, None)[0]

    # ---- explanations -----------------------------------------------------------------------------------

    def free_bytes(self, memory: str) -> float:
        return self.usable[memory] - (self.memory.get(memory, 0.0) - self.base_memory.get(memory, 0.0))

    def explain(self, table: str) -> TableExplanation:
        i = self.index[table]
        p, cost, spec = self.plan.placements[i], self.costs[i], self.specs[table]
        current = _key(p)
        best: Alternative | None = None
        plain: Alternative | None = None  # the best option with no form (forms.form_label None)
        priced = infeasible = 0
        infeasible_mems: set[str] = set()
        for q in table_options(spec, self.topo, self.model.wl, self.options):
            if _key(q) == current or not self.model.rules.keeps_groups(table, device_set(q), self.placed):
                continue
            priced += 1
            step, bottleneck, over = self.swap(table, self.model.placement_cost(q))
            if over:
                infeasible += 1
                infeasible_mems.update(m for m, _, _ in over)
                continue
            alt = Alternative(q.label(), step, step - self.step, (step - self.step) / self.step * 100, bottleneck,
                              q.model_dump(mode="json"))
            if best is None or step < best.step_time_s:
                best = alt
            if form_label(q) is None and (plain is None or step < plain.step_time_s):
                plain = alt
        mems = []
        for m, b in sorted(cost.memory.items()):
            kind = {"hbm": "HBM", "dram": "host DRAM"}.get(self.topo.memories[m].kind, "memory tier")
            mems.append(MemoryUse(m, kind, b, self.free_bytes(m), self.usable[m]))
        gpus = sorted({self.topo.memory_of(s.device) for s in p.shards if s.device in self.topo.gpus}
                      & set(self.topo.gpus))
        if not sharding_of(p).on_gpus:  # the HBM it would want: the GPU of its host with the most free
            node_gpus = [g for g in self.topo.gpus if self.topo.host_of(g) == p.shards[0].device
                         and self.topo.memory_of(g) == g]
            gpus = sorted(node_gpus, key=lambda g: -self.free_bytes(g))[:1]
        hbm_free = sum(self.free_bytes(g) for g in gpus)
        wanted = self._hbm_wanted(p, cost, gpus)
        loads = [(v, k) for k, v in cost.loads.items()]
        main = {"phase": None, "resource": None, "seconds": 0.0, "share": 0.0}
        if loads:
            v, (ph, res) = max(loads)
            main = {"phase": PHASES[ph], "resource": res, "seconds": v, "share": v / self.full[(ph, res)]}
        bres = self.resources[self.worst]
        bshare = cost.loads.get((self.worst, bres), 0.0) / self.full[(self.worst, bres)] if bres else 0.0
        e = TableExplanation(
            table=table, placement=p.label(), sharding=p.sharding, precision=p.precision,
            devices=sorted({s.device for s in p.shards}),
            hot_fraction=p.hot_fraction if sharding_of(p).on_gpus else 0.0,
            size_bytes=stored_bytes(spec, p), memory=mems, hbm_wanted_bytes=wanted, hbm_free_bytes=hbm_free,
            hbm_devices=gpus,
            main_load=main, bottleneck_share=bshare, options_priced=priced, options_infeasible=infeasible,
            infeasible_memories=sorted(infeasible_mems), next_best=best)
        e.form = form_label(p)
        if e.form is not None:
            e.plain_best = plain
            if p.compression is not None:
                rows_as_they_are = self.model.placement_cost(p.model_copy(update={"compression": None})).memory
                e.form_saved_bytes = sum(rows_as_they_are.values()) - sum(cost.memory.values())
        e.sentence = self.sentence(e)
        return e

    def _hbm_wanted(self, p: Placement, cost: Cost, gpus: list[str]) -> float:
        """More HBM bytes (on ``gpus``) the table would hold with every row in HBM: the same shards all hot, or
        for a host table table-wise on ``gpus[0]``; priced by the cost model (optimizer state, buffers)."""
        if not sharding_of(p).on_gpus:
            if not gpus:
                return 0.0
            spec = self.specs[p.table]
            full = table_wise.placement(spec, gpus[0], p.precision, spec.rows)
        elif all(s.host_rows == 0 for s in p.shards):
            return 0.0
        else:
            full = p.model_copy(update={"shards": [s.model_copy(update={"hbm_rows": s.num_rows, "host_rows": 0})
                                                   for s in p.shards]})
        hot = self.model.placement_cost(full).memory
        return sum(max(hot.get(g, 0.0) - cost.memory.get(g, 0.0), 0.0) for g in gpus)

    def sentence(self, e: TableExplanation) -> str:
        mems = sorted(e.memory, key=lambda m: -m.table_bytes)
        big = [m for m in mems if m.table_bytes >= 0.1 * mems[0].table_bytes] if mems else []
        rest = mems[len(big):]
        where = ", ".join(f"{fmt_bytes(m.table_bytes)} in {m.kind} of {m.memory}" for m in big)
        if rest:
            where += f", {fmt_bytes(sum(m.table_bytes for m in rest))} on {len(rest)} other memories"
        out = f"{e.table} is {e.placement} ({where})."
        if e.hbm_wanted_bytes > 0:
            gpus = ", ".join(d for d in e.devices if d in self.topo.gpus) or "its GPU"
            full = e.hbm_free_bytes < e.hbm_wanted_bytes
            if not sharding_of(e.sharding).on_gpus:
                gpus = "the emptiest GPU of its host" + (f" ({e.hbm_devices[0]})" if e.hbm_devices else "")
            out += (f" Fully in HBM it would need {fmt_bytes(e.hbm_wanted_bytes)} more; {gpus} has "
                    f"{fmt_bytes(max(e.hbm_free_bytes, 0))} free"
                    + (" (full: memory binds it)." if full else " (room: time, not memory, keeps it out)."))
        else:
            free = ", ".join(f"{m.memory} {fmt_bytes(max(m.free_bytes, 0))}" for m in e.memory)
            out += f" It is all in HBM; free there: {free}."
        ml = e.main_load
        if ml["resource"]:
            out += (f" Its largest load is {fmt_seconds(ml['seconds'])} on {ml['resource']} in {ml['phase']} "
                    f"({ml['share']:.1%} of that resource's load)")
            out += (f"; it is {e.bottleneck_share:.1%} of the bottleneck {self.bottleneck}."
                    if e.bottleneck_share > 0 else f"; none on the bottleneck {self.bottleneck}.")
        nb = e.next_best
        if nb is None:
            out += (" Every other option is infeasible: memory"
                    + (f" ({', '.join(e.infeasible_memories[:3])})" if e.infeasible_memories else "") + "."
                    if e.options_priced else " The menu has no other option for it.")
        else:
            moved = nb.bottleneck != self.bottleneck
            out += (f" Next best: {nb.label}, step {fmt_seconds(nb.step_time_s)} ({nb.delta_s * 1e3:+.3f} ms, "
                    f"{nb.delta_pct:+.2f}%)"
                    + (f", bottleneck would be {nb.bottleneck}" if moved else "") + ".")
            if e.options_infeasible:
                out += f" {e.options_infeasible} of {e.options_priced} other options do not fit memory."
        if e.form is not None:
            out += " " + self._form_sentence(e)
        return out

    @staticmethod
    def _form_sentence(e: TableExplanation) -> str:
        """What its form (qr, int8, tt, node_local) buys: the memory it saves, the best option without it."""
        out = f"It is held as {e.form}"
        if e.form_saved_bytes > 0:
            out += f", {fmt_bytes(e.form_saved_bytes)} less memory than its rows as they are on the same devices"
        pb = e.plain_best
        if pb is None:
            return out + "; no option without such a form fits memory."
        return out + (f"; without such a form the best option is {pb.label}, step {fmt_seconds(pb.step_time_s)} "
                      f"({pb.delta_s * 1e3:+.3f} ms, {pb.delta_pct:+.2f}%).")

    def top(self, n: int) -> list[TableExplanation]:
        """The ``n`` tables whose placement matters most: by |step change| of their next-best option (every
        other option infeasible counts as most), priced in full among the CANDIDATES_PER_SHOWN * n tables
        that carry the most step time (removal_gain, then their load on the near-busiest resources)."""
        peak = [max((v for v, _ in lst), default=0.0) for lst in self.by_phase]

        def critical(t: str) -> float:  # its load on resources within 5% of their phase's busiest (ties)
            c = self.costs[self.index[t]]
            return sum(v for (ph, res), v in c.loads.items() if self.full[(ph, res)] >= 0.95 * peak[ph] > 0)

        names = sorted(self.index, key=lambda t: (-self.removal_gain(t), -critical(t)))
        pool = [self.explain(t) for t in names[:max(CANDIDATES_PER_SHOWN * n, n)]]
        pool.sort(key=lambda e: -(abs(e.next_best.delta_s) if e.next_best else float("inf")))
        return pool[:n]


def resolve_tables(plan: Plan, names: list[str], file: str | None = None) -> list[str]:
    """The named tables, checked against the plan; SpecError (exit 2) listing a few known names."""
    known = [p.table for p in plan.placements]
    unknown = [n for n in names if n not in set(known)]
    if unknown:
        few = ", ".join(known[:5]) + (f", ... ({len(known)} in all)" if len(known) > 5 else "")
        raise SpecError(f"no table named {', '.join(repr(u) for u in unknown[:5])} in the plan; known: {few}",
                        file=file, field="TABLE")
    return list(dict.fromkeys(names))


def explain_plan(model: CostModel, plan: Plan, tables: list[str] | None = None, top: int = DEFAULT_TOP,
                 options: OptionConfig = OptionConfig()) -> dict:
    """The explanation of ``plan``: named tables (all when ``tables == ['*']``) or the ``top`` that matter most."""
    t0 = time.perf_counter()
    ex = Explainer(model, plan, options)
    if tables:
        rows = [ex.explain(t) for t in tables]
    else:
        rows = ex.top(top)
    improving = [r for r in rows if r.next_best is not None and r.next_best.delta_s < -IMPROVEMENT_TOLERANCE * ex.step]
    verdict = local_optimality(plan, ex.step, improving, model)
    if verdict is not None:
        for r in improving:
            r.sentence += f" So the plan is not locally optimal: {verdict['reason']}"
    return {"method": plan.method, "step_time_s": ex.step, "bottleneck": ex.bottleneck,
            "selection": "named" if tables else f"top {top} by step change of the next-best option",
            "tables": [r.to_dict() for r in rows], "not_locally_optimal": verdict, "hbm_note": hbm_note(model),
            "constraints": binding_constraints(ex), "wall_s": time.perf_counter() - t0}


def hbm_note(model: CostModel) -> str:
    """What 'HBM free' is left of: the usable HBM, capacity less the spec's reserve, per distinct GPU memory (the
    figure solve's 'HBM used / usable' shows: free = usable - used)."""
    kinds: dict[tuple[float, float], int] = {}
    for m in model.topo.memories.values():
        if m.kind == "hbm":
            kinds[(m.capacity_bytes, m.reserve_bytes)] = kinds.get((m.capacity_bytes, m.reserve_bytes), 0) + 1
    each = "; ".join(f"{fmt_bytes(c - r)} = {fmt_bytes(c)} - {fmt_bytes(r)} reserve ({n} GPU{'s' if n > 1 else ''})"
                     for (c, r), n in kinds.items())
    return ("HBM free: what is left of the usable HBM (capacity less the spec's hbm_reserve_GiB; solve shows used / "
            f"usable): {each}")


#: a next-best option this much faster than the plan (relative) is an improvement, not float rounding
IMPROVEMENT_TOLERANCE = 1e-9


def local_optimality(plan: Plan, step: float, improving: list[TableExplanation], model: CostModel) -> dict | None:
    """None when no explained table has a faster option; else why the plan is not locally optimal, as
    {"verdict", "tables", "best_step_time_s", "reason"}. The verdict: ``within_gap`` (the solver stopped at a
    gap that allows a plan this much faster: its lower bound is below the faster option), ``defect`` (the
    option is faster than the lower bound the solver proved for the same specs: the bound or the plan is wrong),
    ``heuristic`` (a baseline or a heuristic method, which promises no local optimality), or ``unverifiable``
    (the plan records no solver account, or its bound was for other specs: a what-if, specs that changed)."""
    if not improving:
        return None
    from placer.plan import spec_changes

    best = min(improving, key=lambda r: r.next_best.step_time_s)
    fast = best.next_best.step_time_s
    names = [r.table for r in improving]
    head = (f"{best.table} as {best.next_best.label} gives a step of {fmt_seconds(fast)}, "
            f"{fmt_seconds(step - fast)} faster than the plan's {fmt_seconds(step)}")
    solver = plan.solver
    bound = solver.lower_bound_step_time_s if solver else None
    changed = spec_changes(plan, model.topo.spec, model.wl)
    if solver is None:
        verdict = "unverifiable"
        reason = (f"{head}; the plan records no solver account (written by hand or imported), so no bound "
                  "says whether that is within a gap.")
    elif solver.status == "heuristic" or (bound is None and solver.status != "optimal"):
        verdict = "heuristic"
        reason = (f"{head}; the plan came from {plan.method}, a method that does not promise local optimality "
                  "(placer solve --method ilp searches for it).")
    elif changed:
        verdict = "unverifiable"
        reason = (f"{head}; the solver's bound was for other specs ({changed[0]}), so whether this is within its "
                  "gap cannot be said.")
    elif bound is not None and fast >= bound * (1 - 1e-6):
        verdict = "within_gap"
        gap = f"gap {solver.gap:.2%}" if solver.gap is not None else "its gap"
        reason = (f"{head}, within the solver's {gap} (it proved no plan is faster than {fmt_seconds(bound)} and "
                  "stopped there; a smaller --gap or a longer --time-limit searches further).")
    else:
        verdict = "defect"
        proven = fmt_seconds(bound) if bound is not None else fmt_seconds(step) + " (status optimal)"
        reason = (f"{head}, below the lower bound the solver reported for these same specs, {proven}: the bound "
                  "or the plan is wrong, a defect in placer to report (unless the plan was solved with a "
                  "narrower menu than explain's, e.g. --no-fp16).")
    return {"verdict": verdict, "tables": names, "best_step_time_s": fast, "reason": reason}
