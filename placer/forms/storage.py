"""The registry of storage forms, the answers to "it does not fit" that trade accuracy for memory or traffic:
compressed rows (QR, TT, int8: placer/forms/qr.py, tt.py, int8.py) and node-local replicas
(placer/forms/node_local.py), by name: which a table allows (its workload entry: compression, frozen,
node_local; placer/specs/compression.py) and which a placement uses (placer/plan.py). The forced methods of
``placer solve`` and ``placer compare`` (``--method qr``, ``tt``, ``int8``, ``node_local``) are the ILP with
every table that allows the form held to options of that form (OptionConfig.forced_form,
options.table_options): each answer beside the ILP's free choice, which is never slower, since the forced menu is
a part of the ILP's.
"""
from __future__ import annotations

from placer.errors import SpecError
from placer.forms import int8, node_local, qr, tt
from placer.forms.base import StorageForm
from placer.forms.shardings import TABLE_WISE

#: the compressed forms by name (Placement.form)
COMPRESSED: dict[str, StorageForm] = {f.name: f for f in (qr.FORM, tt.FORM, int8.FORM)}
NODE_LOCAL: StorageForm = node_local.FORM
#: every storage form by name
STORAGE: dict[str, StorageForm] = {**COMPRESSED, NODE_LOCAL.name: NODE_LOCAL}
#: the forms a method can force, in the order compare shows them
FORCED_FORMS = tuple(STORAGE)
#: the compressed forms in the order the option menu lists them (options.compressed_options)
MENU_ORDER: tuple[StorageForm, ...] = (qr.FORM, int8.FORM, tt.FORM)


def table_allows(t, form: str) -> bool:
    """Whether ``t``'s workload entry allows ``form`` (one of FORCED_FORMS; int8: frozen tables only)."""
    return STORAGE[form].allows(t)


def uses(p, form: str) -> bool:
    """Whether placement ``p`` stores or trains its table in ``form``."""
    if form == NODE_LOCAL.name:
        return bool(getattr(p, "node_local", False))
    return p.form == form


def form_label(p) -> str | None:
    """The forms ``p`` uses, for people: 'qr k=4', 'tt r=16x16', 'int8', 'node_local'; None when it uses none."""
    parts = [p.form_text] if p.compression is not None else []
    if uses(p, NODE_LOCAL.name):
        parts.append(NODE_LOCAL.name)
    return " ".join(parts) or None


def allowing(wl, form: str) -> list[str]:
    """Names of the tables of ``wl`` that allow ``form``."""
    return [t.name for t in wl.tables if table_allows(t, form)]


def force(options: list, t, form: str) -> list:
    """``options`` of table ``t`` held to ``form`` where ``t`` allows it and some option uses it; else as they are."""
    if not table_allows(t, form):
        return options
    held = [p for p in options if uses(p, form)]
    return held or options


def check_compressed(p, t, file, where: str) -> None:
    """A compressed placement: its form allowed by the table's workload entry (the form's ``check``), on one GPU
    with every row in HBM (the only geometry priced and run compressed)."""
    COMPRESSED[p.compression.form].check(p, t, file, f"{where}.compression")
    s = p.shards[0]
    if p.sharding != TABLE_WISE.name or len(p.shards) != 1 or s.hbm_rows != s.num_rows:
        raise SpecError(f"table {p.table!r}: a compressed table must be table_wise on one GPU with every row in "
                        f"HBM (hbm_rows = rows), got {p.label()}", file=file, field=f"{where}.sharding")
