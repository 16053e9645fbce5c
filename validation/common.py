"""What every validation script records with its results: the commit, the software and the machine; and
how it writes a JSON file (atomically)."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*argv: str) -> str | None:
    try:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return None


def environment() -> dict:
    import importlib.metadata as md

    def version(pkg):
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    cpu = platform.processor() or None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    dirty = git("status", "--porcelain", "--", "placer")
    return {"git_commit": git("rev-parse", "HEAD"), "placer_uncommitted_changes": bool(dirty),
            "python": platform.python_version(), "pulp": version("pulp"), "highspy": version("highspy"),
            "numpy": version("numpy"), "pydantic": version("pydantic"), "networkx": version("networkx"),
            "machine": {"cpu_cores": os.cpu_count(), "ram_bytes": mem, "cpu_model": cpu,
                        "platform": platform.platform()}}


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    tmp.replace(path)


def parse_case(text: str, limit: str = "SECONDS") -> tuple[str, str, float]:
    """(workload, hardware, limit) of a --cases entry WORKLOAD@HARDWARE:LIMIT (``limit`` names its unit in the
    message); SystemExit naming --cases when it is not one."""
    try:
        pair, value = text.rsplit(":", 1)
        wl, hw = pair.split("@")
        return wl, hw, float(value)
    except ValueError:
        raise SystemExit(f"--cases: expected WORKLOAD@HARDWARE:{limit}, got {text!r}") from None
