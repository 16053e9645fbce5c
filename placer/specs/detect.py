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
