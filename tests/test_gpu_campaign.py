"""validation/gpu_campaign.py: the dry run executes every stage on this CPU (the same code as the GPU call but
the device) and leaves what the GPU machine would hand back; the shipped plans are valid for their spec."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validation import gpu_campaign  # noqa: E402


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-dry")
    done = subprocess.run([sys.executable, "validation/gpu_campaign.py", "--out", str(out), "--dry-run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    return out, done


def test_every_stage_runs_on_the_cpu(dry):
    out, done = dry
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    status = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if line.split()[:1]
              and line.split()[0] in gpu_campaign.STAGES}
    assert status == {stage: "ok" for stage in gpu_campaign.STAGES}, done.stdout[-3000:]


def test_what_comes_back_fits_the_machine_limits(dry):
    out, _ = dry
    files = sorted(p.name for p in out.iterdir())
    assert all((out / f).is_file() for f in files) and len(files) <= 8, files  # flat, at most 8 files
    assert {"calibrated.yaml", "micro.json", "env.json", "campaign.log", "profile.json"} <= set(files)
    fid = json.loads(next(out.glob("fidelity-cpu-dry-run-h200-*.json")).read_text())
    # the dry run reads the device's name as an H200's: the H200's datasheet spec prices the datasheet column
    assert fid["datasheet_spec"] == "h200-sxm-host.yaml" and fid["datasheet_note"] is None
    env = json.loads((out / "env.json").read_text())
    assert env["device_slug"] == "cpu-dry-run-h200" and env["datasheet_spec"].endswith("h200-sxm-host.yaml")
    assert env["packages"]["installed"] and set(env["packages"]["importable"]) >= {"triton", "fbgemm_gpu"}
    rows = [r for r in fid["rows"] if "error" not in r]
    assert len(rows) == gpu_campaign.DRY_PLANS + 1  # the shipped plans and the ILP re-solved on the calibrated spec
    assert rows[0]["name"] == "ilp@calibrated"
    for r in rows:
        assert r["measured_step_time_s"] > 0 and r["predicted_datasheet_step_time_s"] > 0 and r["ops"]
        assert r["host_read_mechanism"] == "cpu" and r["measured_embedding_s"] > 0
        # the graph path up to the capture call where the plan has a graph-safe step, else the eager step and why
        g = r["graph"]
        assert g["captured"] is False and g["not_captured_why"] and g["mode"] in ("on", "auto")
    assert any(r["graph"]["mode"] == "on" for r in rows)
    assert fid["summary"]["plans"] == len(rows) and fid["summary_embedding_phases"]["plans"] == len(rows)
    # interleaved rounds (validation/gpu_rounds.py): the ILPs in 2 rounds, then the others with the ILP in 2 more
    assert fid["rounds"] == 2 and [(t["tier"], t["rounds_completed"]) for t in fid["round_tiers"]] == [
        ("first", 2), ("rest", 2)]
    for r in rows:
        lo, hi = r["measured_interval_s"]
        assert len(r["rounds_step_time_s"]) == 4 and lo <= r["measured_step_time_s"] <= hi
        assert sum(v is not None for v in r["rounds_step_time_s"]) == (4 if r["name"] == "ilp@calibrated" else 2)
    w = fid["summary"]["per_workload"][rows[0]["workload"]]
    assert w["ilp_vs_fastest"]["ilp"] == "ilp@calibrated" and set(w["ilp_paired"]) == {r["name"] for r in rows[1:]}
    assert all(p["rounds"] == 2 for p in w["ilp_paired"].values()) and "separable_plans" in w
    assert "separable_plans" in fid["summary_embedding_phases"]["per_workload"][rows[0]["workload"]]
    micro = json.loads((out / "micro.json").read_text())
    assert {r["op"] for r in micro["rows"]} == {"reduce", "reduce_fixed", "sort", "update", "host_gather", "lookup",
                                               "groups"}
    assert not [r for r in micro["rows"] if "error" in r]
    assert all(r["calibrated_s"] and r["datasheet_s"] for r in micro["rows"])


def test_the_device_name_selects_the_datasheet_spec():
    """An H200 is priced by the H200's datasheet, an H100 by the H100's; a GPU with none here by a stand-in that
    the results name as such (never silently); file names carry the device."""
    from validation.gpu_device import datasheet_for, slug

    assert datasheet_for("NVIDIA H200")[0].name == "h200-sxm-host.yaml" and slug("NVIDIA H200") == "h200"
    assert datasheet_for("NVIDIA H100 80GB HBM3") == (gpu_campaign.DATASHEET, None)  # the SXM5 part
    assert gpu_campaign.DATASHEET.name == "h100-sxm-host.yaml" and slug("NVIDIA H100 80GB HBM3") == "h100"
    assert datasheet_for("NVIDIA H100 PCIe")[0].name == "h100-pcie-host.yaml"
    assert slug("NVIDIA H100 PCIe") == "h100-pcie"
    spec, why = datasheet_for("NVIDIA GH200 480GB")
    assert why and "GH200" in why and slug("NVIDIA GH200 480GB") == "nvidia-gh200-480gb"


def test_shipped_plans_are_valid_for_the_datasheet_spec():
    from placer.plan import load_plan
    from placer.plan_price import priced_plan
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    manifest = json.loads((gpu_campaign.PLANS / "manifest.json").read_text())
    hw = load_hardware(ROOT / manifest["datasheet"])
    h200 = load_hardware(ROOT / "hardware_specs" / "h200-sxm-host.yaml")
    plans = [(w, p) for w in manifest["workloads"] for p in w["plans"]]
    assert len(plans) >= 12
    assert sum(p["embedding_share"] >= 0.3 for _, p in plans) >= len(plans) / 2
    for w, p in plans:
        wl = load_workload(ROOT / w["file"])
        assert wl.dense.dtype == gpu_campaign.DENSE_DTYPE
        predicted = priced_plan(load_plan(ROOT / p["file"]), Topology(hw, wl.dense.dtype), wl)
        assert predicted["step_time_s"] == pytest.approx(p["predicted_step_time_s"], rel=1e-9), p["name"]
        # the GPU lent now: every plan fits the H200's datasheet spec too (more HBM than the H100 it was made for)
        on_h200 = priced_plan(load_plan(ROOT / p["file"]), Topology(h200, wl.dense.dtype), wl)
        assert 0 < on_h200["step_time_s"], p["name"]


def test_stage_limits_fit_a_330_second_call():
    """The stages' limits sum to the campaign's budget, 300 s: with the wheels' install one call ends within
    330 s, so that a rerun fits in a session's 15 minutes of device time."""
    assert sum(gpu_campaign.STAGES.values()) <= gpu_campaign.BUDGET_S <= 300
    assert gpu_campaign.DRY_HANG_S >= 300  # the dry run's fixed work, however loaded the machine: only hangs stop it


