"""Machine-readable output is a contract: every command's stdout with --json parses as JSON, on the
single-stage and the two-stage paths and through both MILP backends. Each command runs in its own process,
since HiGHS prints its banner once per process (placer/planner/highs_banner.py), so the first solve of a
fresh process is the case that matters."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HW = ROOT / "hardware_specs"
WL = ROOT / "workloads"


def _json_stdout(*argv: str) -> object:
    done = subprocess.run([sys.executable, "-m", "placer.cli", *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"stdout is not JSON ({exc}): {done.stdout[:300]!r}") from None


@pytest.fixture(scope="module")
def tiny_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    _json_stdout("solve", str(HW / "dgx-h100.yaml"), str(WL / "tiny.yaml"), "--solver", "highs", "--time-limit", "10",
                 "-o", str(path), "--json")
    return path


@pytest.mark.parametrize("argv", [
    ["solve", "dgx-h100", "tiny", "--solver", "highs", "--time-limit", "10"],  # one stage, HiGHS via PuLP
    ["solve", "dgx-h100-2node", "tiny", "--time-limit", "8"],  # two stages: highspy's LP and fill
    ["solve", "dgx-h100-2node", "tiny", "--solver", "highs", "--time-limit", "8"],
    ["compare", "dgx-h100", "tiny", "--solver", "highs", "--methods", "ilp,greedy_size", "--time-limit", "15"],
    ["sweep", "dgx-h100-2node", "tiny", "--gpus", "8,16", "--solver", "highs", "--time-limit", "10"],
], ids=lambda a: "-".join(a[:4]))
def test_solving_commands_print_only_json(argv, tmp_path):
    command, hw, wl, *rest = argv
    data = _json_stdout(command, str(HW / f"{hw}.yaml"), str(WL / f"{wl}.yaml"), *rest, "--json",
                        *(["-o", str(tmp_path / "p.json")] if command == "solve" else []))
    assert data


@pytest.mark.parametrize("command", ["simulate", "explain"])
def test_plan_commands_print_only_json(command, tiny_plan):
    assert _json_stdout(command, str(HW / "dgx-h100.yaml"), str(WL / "tiny.yaml"), str(tiny_plan), "--json")
