"""validation/gpu_campaign.py: the dry run executes every stage on this CPU (the same code as the GPU call but
the device) and leaves what the GPU machine would hand back; the shipped plans are valid for their spec."""
from __future__ import annotations

import json
import subprocess
import sys
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
    assert datasheet_for("NVIDIA H100 80GB HBM3") == (gpu_campaign.DATASHEET, None)
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


def test_first_plans_of_every_workload_run_first_and_repeats_merge_into_medians():
    import argparse

    order = gpu_campaign._plan_order(False, argparse.Namespace(plans=None), {})
    names = [name for _, name, _ in order]
    first = sum(1 for n in names if n in gpu_campaign.FIRST)
    assert first >= 4 and all(n in gpu_campaign.FIRST for n in names[:first])  # ilp and greedy_size of each first
    assert [w["name"] for w, n, _ in order[:first] if n == "ilp"] == [w["name"] for w in gpu_campaign._workloads(False)]
    rows = [{"name": "ilp", "workload": "w", "runs_step_time_s": [3.0], "measured_step_time_s": 3.0,
             "predicted_step_time_s": 2.0, "ratio": 1.5}, {"name": "x", "workload": "w", "error": "skipped"}]
    merged = gpu_campaign.merge_repeats(rows, [{"name": "ilp", "workload": "w", "measured_step_time_s": 1.0},
                                               {"name": "ilp", "workload": "w", "measured_step_time_s": 2.0}])
    assert merged[0]["runs_step_time_s"] == [3.0, 1.0, 2.0] and merged[0]["measured_step_time_s"] == 2.0
    assert merged[0]["ratio"] == 1.0 and merged[1] == rows[1]
