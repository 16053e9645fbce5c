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


def validation_to_spec_error(exc: ValidationError, file: str | None) -> SpecError:
    """Turn a pydantic ValidationError into one SpecError listing every bad field with what was expected."""
    pairs = [_field_and_message(err) for err in exc.errors()]
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
        raise validation_to_spec_error(exc, str(path)) from None
