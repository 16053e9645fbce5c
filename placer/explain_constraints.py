"""Which of a workload's constraints bind a plan, and what each costs: the step without it, the other tables kept.

For every constraint entry (placer/constraints.py) and the HBM headroom: among the placements of the tables it
names that this constraint alone forbids (the table's other constraints allowed, its co-located group kept where
the entry is not that co-location), the one that gives the fastest step with every other table where it is and
every memory within its capacity (explain.Explainer.swap). The entry binds where that step is faster than the
plan's; its cost is the difference. A local measure (one table moved at a time): a constraint can cost more where
several tables would move together; ``placer solve`` on the workload without the entry says how much.
Where an entry names more tables than MAX_TABLES, the ones that carry the most of the step are tried.
"""
from __future__ import annotations

from functools import partial

from placer.constraints import Rule, Rules, device_set
from placer.options import table_options

#: the most tables of one entry whose options are priced (those that carry the most of the step first)
MAX_TABLES = 32


def binding_constraints(ex) -> list[dict]:
    """One row per constraint entry (and the headroom, where set) of ``ex``'s workload: {"constraint", "tables",
    "binds", "step_time_without_s", "cost_s", "table", "placement"} (the last two: the move that shows it)."""
    rules = ex.model.rules
    if rules.empty:
        return []
    rows = []
    for rule in rules.entries:
        alone = partial(_only, rules, rule, ex=ex)  # (table, q): a placement this rule alone forbids
        rows.append(_row(ex, rule.where, list(rule.tables), alone))
    if rules.headroom_GiB:
        rows.append(_row(ex, "constraints.hbm_headroom_GiB", [p.table for p in ex.plan.placements],
                         lambda table, q: rules.allows(q) and rules.keeps_groups(table, device_set(q), ex.placed),
                         headroom=True))
    return rows


def _row(ex, where: str, names: list[str], forbidden_only, headroom: bool = False) -> dict:
    """The fastest move of one of ``names`` onto a placement ``forbidden_only(table, q)`` accepts."""
    names = sorted(names, key=lambda n: -ex.removal_gain(n))[:MAX_TABLES]
    best = None
    free = Rules.none()
    extra = ex.model.rules.headroom_bytes()
    for table in names:
        current = ex.plan.placements[ex.index[table]]
        for q in table_options(ex.specs[table], ex.topo, ex.model.wl, ex.options, free):
            if q == current or not forbidden_only(table, q):
                continue
            step, _, over = ex.swap(table, ex.model.placement_cost(q))
            if headroom:  # allowed only by the headroom: over it with it, within capacity without it
                if not over or any(ex.topo.memories[m].kind != "hbm" or placed > usable + extra
                                   for m, placed, usable in over):
                    continue
            elif over:
                continue
            if best is None or step < best[0]:
                best = (step, table, q.label())
    binds = best is not None and best[0] < ex.step * (1 - 1e-9)
    return {"constraint": where, "tables": len(names), "binds": binds,
            "step_time_without_s": best[0] if binds else None, "cost_s": ex.step - best[0] if binds else 0.0,
            "table": best[1] if binds else None, "placement": best[2] if binds else None}


def _only(rules: Rules, rule: Rule, table: str, q, ex) -> bool:
    """Whether ``rule`` forbids ``q`` and nothing else of ``table``'s constraints does."""
    if any(r.broken(q) for r in rules.by_table.get(table, ()) if r is not rule):
        return False
    placed, devices = ex.placed, device_set(q)
    if rule.broken(q) is None and rule.spec.colocate:  # the co-location alone forbids it
        return (not rules.keeps_groups(table, devices, placed, only=rule)
                and rules.keeps_groups(table, devices, placed, skip=rule))
    return rule.broken(q) is not None and rules.keeps_groups(table, devices, placed)
