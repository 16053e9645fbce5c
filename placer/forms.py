"""The answers to "it does not fit" that trade accuracy for memory or traffic, by name: which a table allows
(its workload entry: compression, frozen, node_local; placer/specs/compression.py) and which a placement uses
(placer/plan.py). The forced methods of ``placer solve`` and ``placer compare`` (``--method qr``, ``tt``,
``int8``, ``node_local``) are the ILP with every table that allows the form held to options of that form
(OptionConfig.forced_form, options.table_options): each answer beside the ILP's free choice, which is never slower,
since the forced menu is a part of the ILP's.
"""
from __future__ import annotations

from placer.plan import Placement
from placer.specs.workload import TableSpec, Workload

#: the forms a method can force, in the order compare shows them
FORCED_FORMS = ("qr", "tt", "int8", "node_local")


def table_allows(t: TableSpec, form: str) -> bool:
    """Whether ``t``'s workload entry allows ``form`` (one of FORCED_FORMS, or int8: frozen tables only)."""
    if form == "node_local":
        return bool(t.node_local)
    c = t.compression
    if c is None:
        return False
    if form == "int8":
        return bool(c.int8) and bool(t.frozen)
    return getattr(c, form, None) is not None


def uses(p: Placement, form: str) -> bool:
    """Whether placement ``p`` stores or trains its table in ``form``."""
    if form == "node_local":
        return bool(getattr(p, "node_local", False))
    return p.form == form


def form_label(p: Placement) -> str | None:
    """The forms ``p`` uses, for people: 'qr k=4', 'tt r=16x16', 'int8', 'node_local'; None when it uses none."""
    parts = [p.form_text] if p.compression is not None else []
    if uses(p, "node_local"):
        parts.append("node_local")
    return " ".join(parts) or None


def allowing(wl: Workload, form: str) -> list[str]:
    """Names of the tables of ``wl`` that allow ``form``."""
    return [t.name for t in wl.tables if table_allows(t, form)]


def force(options: list[Placement], t: TableSpec, form: str) -> list[Placement]:
    """``options`` of table ``t`` held to ``form`` where ``t`` allows it and some option uses it; else as they are."""
    if not table_allows(t, form):
        return options
    held = [p for p in options if uses(p, form)]
    return held or options
