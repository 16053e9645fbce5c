"""The command's disk cache of dense traces (program/trace_cache.py): the same trace back, the same plan, a
damaged or foreign file passed over, and nothing written where it is off or for a library caller."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from placer.program import dense, trace_cache
from placer.specs.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
HW = str(ROOT / "hardware_specs" / "dgx-h100.yaml")
TINY = str(ROOT / "workloads" / "tiny.yaml")


def test_a_trace_round_trips_through_json():
    made = dense.trace(load_workload(ROOT / "workloads" / "criteo-kaggle-dlrm.yaml"), 512, "cuda")
    back = dense._from_json(json.loads(json.dumps(dense._to_json(made))))
    assert back == made


def test_a_library_caller_writes_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACER_CACHE_DIR", str(tmp_path))
    assert trace_cache.folder() is None  # this process is not the command


def _solve(cache: str, tmp_path: Path) -> tuple[dict, str]:
    env = {**os.environ, "PLACER_CACHE_DIR": cache}
    proc = subprocess.run([sys.executable, "-m", "placer.cli", "solve", HW, TINY, "--method", "greedy_size", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    plan["solver"].pop("wall_s")
    return plan, proc.stderr


def test_the_command_traces_once_and_plans_alike(tmp_path):
    cache = tmp_path / "cache"
    first, _ = _solve(str(cache), tmp_path)
    stored = list((cache / "dense-traces").glob("*.json"))
    assert len(stored) == 1  # the skew what-ifs share the plan's trace
    again, _ = _solve(str(cache), tmp_path)
    assert again == first
    stored[0].write_text('{"ops": [["broken"]]}')  # damaged: traced again and stored anew
    third, err = _solve(str(cache), tmp_path)
    assert third == first and "Traceback" not in err
    assert json.loads(stored[0].read_text())["params"] > 0


def test_off_writes_nothing(tmp_path):
    _solve("off", tmp_path)
    assert not any(tmp_path.iterdir())
