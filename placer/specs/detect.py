"""Tell which kind of placer file a document is: hardware spec, workload spec or plan."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from placer.errors import SpecError


def detect_kind(data: dict[str, Any], path: str | Path) -> str:
    """'hardware', 'workload' or 'plan', from the document's top-level keys."""
    if "placements" in data:
        return "plan"
    if "templates" in data or "nodes" in data:
        return "hardware"
    if "tables" in data or "dense" in data or "table_defaults" in data:
        return "workload"
    raise SpecError("cannot tell the kind of file: expected a hardware spec (templates, nodes), "
                    "a workload (tables, dense) or a plan (placements)", file=str(path))


_WHAT = {"hardware": "a hardware spec", "workload": "a workload", "plan": "a plan"}


def expect_kind(data: dict[str, Any], path: str | Path, want: str) -> None:
    """Refuse a document that is clearly another kind of placer file than ``want`` (a workload given where the
    hardware spec goes: HW and WL swapped), naming what it is, rather than listing every field it lacks. A
    document of no recognisable kind is left to the model's validation, which names its fields."""
    try:
        kind = detect_kind(data, path)
    except SpecError:
        return
    if kind != want:
        order = " (HW and WL swapped? the hardware spec comes first, then the workload)" \
            if {kind, want} == {"hardware", "workload"} else ""
        raise SpecError(f"this file is {_WHAT[kind]}, not {_WHAT[want]}{order}", file=str(path))