def test_first_plans_of_every_workload_run_first():
    import argparse

    order = gpu_campaign._plan_order(False, argparse.Namespace(plans=None), {})
    names = [name for _, name, _ in order]
    first = sum(1 for n in names if n in gpu_campaign.FIRST)
    assert first >= 4 and all(n in gpu_campaign.FIRST for n in names[:first])  # ilp and greedy_size of each first
    assert [w["name"] for w, n, _ in order[:first] if n == "ilp"] == [w["name"] for w in gpu_campaign._workloads(False)]


def _fake_row(w: dict, name: str, step: float) -> dict:
    return {"name": name, "workload": w["name"], "method": "ilp" if name.startswith("ilp") else name,
            "predicted_step_time_s": 1.0, "measured_step_time_s": step, "measured_embedding_s": step / 2,
            "predicted_embedding_s": 0.5, "phases": {"dense": {"measured_s": step / 2, "predicted_s": 0.5}},
            "ops": [{"kind": "dense", "stream": "s", "priced_s": 0.5, "measured_s": step / 2}]}


def test_plans_run_in_tiers_of_interleaved_rounds_and_merge_by_round():
    """FIRST's plans in rounds of their own, then the others with each workload's ILP again (the anchor of the
    paired verdicts), rounds numbered across the tiers; a failing plan is an error row with its reason."""
    from validation.gpu_rounds import merge_rounds, run_tiers
    from validation.rounds import paired

    w1, w2 = {"name": "w1"}, {"name": "w2"}
    todo = [(w1, "ilp@calibrated", None), (w1, "ilp", None), (w2, "ilp", None), (w1, "uvm", None),
            (w1, "host_cpu", None), (w2, "broken", None)]
    steps = {"ilp@calibrated": 1.0, "ilp": 1.1, "uvm": 2.0, "host_cpu": 4.0}
    calls, files = [], {"plans.jsonl": [], "rounds.jsonl": []}

    def measure(w, name, _path):
        calls.append((w["name"], name))
        if name == "broken":
            raise RuntimeError("CUDA out of memory")
        return _fake_row(w, name, steps[name] * (1 + 0.01 * len(calls)))  # a drift the rounds share

    done = run_tiers(todo, gpu_campaign.FIRST, 2, measure, time.time() + 3600, lambda f, r: files[f].append(r))
    assert done["tiers"]["first"] == {"plans": 3, "rounds_completed": 2, "stopped": None}
    assert done["tiers"]["rest"]["plans"] == 5  # uvm, host_cpu, broken and the anchors: w1's ilp@calibrated, w2's ilp
    assert done["failed"] == 1 and done["never_ran"] == 0
    assert calls.count(("w1", "ilp@calibrated")) == 4 and calls.count(("w1", "ilp")) == 2
    assert calls.count(("w2", "ilp")) == 4
    assert calls.count(("w2", "broken")) == 1  # not run again after its failure
    rows = merge_rounds(files["plans.jsonl"], files["rounds.jsonl"])
    assert [(r["workload"], r["name"]) for r in rows] == [(w["name"], n) for w, n, _ in todo]
    by = {r["name"]: r for r in rows if r["workload"] == "w1"}
    anchor = by["ilp@calibrated"]["rounds_step_time_s"]
    assert len(anchor) == 4 and None not in anchor
    assert by["ilp"]["rounds_step_time_s"][2:] == [None, None] and by["uvm"]["rounds_step_time_s"][:2] == [None, None]
    lo, hi = by["uvm"]["measured_interval_s"]
    assert lo <= by["uvm"]["measured_step_time_s"] <= hi and by["uvm"]["ratio"] == by["uvm"]["measured_step_time_s"]
    assert paired(by["ilp@calibrated"]["rounds_step_time_s"], by["uvm"]["rounds_step_time_s"])["rounds"] == 2
    assert "CUDA out of memory" in next(r for r in rows if r["name"] == "broken")["error"]


def test_a_round_the_deadline_cut_keeps_its_values_without_an_interval():
    w = {"name": "w"}
    lines = [dict(_fake_row(w, "ilp", 1.0), round=0), dict(_fake_row(w, "ilp", 1.2), round=1),
             dict(_fake_row(w, "uvm", 2.0), round=2)]
    records = [{"order": [["w", "ilp"], ["w", "uvm"], ["w", "fae"]]}, {"tier": "first", "round": 0, "order": []},
               {"tier": "first", "round": 1, "order": []}]  # round 2 (the rest's first) was cut: no record
    from validation.gpu_rounds import merge_rounds

    ilp, uvm, fae = merge_rounds(lines, records)
    assert ilp["rounds_step_time_s"] == [1.0, 1.2] and ilp["measured_interval_s"][0] == 1.0
    assert uvm["rounds_step_time_s"] == [None, None] and uvm["measured_step_time_s"] == 2.0
    assert uvm["measured_interval_s"] == [None, None] and uvm["partial_step_time_s"] == [2.0]
    assert fae["error"].startswith("skipped")
