"""The planner under a workload's constraints (placer/constraints.py): co-located groups on the menu and in the
ILP, and the baselines' plans repaired to honour every rule.

- ``colocated_menus``: each co-located group's tables keep only the options whose device set every table of the
  group can take; ``equal_rows``: for neighbouring tables of a group and each such device set, the rows that make
  their choices land on the same set (Problem.equal, ilp.py).
- ``honour``: a baseline places tables its own way; the tables whose placement breaks a rule (or a co-location)
  are placed again, largest first, each on the allowed option where the step grows least and it fits
  (InfeasibleError naming the table and its constraints where none fits).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from placer.constraints import Rules, device_set
from placer.cost import CostModel
from placer.errors import InfeasibleError
from placer.options import OptionConfig, table_options
from placer.plan import Placement
from placer.planner.accumulator import Accumulator
from placer.planner.trainers import options_for


def colocated_menus(rules: Rules, options: dict[str, list[Placement]]) -> dict[str, list[Placement]]:
    """``options`` with each co-located group's tables held to the device sets all of them have (in place; a group
    whose tables are not all in ``options`` is left as it is)."""
    for _, names in rules.groups:
        if not all(n in options for n in names):
            continue
        common = set.intersection(*({device_set(p) for p in options[n]} for n in names))
        for n in names:
            options[n] = [p for p in options[n] if device_set(p) in common]
    return options


def equal_rows(rules: Rules, options: dict[str, list[Placement]], groups: list[list[int]], names: list[str]
               ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Problem.equal for the co-located groups: for tables a, b next to each other in a group and each device
    set D, the ids of a's options on D and of b's (``groups[i]``: the option ids of table ``names[i]``)."""
    index = {n: i for i, n in enumerate(names)}
    out = []
    for _, members in rules.groups:
        for a, b in zip(members, members[1:]):
            by_set: dict = {}
            for side, name in enumerate((a, b)):
                ids = groups[index[name]]
                for oid, p in zip(ids, options[name]):
                    by_set.setdefault(device_set(p), ([], []))[side].append(oid)
            out += [(np.array(x, dtype=np.int64), np.array(y, dtype=np.int64)) for x, y in by_set.values()]
    return out


def honour(model: CostModel, method: str, placements: list[Placement]) -> list[Placement]:
    """``placements`` (one per table, workload order) with every table that breaks a constraint placed again on
    an option its rules allow (module docstring); unchanged where the constraints hold."""
    wl = model.wl
    if not wl.constraints.tables:
        return placements
    rules = model.rules
    bad = {p.table for p in placements if not rules.allows(p)}
    for rule, _ in rules.broken_groups(placements):
        bad.update(rule.tables)
    if not bad:
        return placements
    acc = Accumulator(model, [model.placement_cost(p) for p in placements if p.table not in bad])
    together = {n for _, names in rules.groups if bad & set(names) for n in names}  # their groups, whole
    menus = _menus(model, options_for(wl, OptionConfig()), bad | together)  # the forms the trainer runs
    placed = {p.table: p for p in placements if p.table not in bad}
    for t in sorted((t for t in wl.tables if t.name in bad), key=lambda t: (-t.size_bytes(), t.name)):
        cands = [p for p in menus[t.name] if rules.keeps_groups(t.name, device_set(p), placed)]
        best = None
        for p in cands:
            cost = model.placement_cost(p)
            if acc.fits(cost):
                step = acc.step_with(cost)
                if best is None or step < best[0]:
                    best = (step, p, cost)
        if best is None:
            raise InfeasibleError(f"{method}: table {t.name!r} has no option that its constraints allow and that "
                                  f"fits ({'; '.join(r.where for r in rules.by_table.get(t.name, ()))})")
        acc.add(best[2])
        placed[t.name] = best[1]
    return [placed[t.name] for t in wl.tables]


def _menus(model: CostModel, cfg: OptionConfig, names) -> dict[str, list[Placement]]:
    """The options the constraints allow of the tables ``names``, co-located groups held to their common device
    sets (colocated_menus)."""
    return colocated_menus(model.rules, {t.name: table_options(t, model.topo, model.wl, cfg, model.rules)
                                         for t in model.wl.tables if t.name in names})


def check_menus(model: CostModel, options: dict[str, list[Placement]] | None = None,
                cfg: OptionConfig = OptionConfig()) -> None:
    """InfeasibleError naming the constraints in conflict where a constrained table is left no option: one rule
    that allows none of the table's options on this machine, two rules that together allow none, a co-located
    group whose tables share no device set, or the form ``cfg`` forces (--method qr ...) with the table's rules.
    ``options``: the menu (colocated_menus applied), or None to build the constrained tables' own."""
    rules = model.rules
    if not rules.by_table:
        return
    if options is None:
        options = _menus(model, cfg, rules.by_table)
    for t in model.wl.tables:
        if t.name in rules.by_table and not options.get(t.name):
            head = f"table {t.name!r}: no placement meets its constraints on {model.topo.spec.name}: "
            form = cfg.forced_form
            if form and table_options(t, model.topo, model.wl, replace(cfg, forced_form=None), rules):
                raise InfeasibleError(head + f"--method {form} holds it to {form}, which its constraints do not allow ("
                                      + "; ".join(f"{r.where}: {r.said}" for r in rules.by_table[t.name])
                                      + "); --method ilp may place it otherwise")
            raise InfeasibleError(head + _conflict(model, t, rules))


def _conflict(model: CostModel, t, rules: Rules) -> str:
    """Which of ``t``'s rules leave it no option: one alone, a pair, or its co-located group."""
    menu = table_options(t, model.topo, model.wl, OptionConfig(), Rules.none())
    mine = rules.by_table[t.name]
    for r in mine:
        if not any(r.broken(p) is None for p in menu):
            return f"{r.where} allows none of the {len(menu)} placements this machine offers it ({r.said})"
    for i, a in enumerate(mine):
        for b in mine[i + 1:]:
            if not any(a.broken(p) is None and b.broken(p) is None for p in menu):
                return f"{a.where} ({a.said}) and {b.where} ({b.said}) together allow none"
    groups = [r.where for r, names in rules.groups if t.name in names]
    if groups:
        return f"the tables co-located by {', '.join(groups)} share no device set their other constraints allow"
    return "its constraints together allow none (" + "; ".join(f"{r.where}: {r.said}" for r in mine) + ")"


def constraints_note(model: CostModel) -> str:
    """For an infeasibility under constraints: ' Under the workload's constraints, ...' naming each entry and the
    headroom (what may have left the tables too little room); '' without constraints."""
    rules = model.rules
    if rules.empty:
        return ""
    said = [f"{r.where} ({r.said}: {len(r.tables)} table(s))" for r in rules.entries]
    if rules.headroom_GiB:
        said.append(f"constraints.hbm_headroom_GiB ({rules.headroom_GiB:g} GiB kept free on every GPU)")
    return (" Under the workload's constraints, which narrow where tables may go: " + "; ".join(said)
            + " (placer solve on the workload without them says whether they are the cause).")
