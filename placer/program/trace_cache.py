"""Dense traces kept on disk between commands (program/dense.py traces the dense step on the meta device).

A trace needs torch imported (2.5 s on a 2-core machine) and the step run under a dispatch mode (0.1-2 s by
model); the same workload traced again gives the same ops. So the ``placer`` command keeps each trace in a
cache folder: ``$PLACER_CACHE_DIR``, else ``$XDG_CACHE_HOME/placer``, else ``~/.cache/placer``, under
``dense-traces/``. A trace is filed by a hash of what decides it: the dense model and the features' widths (the
workload less its tables' access skew), the samples, the device type, the version of torch and the code that
traces (dense.py and dense_model.py). ``PLACER_CACHE_DIR=off`` turns it off. A folder that cannot be read or
written is passed over: the trace is made as without it. At most MAX_FILES traces are kept, the oldest removed.

Only the command uses it (placer/process.py's ``owned``): a library caller's process keeps its traces in memory.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

#: traces kept on disk (each 1 KB to ~1 MB of JSON); the least recently written go first
MAX_FILES = 256


def folder() -> Path | None:
    """The cache folder, or None where it is off or this process is not the command."""
    from placer import process

    if not process.owned():
        return None
    chosen = os.environ.get("PLACER_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "none") else Path(chosen) / "dense-traces"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "placer" / "dense-traces"


def _fingerprint() -> str:
    """The torch version and the tracing code's bytes: a trace made by other code is never read back."""
    from importlib import metadata

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    h = hashlib.sha256(torch_version.encode())
    here = Path(__file__).resolve().parent
    for name in ("dense.py", "dense_model.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()


def key(workload_json: str, samples: int, device_type: str) -> str:
    text = json.dumps([workload_json, int(samples), device_type, _fingerprint()])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def exists(name: str) -> bool:
    """Whether the trace ``name`` is stored (it may still prove unreadable: ``load``)."""
    where = folder()
    return where is not None and (where / f"{name}.json").is_file()


def load(name: str) -> dict | None:
    """The stored trace ``name`` (as saved), or None."""
    where = folder()
    if where is None:
        return None
    try:
        return json.loads((where / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def save(name: str, data: dict) -> None:
    """Store a trace (written whole, then renamed into place); silently nothing where the folder is unwritable."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, where / f"{name}.json")
        kept = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in kept[:max(0, len(kept) - MAX_FILES)]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
