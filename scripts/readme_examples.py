#!/usr/bin/env python3
"""Write the README's example output from fresh runs, and check that it still matches them.

Every example is a placer command run as a user runs it (``python3 -m placer.cli``, in a scratch folder where
``hardware_specs/`` and ``workloads/`` are this checkout's), with ``--work-limit`` so that the plan and every
number but the wall times are the same on any machine. Its output goes into README.md between markers:

    <!-- readme-example NAME -->            ... written here ...            <!-- /readme-example -->

A block example's text is a fenced block of the command's stdout (abridged by ``Example.abridge``); an inline
example's is a sentence built from the plan's JSON. Wall times (``wall 1.09 s``) vary and are not compared.

    python3 scripts/readme_examples.py                 # run every example, rewrite README.md
    python3 scripts/readme_examples.py --check         # run them, compare with README.md (exit 1 on a difference)
    python3 scripts/readme_examples.py --only tour-solve --check
    python3 scripts/readme_examples.py --plots         # also redraw docs/plots/ (README's pictures)

tests/test_readme_examples.py checks the cheap examples (a few seconds each) on every run and the slow ones with
PLACER_SLOW_TESTS=1.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN = "<!-- readme-example {name} -->"
END = "<!-- /readme-example -->"
#: rows of 'largest tables' a tour block keeps (the summary prints 12)
TOUR_TABLE_ROWS = 4
#: the work limit of the examples: the same plan on any machine (docs/solver.md)
TOUR_WORK_LIMIT = 1000
V2_WORK_LIMIT = 3000


def run_placer(argv: list[str]) -> str:
    """stdout of ``placer ARGV`` run in a scratch folder holding this checkout's hardware_specs/ and workloads/;
    RuntimeError with its stderr when it fails."""
    with tempfile.TemporaryDirectory(prefix="placer-readme-") as tmp:
        for folder in ("hardware_specs", "workloads"):
            os.symlink(ROOT / folder, Path(tmp) / folder)
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("COLUMNS", None)  # the report's width: 140 when not a terminal (placer/report.py make_console)
        done = subprocess.run([sys.executable, "-m", "placer.cli", *argv], cwd=tmp, env=env, capture_output=True,
                              text=True)
    if done.returncode != 0:
        raise RuntimeError(f"placer {' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def abridge_summary(text: str, rows: int = TOUR_TABLE_ROWS) -> str:
    """A solve summary with its 'largest tables' cut to the first ``rows`` rows (a '...' row after them)."""
    out, in_tables, kept = [], False, 0
    for line in text.splitlines():
        if line.startswith("largest tables"):
            in_tables, kept = True, 0
        elif in_tables and line.startswith("│"):
            kept += 1
            if kept == rows + 1:
                out.append("│ ...")
            if kept > rows:
                continue
        elif in_tables and line.startswith("└"):
            in_tables = False
        out.append(line)
    return "\n".join(out)


def _tour() -> str:
    stdout = run_placer(["solve", "hardware_specs/h100-pcie-host.yaml", "workloads/mlperf-dlrm-v1.yaml", "-o",
                         "plan.json", "--work-limit", str(TOUR_WORK_LIMIT)])
    return "```\n" + abridge_summary(stdout.rstrip("\n")) + "\n```"


def _v2_dense() -> str:
    argv = ["solve", "hardware_specs/dgx-h100.yaml", "workloads/mlperf-dlrm-v2.yaml", "--json", "--work-limit",
            str(V2_WORK_LIMIT)]
    fp32 = json.loads(run_placer(argv))["predicted"]
    bf16 = json.loads(run_placer(argv + ["--dense-dtype", "bf16"]))["predicted"]
    return (f"mlperf-dlrm-v2 @ dgx-h100 is {fp32['step_time_s'] * 1e3:.1f} ms per step, "
            f"{fp32['phases_s']['dense'] * 1e3:.1f} ms of it dense; with `dtype: bf16` under `dense:` (or "
            f"`--dense-dtype bf16`) the same solve gives {bf16['step_time_s'] * 1e3:.1f} ms (`--work-limit "
            f"{V2_WORK_LIMIT}`)")


@dataclass(frozen=True)
class Example:
    """One README example: ``make`` runs it and returns the text between its markers; ``cheap``: a few seconds
    (checked by every test run; the others with PLACER_SLOW_TESTS=1)."""

    name: str
    make: Callable[[], str]
    cheap: bool
    note: str = field(default="")


EXAMPLES = {e.name: e for e in (
    Example("tour-solve", _tour, True, "placer solve of the three-command tour, stdout abridged"),
    Example("v2-dense-dtype", _v2_dense, False, "the dense dtype bullet of 'Read this first': two v2 solves"),
)}

#: (plot file under docs/plots/, solve arguments) redrawn by --plots
PLOTS = (
    ("plan-mlperf-dlrm-v1-h100-pcie-host.png", ["hardware_specs/h100-pcie-host.yaml", "workloads/mlperf-dlrm-v1.yaml",
                                                "--work-limit", str(TOUR_WORK_LIMIT)]),
    ("plan-mlperf-dlrm-v1-dgx-h100.png", ["hardware_specs/dgx-h100.yaml", "workloads/mlperf-dlrm-v1.yaml",
                                          "--work-limit", "2000"]),
    ("plan-production-856-dgx-h100-16node.png", ["hardware_specs/dgx-h100-16node.yaml",
                                                 "workloads/production-856.yaml", "--work-limit", "15000"]),
)


def region(text: str, name: str) -> tuple[int, int]:
    """(start, end) of the text between ``name``'s markers in ``text``; ValueError where they are missing."""
    begin = BEGIN.format(name=name)
    i = text.find(begin)
    j = text.find(END, i + len(begin)) if i >= 0 else -1
    if i < 0 or j < 0:
        raise ValueError(f"README.md has no '{begin} ... {END}' region")
    start = i + len(begin)
    return start, j


def in_readme(name: str, text: str | None = None) -> str:
    """What README.md holds between ``name``'s markers (without the newlines next to them)."""
    text = README.read_text() if text is None else text
    start, end = region(text, name)
    return text[start:end].strip("\n")


def replace_in(text: str, name: str, body: str) -> str:
    start, end = region(text, name)
    block = "\n" + body + "\n" if "\n" in body else body
    return text[:start] + block + text[end:]


def comparable(text: str) -> str:
    """Text with what varies between runs masked: wall times."""
    return re.sub(r"wall [0-9.]+ s", "wall - s", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with README.md instead of writing it")
    ap.add_argument("--only", nargs="+", choices=sorted(EXAMPLES), help="these examples only")
    ap.add_argument("--plots", action="store_true", help="also redraw docs/plots/ (a minute or two)")
    args = ap.parse_args(argv)
    text = README.read_text()
    differ = []
    for name in args.only or EXAMPLES:
        fresh = EXAMPLES[name].make()
        if args.check:
            if comparable(fresh) != comparable(in_readme(name, text)):
                differ.append(name)
                print(f"{name}: README.md differs from a fresh run:\n{fresh}", file=sys.stderr)
        else:
            text = replace_in(text, name, fresh)
            print(f"{name}: written", file=sys.stderr)
    if not args.check:
        README.write_text(text)
    if args.plots and not args.check:
        for png, solve_args in PLOTS:
            run_placer(["solve", *solve_args, "-q", "--json", "--plot", str(ROOT / "docs" / "plots" / png)])
            print(f"docs/plots/{png}: drawn", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
