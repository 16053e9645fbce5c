"""Read a YAML/JSON file into a pydantic model; every failure becomes a SpecError naming file and field."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from placer.errors import SpecError

ModelT = TypeVar("ModelT", bound=BaseModel)


def read_document(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or JSON file into a mapping. Raises SpecError for missing, empty or malformed files."""
    path = Path(path)
    if not path.exists():
        raise SpecError("file not found", file=str(path))
    if path.is_dir():
        raise SpecError("is a directory, expected a YAML or JSON file", file=str(path))
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise SpecError("file is empty, expected a YAML or JSON mapping", file=str(path))
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                        file=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"YAML syntax error{where}: {problem}", file=str(path)) from None
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


def validation_to_spec_error(exc: ValidationError, file: str | None) -> SpecError:
    """Turn a pydantic ValidationError into one SpecError listing every bad field with what was expected."""
    lines = []
    for err in exc.errors():
        field = format_location(tuple(p for p in err["loc"] if not _is_union_tag(p)))
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        if "input" in err and err["type"] not in ("missing", "extra_forbidden") and not isinstance(
                err["input"], (dict, list)):
            msg += f" (got {err['input']!r})"
        lines.append(f"{field}: {msg}")
    first_field = lines[0].split(":")[0] if lines else None
    if len(lines) == 1:
        return SpecError(lines[0].split(": ", 1)[1], file=file, field=first_field)
    return SpecError("invalid fields:\n  " + "\n  ".join(lines), file=file)


def _is_union_tag(part: Any) -> bool:
    """pydantic puts discriminator tags like 'zipf' in locations of tagged unions; keep paths readable."""
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
