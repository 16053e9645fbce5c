"""validation/fidelity_ranks.py --smoke: the two-rank campaign's structure on this machine (a quick
calibrate --nproc 2, two plans of ranks-skewed8 run as 2 gloo ranks in 2 interleaved rounds, the summary); not
its timings."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validation import fidelity_ranks  # noqa: E402


def test_the_forced_plans_are_valid_and_spread(tmp_path):
    from placer.cost import CostModel
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    hw = load_hardware(ROOT / "hardware_specs" / "local-cpu-procs.yaml")
    wl = load_workload(fidelity_ranks.WORKLOADS / "ranks-many-small.yaml")
    topo = Topology(hw, wl.dense.dtype)
    plans = dict(fidelity_ranks.forced_plans(topo, wl, CostModel(topo, wl), None))
    assert set(plans) == {"forced:one-rank", "forced:row-wise", "forced:column-wise"}
    one = plans["forced:one-rank"]
    assert {s.device for p in one.placements for s in p.shards} == {topo.gpus[0]}
    assert all(p.sharding == "row_wise" and len(p.shards) == 2 for p in plans["forced:row-wise"].placements)
    cols = plans["forced:column-wise"].placements
    assert all(p.sharding == "column_wise" and all(s.num_cols % 4 == 0 for s in p.shards) for p in cols)


def test_smoke_writes_rows_and_a_summary(tmp_path, capsys):
    assert fidelity_ranks.main(["--smoke", "--out", str(tmp_path)]) == 0
    data = json.loads(next(tmp_path.glob("fidelity-ranks-*-smoke.json")).read_text())
    assert data["nproc"] == 2 and data["rounds"] == 2 and len(data["rows"]) == 2
    assert data["workload_rounds"]["ranks-skewed8"]["rounds_completed"] == 2
    for r in data["rows"]:
        assert "error" not in r, r
        assert r["measured_step_time_s"] > 0 and r["predicted_step_time_s"] > 0 and r["spread"] >= 0
        lo, hi = r["measured_interval_s"]
        assert len(r["rounds_step_time_s"]) == 2 and lo <= r["measured_step_time_s"] <= hi
    w = data["summary"]["per_workload"]["ranks-skewed8"]
    assert w["plans"] == 2 and "measured_spread" in w and w["ilp_rank"] in (1, 2)
    assert w["ilp_vs_fastest"]["rounds"] == 2 and len(w["ilp_paired"]) == 1 and w["separable_plans"] <= 2
    out = capsys.readouterr().out
    assert "| ranks-skewed8 |" in out and "ILP / fastest (paired)" in out
