"""Read a YAML/JSON file into a pydantic model; every failure becomes a SpecError naming file and field."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from placer.errors import SpecError
from placer.specs.documents import parse_document
from placer.specs.files import MAX_DOCUMENT_BYTES, read_text_guarded

ModelT = TypeVar("ModelT", bound=BaseModel)


def read_document(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or JSON file (JSON when its name ends in .json) into a mapping, read through the guarded
    reader (placer/specs/files.py: regular files of at most 64 MiB, UTF-8) and parser
    (placer/specs/documents.py: no duplicate keys, bounded nesting). Raises SpecError naming the file for
    a missing, unreadable, oversized, empty or malformed file, or one that is not a mapping."""
    path = Path(path)
    text = read_text_guarded(path, max_bytes=MAX_DOCUMENT_BYTES, what="YAML or JSON file")
    if not text.strip():
        raise SpecError("file is empty, expected a YAML or JSON mapping", file=str(path))
    data = parse_document(text, str(path), json_syntax=path.suffix.lower() == ".json")
    if data is None:
        raise SpecError("file holds no data, expected a mapping", file=str(path))
    if not isinstance(data, dict):
        raise SpecError(f"expected a mapping at the top level, found {type(data).__name__}", file=str(path))
    return data


def format_location(loc: tuple) -> str:
    """pydantic error location -> 'tables[3].rows' style field path."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


#: a field path at the start of a validator's message: "links[0].between: unknown device ..."
_MESSAGE_PATH = re.compile(r"^([A-Za-z_][\w-]*(?:\[\d+\])*(?:\.[A-Za-z_][\w-]*(?:\[\d+\])*)*): (.+)$", re.S)

#: fields whose value is a tagged union (``kind:``); pydantic puts the tag in the error location
_TAGGED_UNION_FIELDS = {"access", "interaction"}


def _field_and_message(err: dict) -> tuple[str, str]:
    """One pydantic error -> (field path, message), the path joined with any path the message starts with."""
    loc = list(err["loc"])
    parts = [p for i, p in enumerate(loc)
             if not _is_union_tag(p) and not (i > 0 and loc[i - 1] in _TAGGED_UNION_FIELDS and isinstance(p, str))]
    field = format_location(tuple(parts))
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] in ("value_error", "assertion_error"):
        msg = re.sub(r"^(Value|Assertion) error, ", "", msg)
        m = _MESSAGE_PATH.match(msg)
        if m:  # the validator named a deeper field: join it to the location it was raised at
            inner, msg = m.group(1), m.group(2)
            head = inner.split(".")[0].split("[")[0]
            if parts and parts[-1] == head:
                parts = parts[:-1]
            prefix = format_location(tuple(parts)) if parts else ""
            field = f"{prefix}.{inner}" if prefix else inner
    if "input" in err and err["type"] not in ("missing", "extra_forbidden") and not isinstance(
            err["input"], (dict, list)):
        msg += f" (got {err['input']!r})"
    return field, msg


#: the first list index of a field path: 'tables[3].access.alpha' -> ('tables', '3', '.access.alpha')
_FIRST_INDEX = re.compile(r"^([^\[]*)\[(\d+)\](.*)$")
#: list items named in a folded error before "..."
_ITEMS_SHOWN = 3


def _defaults_origin(pairs: list[tuple[str, str]], data: dict | None) -> list[tuple[str, str]]:
    """Errors in a table's value that the table does not write but ``table_defaults`` does: moved to where the
    value is written (``table_defaults.<key>``), so that a bad default is one error, not one per table."""
    defaults = data.get("table_defaults") if isinstance(data, dict) else None
    tables = data.get("tables") if isinstance(data, dict) else None
    if not isinstance(defaults, dict) or not isinstance(tables, list):
        return pairs
    out = []
    for field, msg in pairs:
        m = re.match(r"^tables\[(\d+)\]\.([A-Za-z_][\w-]*)(.*)$", field)
        if m:
            i, key = int(m.group(1)), m.group(2)
            own = tables[i] if i < len(tables) else None
            if key in defaults and not (isinstance(own, dict) and key in own):
                field = f"table_defaults.{key}{m.group(3)}"
        out.append((field, msg))
    return out


def _known_names(model: type[BaseModel] | None) -> set[str]:
    """Every field name of ``model`` and of the models its fields hold (for "did you mean")."""
    from typing import get_args

    names: set[str] = set()
    seen: set = set()
    stack = [model] if model is not None else []
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        for name, info in getattr(m, "model_fields", {}).items():
            names.add(name)
            kids = [info.annotation]
            while kids:
                a = kids.pop()
                if isinstance(a, type) and issubclass(a, BaseModel):
                    stack.append(a)
                kids.extend(get_args(a))
    return names


def _did_you_mean(pairs: list[tuple[str, str]], model: type[BaseModel] | None) -> list[tuple[str, str]]:
    """An unknown field gets "did you mean 'x'?": a required field missing beside it first (whose own
    "Field required" error is then dropped: the typo is the one mistake), else the nearest name placer knows."""
    missing: dict[str, list[str]] = {}  # parent path -> its required fields that are missing
    for f, m in pairs:
        if m == "Field required":
            parent, _, name = f.rpartition(".")
            missing.setdefault(parent, []).append(name)
    known = sorted(_known_names(model))
    out, dropped = [], set()
    for f, m in pairs:
        if m == "unknown field":
            parent, _, name = f.rpartition(".")
            near = _nearest(name, missing.get(parent, []), 0.6) or _nearest(name, known, 0.75)
            if near:
                m = f"unknown field; did you mean {near[0]!r}?"
                if near[0] in missing.get(parent, []):
                    dropped.add((f"{parent}.{near[0]}" if parent else near[0], "Field required"))
        out.append((f, m))
    return [p for p in out if p not in dropped]


def _nearest(name: str, choices: list[str], cutoff: float) -> list[str]:
    """The choice nearest ``name``, letter case ignored (hbm_gib -> hbm_GiB), as a list of at most one."""
    import difflib

    lower = {c.lower(): c for c in choices}
    return [lower[n] for n in difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=cutoff)]


def _fold(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One line per mistake: exact repeats dropped, and the same error in several items of one list (a typo
    copied into every table, or a YAML anchor merged into each) folded into one line naming the items."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    order: list[tuple[str, str, str]] = []
    for f, m in pairs:
        g = _FIRST_INDEX.match(f)
        key = (g.group(1), g.group(3), m) if g else (f, "", m)
        items = groups.setdefault(key, [])
        if not items:
            order.append(key)
        idx = g.group(2) if g else ""
        if idx not in items:
            items.append(idx)
    out = []
    for head, tail, m in order:
        items = groups[(head, tail, m)]
        if len(items) == 1:
            out.append((f"{head}[{items[0]}]{tail}" if items[0] else head, m))
            continue
        shown = ", ".join(f"{head}[{i}]" for i in items[:_ITEMS_SHOWN])
        more = f", ... ({len(items)} in all)" if len(items) > _ITEMS_SHOWN else ""
        out.append((f"{head}[*]{tail}", f"{m} (in {shown}{more})"))
    return out


def validation_to_spec_error(exc: ValidationError, file: str | None, data: dict | None = None,
                             model: type[BaseModel] | None = None) -> SpecError:
    """Turn a pydantic ValidationError into one SpecError listing every bad field with what was expected: each
    mistake once, where it is written (a bad ``table_defaults`` value at table_defaults, not in every table; the
    same error in many list items on one line), an unknown field with the name it most likely meant."""
    pairs = [_field_and_message(err) for err in exc.errors()]
    pairs = _fold(_did_you_mean(_defaults_origin(pairs, data), model))
    if len(pairs) == 1:
        return SpecError(pairs[0][1], file=file, field=pairs[0][0])
    return SpecError("invalid fields:\n  " + "\n  ".join(f"{f}: {m}" for f, m in pairs), file=file)


def _is_union_tag(part: Any) -> bool:
    """pydantic puts validator tags like 'function-after[...]' in locations; keep paths readable."""
    return isinstance(part, str) and part.startswith("function-")


def load_model(model: type[ModelT], path: str | Path, data: dict[str, Any] | None = None,
               context: dict[str, Any] | None = None) -> ModelT:
    """Validate the document at ``path`` (or the given ``data``) against ``model``."""
    if data is None:
        data = read_document(path)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise validation_to_spec_error(exc, str(path), data, model) from None
