"""validation/fidelity.py --smoke: calibrates (quick), plans, runs two plans in 2 interleaved rounds and writes
the JSON, the scatter and the markdown with the agreed keys. Structure only: no timing is asserted (CI machines
are busy)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = ROOT / "validation" / "fidelity.py"
RUN_KEYS = {"command", "git_commit", "date", "device", "device_name", "torch", "python", "machine", "rows", "summary"}
ROW_KEYS = {"name", "method", "workload", "predicted_step_time_s", "measured_step_time_s", "phases", "ops",
            "measured_interval_s", "rounds_step_time_s"}


def test_smoke_campaign_writes_json_png_and_table(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path), "--date", "2000-01-01"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads((tmp_path / "fidelity-cpu-2000-01-01-smoke.json").read_text())
    assert RUN_KEYS <= set(data), RUN_KEYS - set(data)
    rows = data["rows"]
    assert len(rows) == 2 and all("error" not in row for row in rows), rows
    for row in rows:
        assert ROW_KEYS <= set(row)
        assert row["predicted_step_time_s"] > 0 and row["measured_step_time_s"] > 0
        assert set(row["phases"]) >= {"embedding_forward", "dense", "embedding_backward"}
        kinds = {op["kind"] for op in row["ops"]}
        assert {"lookup", "sort", "segment_reduce", "update", "dense"} <= kinds, kinds
        assert all(op["priced_s"] >= 0 and op["measured_s"] >= 0 for op in row["ops"])
    assert len({row["method"] for row in rows}) == 2 and "ilp" in {row["method"] for row in rows}
    assert data["summary"]["plans"] == 2 and data["summary"]["mape"] >= 0
    # 2 interleaved rounds: every plan once per round, the rounds' orders recorded, each median with its interval
    assert data["rounds"] == 2 and data["workload_rounds"]["tiny"]["rounds_completed"] == 2
    assert all(sorted(o) == sorted(row["name"] for row in rows) for o in data["workload_rounds"]["tiny"]["orders"])
    for row in rows:
        lo, hi = row["measured_interval_s"]
        assert len(row["rounds_step_time_s"]) == 2 and lo <= row["measured_step_time_s"] <= hi
    w = data["summary"]["per_workload"]["tiny"]
    assert w["separable_plans"] <= 2 and w["spearman_separable"]["rho"] is None  # 2 plans: no rank correlation
    vs = w["ilp_vs_fastest"]
    assert vs["ilp"] == "ilp" and vs["rounds"] == 2 and vs["verdict"] in ("faster", "slower", "not separable")
    assert set(w["ilp_paired"]) == {row["name"] for row in rows} - {"ilp"}
    assert (tmp_path / "fidelity-cpu-2000-01-01-smoke.png").stat().st_size > 1000
    assert "| tiny | ilp |" in r.stdout and "measured / priced" in r.stdout
    assert "measured ms [90%]" in r.stdout and "ILP / fastest (paired)" in r.stdout
