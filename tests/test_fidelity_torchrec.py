"""validation/fidelity_torchrec.py --smoke: the TorchRec campaign's structure on this machine (a quick calibrate
--nproc 2 --trainer torchrec, two plans of ranks-skewed8 planned under the torchrec trainer, exported and trained
under DistributedModelParallel on 2 gloo ranks in 2 interleaved rounds, one profiled run each for the step by
phase, the summary); not its timings."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placer.torchrec_io import dmp_phases  # noqa: E402
from validation import fidelity_torchrec  # noqa: E402


def test_smoke_trains_plans_under_dmp_beside_their_prediction(tmp_path, capsys):
    assert fidelity_torchrec.main(["--smoke", "--out", str(tmp_path)]) == 0
    data = json.loads(next(tmp_path.glob("fidelity-torchrec-2ranks-*-smoke.json")).read_text())
    assert data["nproc"] == 2 and data["rounds"] == 2 and {r["name"] for r in data["rows"]} == {"ilp", "greedy_size"}
    spec = Path(data["spec"]).read_text()
    assert "torchrec:" in spec  # the calibration timed FBGEMM's TBE
    for r in data["rows"]:
        assert "error" not in r, r
        assert r["measured_step_time_s"] > 0 and r["predicted_step_time_s"] > 0
        lo, hi = r["measured_interval_s"]
        assert len(r["rounds_step_time_s"]) == 2 and lo <= r["measured_step_time_s"] <= hi
        assert set(r["predicted_phases_s"]) >= {"embedding_forward", "embedding_backward", "dense"}
        for key in ("torchrec_estimate", "torchrec_estimate_defaults"):  # TorchRec's own rating of the plan
            assert r[key]["rating_ms"] > 0 and len(r[key]["per_rank_ms"]) == 2, r
        # the profiled run after the rounds: the slowest rank's operators by phase, summing to its profile
        phases = r["measured_phases_s"]
        assert set(phases) == set(dmp_phases.KEYS) and phases["embedding_forward"] > 0, r
        assert abs(sum(phases.values()) - r["profile_total_s"]) <= 1e-9 * r["profile_total_s"]
        assert abs(sum(r["profile_ops_s"][n][0] for n in r["profile_ops_s"]) - r["profile_total_s"]) < 1e-9
        assert phases["other"] <= 0.05 * r["profile_total_s"], r["unclassified"]
        assert 0.2 < r["profile_total_s"] / r["measured_step_time_s"] < 3, r  # a profile of the same step
        assert abs(sum(r["priced_phases_dmp_s"].values()) - r["predicted_step_time_s"]) < 1e-9
        assert len(r["rounds_step_time_s"]) == 2  # the profiled run is in no round
    w = data["summary"]["per_workload"]["ranks-skewed8"]
    assert w["plans"] == 2 and w["mape"] >= 0 and w["separable_plans"] <= 2
    assert w["torchrec_estimator"]["torchrec_estimate"]["plans"] == 2
    t = w["dmp_phases"]
    assert t["plans"] == 2 and set(t["phases"]) == set(dmp_phases.KEYS)
    assert t["phases"]["dense"]["measured_s"] > 0 and t["phases"]["dense"]["measured_over_priced"] > 0
    assert data["profile_steps"] == 2
    out = capsys.readouterr().out
    assert "TorchRec campaign" in out and "DMP's step by phase" in out
