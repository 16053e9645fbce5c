#!/usr/bin/env python3
"""The GPU campaign: one command that measures placer on one GPU (any model) within 300 s of wall time.

    python3 validation/gpu_campaign.py --make-plans             # on a CPU machine, before: the plans it runs
    python3 validation/gpu_campaign.py --reprice-plans          # the same plans priced by today's cost model
    python3 validation/gpu_campaign.py --out DIR                # on the GPU machine (scripts/gpu_kit.sh)
    python3 validation/gpu_campaign.py --out DIR --dry-run      # every stage on this CPU at tiny sizes (CI)

Stages, each a child process with its own time limit (``STAGES``; a failure or a time-out is recorded and the
next stage runs), results written into DIR as they come:

1. env:       GPU name, driver, clocks and memory (nvidia-smi), torch and CUDA versions, installed packages, and
              the datasheet spec the GPU's name selects (validation/gpu_device.py: h200-sxm-host for an H200,
              h100-pcie-host for an H100 PCIe, h100-sxm-host for another H100; results are named by the device)
              -> env.json
2. calibrate: ``placer calibrate --device cuda --quick`` with the campaign's workloads -> calibrated.yaml
3. micro:     validation/gpu_micro.py: reduce (uniform and zipf ids), sort, updates in HBM and through UVA,
              zero-copy gathers, fp16 vs fp32 lookups, whole groups; measured / priced under the datasheet
              spec and the calibrated one -> micro.json
4. resolve:   the ILP solved again on the calibrated spec, per workload (the plan placer would choose for
              this machine; needs pulp and highspy: scripts/gpu_kit.sh carries them)
5. plans:     every plan of validation/gpu_plans/ (made by --make-plans for hardware_specs/h100-sxm-host.yaml, the
              SXM5 H100's figures, which were h100-pcie-host.yaml's when the committed plans were made;
              priced on the selected datasheet spec and the calibrated one)
              and the re-solved ILPs run on the GPU in this process in interleaved rounds (validation/gpu_rounds.py:
              the ILPs and greedy_size of every workload in 3 rounds, then the other plans with each workload's
              ILP in rounds while the stage has time; placer's runner: CUDA events, warm-up, a phase pass, an op
              pass, median step), each priced under both specs
6. profile:   validation/gpu_profile.py: where a GPU step's time goes, the host issuing ops or the device running
              them (dense steps per stage, whole planned steps: host time, kernels, syncs) -> profile.json
7. report:    fidelity-<device>-<date>.json (the CPU campaign's schema: rows with predicted and measured step,
              its 90% interval and every round's, phases, ops; MAPE and Spearman for the step AND the embedding
              phases alone; per workload Spearman over the plans whose intervals separate, the ILP / fastest and
              the ILP against each plan on paired rounds, with intervals), a scatter PNG, the summary printed

With ``--dry-run`` the device is the CPU, sizes are tiny (calibrate --device cpu --quick, the micro-benchmarks'
tiny sizes, the tiny workload's first plans, a few steps): the same code paths but the device, in under two
minutes; CI runs it (tests/test_gpu_campaign.py). Every file lands flat in DIR (campaign.log holds every
stage's output), at most 8 files: what the GPU machine can hand back.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PLANS = ROOT / "validation" / "gpu_plans"
DATASHEET = ROOT / "hardware_specs" / "h100-sxm-host.yaml"

#: (name, shipped workload, global batch, rows divided by, fp16 allowed, seconds of timed steps per plan); the
#: dense part runs bf16 so that the embedding phases are a large share of the step (the issue's >= 30%)
CASES = [
    ("tiny@4096", "tiny", 4096, 1, True, 1.0),
    ("criteo-kaggle@16384", "criteo-kaggle-dlrm", 16384, 1, True, 1.5),
    ("mlperf-dlrm-v1/32@16384", "mlperf-dlrm-v1", 16384, 32, True, 1.5),
    ("mlperf-dlrm-v2/32@8192", "mlperf-dlrm-v2", 8192, 32, True, 1.5),
]
DENSE_DTYPE = "bf16"
#: stage -> its time limit on the GPU, s. The sum (300 s) is the campaign's wall time at most; with the wheels'
#: install and Python start-ups (about 20 s) one device call ends within 330 s, so that a rerun still fits in a
#: session's 15 minutes of device time (starts included); --budget-s cuts the later stages. The first campaign on an
#: H100 (2026-11-27) took 236 s: env 5, calibrate 17, micro 20, resolve 11, plans 179, report 3.
STAGES = {"env": 10, "calibrate": 45, "micro": 25, "resolve": 15, "plans": 165, "profile": 25, "report": 15}
BUDGET_S = 300
#: A dry run (the CPU, the tests) does a fixed amount of work in every stage (tiny sizes, DRY_PLANS plans): its
#: stage limit only catches a hang, so that a loaded machine, where a stage takes several times as long, still
#: runs every stage (the profile stage's former 20 s limit timed out under load: issue 47).
DRY_HANG_S = 600
DRY_PLANS = 3  # plans of the tiny workload a dry run executes
DRY_DEVICE_NAME = "NVIDIA H200"  # the device a dry run's datasheet selection reads (the GPU lent now)
COMMAND_VAR = "PLACER_CAMPAIGN_COMMAND"  # the campaign's command line, for the report written by a child
EMBEDDING_PHASES = ("embedding_forward", "forward_exchange", "backward_exchange", "embedding_backward",
                    "gradient_allreduce")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def placer_cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "placer.cli", *argv]


# ---- before the call: the plans (CPU machine) ------------------------------------------------------------------

def make_plans(time_limit: float) -> int:
    """Write validation/gpu_plans/: the campaign's workloads (bf16 dense) and every method's and forced plan for
    the datasheet spec, deduplicated, with manifest.json listing them and each plan's predicted shares."""
    from validation.fidelity import make_plans as plans_for, make_workloads

    if PLANS.exists():
        shutil.rmtree(PLANS)
    workloads = make_workloads([c[:6] for c in CASES], PLANS / "workloads", dense_dtype=DENSE_DTYPE)
    manifest = {"datasheet": str(DATASHEET.relative_to(ROOT)), "dense_dtype": DENSE_DTYPE,
                "made_by": "python3 validation/gpu_campaign.py --make-plans", "workloads": []}
    for name, path, seconds in workloads:
        log(f"{name}: planning")
        plans = plans_for(DATASHEET, path, PLANS / "plans" / path.stem, time_limit, smoke=False, all_hbm=True)
        entries = []
        for plan_name, plan_path in plans:
            predicted = json.loads(plan_path.read_text())["predicted"]
            share = embedding_share(predicted["phases_s"], predicted["step_time_s"])
            entries.append({"name": plan_name, "file": str(plan_path.relative_to(ROOT)),
                            "predicted_step_time_s": predicted["step_time_s"], "embedding_share": share})
            log(f"  {plan_name}: {predicted['step_time_s'] * 1e3:.3f} ms, embedding phases {share:.0%}")
        manifest["workloads"].append({"name": name, "file": str(path.relative_to(ROOT)), "seconds": seconds,
                                      "plans": entries})
    (PLANS / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    n = sum(len(w["plans"]) for w in manifest["workloads"])
    shares = [p["embedding_share"] for w in manifest["workloads"] for p in w["plans"]]
    log(f"wrote {n} plans; {sum(s >= 0.3 for s in shares)} of them with embedding phases >= 30% of the step")
    return 0


def reprice_plans() -> int:
    """Price validation/gpu_plans/' plans again on the datasheet spec with today's cost model, the plans kept as
    they are (so that campaigns before and after a change of the model measure the same plans)."""
    from placer.plan import load_plan
    from placer.plan_price import priced_plan
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    manifest = json.loads((PLANS / "manifest.json").read_text())
    hw = load_hardware(ROOT / manifest["datasheet"])
    for w in manifest["workloads"]:
        wl = load_workload(ROOT / w["file"])
        for p in w["plans"]:
            path = ROOT / p["file"]
            plan = load_plan(path)
            predicted = priced_plan(plan, Topology(hw, wl.dense.dtype), wl)
            plan.model_copy(update={"predicted": predicted}).write(path)
            p["predicted_step_time_s"] = predicted["step_time_s"]
            p["embedding_share"] = embedding_share(predicted["phases_s"], predicted["step_time_s"])
            log(f"{w['name']} {p['name']}: {predicted['step_time_s'] * 1e3:.3f} ms")
    manifest["repriced_by"] = "python3 validation/gpu_campaign.py --reprice-plans"
    (PLANS / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


def embedding_share(phases_s: dict, step_s: float) -> float:
    return sum(phases_s.get(p, 0.0) for p in EMBEDDING_PHASES) / step_s if step_s > 0 else 0.0


# ---- the stages (each runs in its own child: --stage NAME) ------------------------------------------------------

def stage_env(out: Path, dry: bool, device_name: str | None = None) -> dict:
    """The machine (env.json): GPU, driver, versions, installed packages; the device's name picks the datasheet
    spec the later stages price with (validation/gpu_device.py; ``device_name`` overrides the detected one)."""
    import torch

    from validation.gpu_device import describe, packages

    info = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
            "python": sys.version.split()[0], "cpu_count": os.cpu_count(), "dry_run": dry}
    if torch.cuda.is_available() and not dry:
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info(0)
        info.update({"gpu": props.name, "multiprocessors": props.multi_processor_count,
                     "l2_cache_bytes": getattr(props, "L2_cache_size", None),
                     "memory_total_bytes": total, "memory_free_bytes": free})
    info.update(describe(device_name or info.get("gpu") or "cpu", dry))
    info["packages"] = packages()
    query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,memory.free,power.limit"
    try:
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=15)
        info["nvidia_smi"] = dict(zip(query.split(","), (v.strip() for v in smi.stdout.strip().split(","))))
    except (OSError, subprocess.TimeoutExpired) as exc:
        info["nvidia_smi"] = f"not available ({type(exc).__name__})"
    from validation.common import environment

    info["environment"] = environment()
    (out / "env.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    return info


def datasheet(out: Path) -> Path:
    """The datasheet spec the env stage chose for this device (env.json), else the plans' own (DATASHEET)."""
    env = out / "env.json"
    chosen = json.loads(env.read_text()).get("datasheet_spec") if env.exists() else None
    return ROOT / chosen if chosen else DATASHEET


def _manifest() -> dict:
    return json.loads((PLANS / "manifest.json").read_text())


def _workloads(dry: bool) -> list[dict]:
    """The manifest's workloads (a dry run: the first, with its first DRY_PLANS plans)."""
    wls = _manifest()["workloads"]
    return [dict(wls[0], plans=wls[0]["plans"][:DRY_PLANS])] if dry else wls


def stage_calibrate(out: Path, dry: bool) -> dict:
    spec = out / "calibrated.yaml"
    cmd = placer_cmd("calibrate", "--device", "cpu" if dry else "cuda", "--quick", "-o", str(spec), "--name",
                     "campaign-calibrated")
    for w in _workloads(dry):
        cmd += ["--workload", str(ROOT / w["file"])]
    if dry:
        cmd += ["--threads", "1"]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return {"spec": spec.name, "wall_s": time.perf_counter() - t0, "command": " ".join(cmd[2:])}


def stage_micro(out: Path, dry: bool) -> dict:
    cmd = [sys.executable, str(ROOT / "validation" / "gpu_micro.py"), "--device", "cpu" if dry else "cuda",
           "--datasheet", str(datasheet(out)), "--out", str(out / "micro.json")]
    cal = out / "calibrated.yaml"
    if cal.exists():
        cmd += ["--calibrated", str(cal)]
    if dry:
        cmd.append("--tiny")
    subprocess.run(cmd, cwd=ROOT, check=True)
    data = json.loads((out / "micro.json").read_text())
    return {"cases": len(data["rows"]), "failed": sum(1 for r in data["rows"] if "error" in r),
            "misses_by_op": data["misses_by_op"]}


def stage_profile(out: Path, dry: bool, deadline: float) -> dict:
    """Host issue time against device time, dense steps and whole planned steps (validation/gpu_profile.py)."""
    cmd = [sys.executable, str(ROOT / "validation" / "gpu_profile.py"), "--device", "cpu" if dry else "cuda",
           "--out", str(out / "profile.json"), "--deadline", f"{deadline:.1f}"] + (["--tiny"] if dry else [])
    subprocess.run(cmd, cwd=ROOT, check=True)
    data = json.loads((out / "profile.json").read_text())
    return {"dense_cases": len(data["dense"]), "plans": len(data["plans"]), "errors": data["errors"],
            "host_share": {r["case"]: round(r["step_host_s"] / max(r["step_s"], 1e-12), 3)
                           for r in data["dense"] + data["plans"]}}


def stage_resolve(out: Path, dry: bool) -> dict:
    """The ILP on the calibrated spec for every workload: plans written into DIR/resolved (travel back inside
    the fidelity JSON, not as files)."""
    from placer.planner.solve import SolveConfig, solve
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    cal = out / "calibrated.yaml"
    if not cal.exists():
        raise RuntimeError("no calibrated spec (the calibrate stage failed): nothing to re-solve on")
    folder = out / "resolved"
    folder.mkdir(exist_ok=True)
    done = {}
    for w in _workloads(dry):
        wl = load_workload(ROOT / w["file"])
        topo = Topology(load_hardware(cal), wl.dense.dtype)
        plan = solve(topo, wl, SolveConfig(method="ilp", time_limit_s=5 if dry else 8))
        path = folder / f"{Path(w['file']).stem}.json"
        plan.write(path)
        done[w["name"]] = {"file": str(path), "predicted_step_time_s": plan.predicted["step_time_s"]}
    return done


def _steps(seconds: float, predicted: float, dry: bool) -> tuple[int, int, int]:
    """(timed steps, warm-up, phase-pass steps) for a plan: as many steps as fill ``seconds``, 10..200."""
    if dry:
        return 3, 1, 2
    steps = int(min(200, max(10, seconds / max(predicted, 1e-6))))
    return steps, max(3, steps // 10), max(3, min(10, steps // 4))


def _price(plan, hw_path: Path, wl, scale: float = 1.0) -> dict | None:
    """The plan's prediction on the spec at ``hw_path`` (None when it cannot be priced there)."""
    from placer.errors import PlacerError
    from placer.runner.run import prepare
    from placer.specs import load_hardware

    try:
        return prepare(load_hardware(hw_path), wl, plan, scale=scale)[3]
    except PlacerError as exc:
        log(f"    cannot price on {hw_path.name}: {exc}")
        return None


def _row(name: str, wl_name: str, plan_file: str, result: dict, datasheet: dict | None) -> dict:
    """A fidelity row (the CPU campaign's schema) from one placer run result."""
    pred, meas = result["predicted"], result["measured"]
    phases = {ph: {"measured_s": meas["phases_s"][ph], "predicted_s": pred["phases_s"][ph]} for ph in pred["phases_s"]}
    ops = [{"kind": o["kind"], "stream": o["stream"], "priced_s": o["priced_s"], "measured_s": o["measured_s"]}
           for o in meas["ops"]]
    emb_pred = sum(phases[p]["predicted_s"] for p in EMBEDDING_PHASES if p in phases)
    emb_meas = sum(phases[p]["measured_s"] for p in EMBEDDING_PHASES if p in phases)
    return {"name": name, "method": result["plan_method"].split(":")[0] if not name.startswith("forced") else name,
            "workload": wl_name, "plan_file": plan_file, "predicted_step_time_s": pred["step_time_s"],
            "measured_step_time_s": meas["step_time_s"], "ratio": meas["step_time_s"] / pred["step_time_s"],
            "runs_step_time_s": [meas["step_time_s"]], "steps_per_run": result["steps"], "phases": phases, "ops": ops,
            "bottleneck": pred.get("bottleneck"), "hardware_note": result.get("hardware_note"),
            "predicted_datasheet_step_time_s": datasheet["step_time_s"] if datasheet else None,
            "predicted_embedding_s": emb_pred, "measured_embedding_s": emb_meas,
            "embedding_share_measured": emb_meas / max(sum(v["measured_s"] for v in phases.values()), 1e-12),
            "host_read_mechanism": result["host_read_mechanism"], "dense_dtype": result["dense_dtype"],
            "device_name": result["device_name"], "build_s": meas["build_s"],
            "peak_device_bytes": meas.get("peak_device_bytes"),
            "graph": {k: result["graph"].get(k) for k in ("mode", "captured", "not_captured_why", "graphs",
                                                          "eager_host_groups", "prediction_prices")},
            "floor_step_time_s": (result.get("floor") or {}).get("step_time_s"),
            "runner_over_floor": (result.get("floor") or {}).get("runner_over_floor")}


#: plans measured first, in every workload before the others, in rounds of their own (validation/gpu_rounds.py:
#: a stage cut by its limit keeps them with their intervals)
FIRST = ("ilp@calibrated", "ilp", "greedy_size")


def _plan_order(dry: bool, args, resolved: dict) -> list[tuple[dict, str, Path]]:
    """(workload, plan name, plan file) in the order they run: FIRST's plans of every workload, then the rest."""
    todo = []
    for w in _workloads(dry):
        plans = [(p["name"], ROOT / p["file"]) for p in w["plans"]]
        if w["name"] in resolved:
            plans.insert(0, ("ilp@calibrated", Path(resolved[w["name"]]["file"])))
        todo += [(w, name, path) for name, path in plans if not args.plans or name in args.plans.split(",")]
    return sorted(todo, key=lambda t: 0 if t[1] in FIRST else 1)  # stable: workloads keep their order


def stage_plans(out: Path, dry: bool, deadline: float, args) -> dict:
    """Run the plans in this process in interleaved rounds (validation/gpu_rounds.py: FIRST's plans of every
    workload in GPU_ROUNDS rounds, DRY_ROUNDS in a dry run, then the rest with each workload's ILP while time is
    left); a line appended to plans.jsonl after every run and to rounds.jsonl after every complete round."""
    import torch

    from placer.plan import load_plan
    from placer.runner.graph_step import plan_why_not_capturable
    from placer.runner.run import RunConfig, run_plan
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology
    from validation.gpu_rounds import DRY_ROUNDS, GPU_ROUNDS, ROUND_WINDOW, run_tiers

    cal = out / "calibrated.yaml"
    sheet = datasheet(out)
    spec = cal if cal.exists() else sheet
    resolved = {}
    if (out / "stage-resolve.json").exists():
        resolved = json.loads((out / "stage-resolve.json").read_text()).get("result") or {}
    todo = _plan_order(dry, args, resolved)
    workloads = {w["name"]: load_workload(ROOT / w["file"]) for w, _, _ in todo}

    def measure(w: dict, name: str, plan_path: Path) -> dict:
        wl = workloads[w["name"]]
        plan = load_plan(plan_path)
        on_sheet = _price(plan, sheet, wl)
        predicted = (_price(plan, spec, wl) or {}).get("step_time_s", 1e-3)
        steps, warmup, phase_steps = _steps(w["seconds"] * ROUND_WINDOW, predicted, dry)
        # a GPU replays the step as CUDA graphs where the plan allows (auto); a dry run takes the same path up to
        # the capture call (on: the graph step's segments as plain calls) wherever the plan has a graph-safe step
        graph = "on" if dry and plan_why_not_capturable(plan, Topology(load_hardware(spec)), wl) is None else "auto"
        config = RunConfig(device="cpu" if dry else "cuda", steps=steps, warmup=warmup,
                           phase_steps=phase_steps, threads=1 if dry else None, graph=graph)
        try:
            result = run_plan(load_hardware(spec), wl, plan, config, plan_file=str(plan_path))
        finally:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        row = _row(name, w["name"], plan_path.name, result, on_sheet)
        log(f"{w['name']}: {name}: measured {row['measured_step_time_s'] * 1e3:.3f} ms, predicted "
            f"{row['predicted_step_time_s'] * 1e3:.3f} ms (datasheet "
            f"{(row['predicted_datasheet_step_time_s'] or 0) * 1e3:.3f}), host reads {row['host_read_mechanism']}")
        return row

    done = run_tiers(todo, FIRST, DRY_ROUNDS if dry else GPU_ROUNDS, measure, deadline,
                     lambda name, record: _append(out / name, record))
    return dict(done, spec=spec.name)


def _kit_commit() -> dict:
    """The commit and tree state scripts/gpu_kit.sh recorded in .whl/COMMIT (the GPU machine's copy of the tree
    carries git metadata as of the session's start, not of the call), when it is there."""
    path = ROOT / ".whl" / "COMMIT"
    if not path.exists():
        return {}
    commit, _, dirty = path.read_text().strip().partition(" ")
    return {"git_commit": commit, "placer_uncommitted_changes": dirty == "dirty", "git_commit_from": ".whl/COMMIT"}


def _append(path: Path, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, default=float) + "\n")


def stage_report(out: Path, dry: bool, args) -> dict:
    from validation.common import environment, write_json
    from validation.fidelity_report import markdown, scatter, summarize
    from validation.gpu_rounds import merge_rounds

    def read(name: str) -> list[dict]:
        path = out / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    tiers = [r for r in read("rounds.jsonl") if "rounds_completed" in r]
    rows = merge_rounds(read("plans.jsonl"), read("rounds.jsonl"))
    good = [r for r in rows if "error" not in r]
    emb = [dict(r, predicted_step_time_s=r["predicted_embedding_s"], measured_step_time_s=r["measured_embedding_s"],
                measured_interval_s=r["measured_embedding_interval_s"], rounds_step_time_s=r["rounds_embedding_s"])
           for r in good if r["predicted_embedding_s"] > 0 and r["measured_embedding_s"] > 0]
    env = json.loads((out / "env.json").read_text()) if (out / "env.json").exists() else {}
    device = env.get("device_slug") or ("cpu-dry-run" if dry else "gpu")
    command = os.environ.get(COMMAND_VAR) or f"python3 validation/gpu_campaign.py --out {out}"
    data = {"schema": "placer-fidelity/1", "command": command,
            "date": args.date, "device": device, "device_name": (good[0]["device_name"] if good else env.get("gpu")),
            "spec": "calibrated.yaml" if (out / "calibrated.yaml").exists() else datasheet(out).name,
            "datasheet_spec": datasheet(out).name, "datasheet_note": env.get("datasheet_note"),
            "rounds": max((t["rounds_requested"] for t in tiers), default=None), "round_tiers": tiers, "threads": None,
            **environment(), **_kit_commit(), "torch": env.get("torch"), "env": env,
            "stages": _stage_results(out), "rows": rows}
    data["summary"] = summarize(good)
    data["summary_embedding_phases"] = summarize(emb)
    data["plans_with_embedding_share_30pct"] = sum(r["embedding_share_measured"] >= 0.3 for r in good)
    stem = f"fidelity-{device}-{args.date}"
    write_json(out / f"{stem}.json", data)
    if good:
        scatter(data, out / f"{stem}.png")
    print(markdown(data))
    s, e = data["summary"], data["summary_embedding_phases"]
    return {"file": f"{stem}.json", "plans": s.get("plans", 0), "mape_step": s.get("mape"),
            "spearman_step": s.get("spearman"), "mape_embedding": e.get("mape"),
            "spearman_embedding": e.get("spearman"),
            "embedding_share_30pct": data["plans_with_embedding_share_30pct"]}


def _stage_results(out: Path) -> dict:
    res = {}
    for name in STAGES:
        p = out / f"stage-{name}.json"
        if p.exists():
            res[name] = json.loads(p.read_text())
    return res


def run_stage(name: str, out: Path, dry: bool, deadline: float, args) -> dict:
    fn = {"env": lambda: stage_env(out, dry, args.device_name), "calibrate": lambda: stage_calibrate(out, dry),
          "micro": lambda: stage_micro(out, dry), "resolve": lambda: stage_resolve(out, dry),
          "plans": lambda: stage_plans(out, dry, deadline, args), "profile": lambda: stage_profile(out, dry, deadline),
          "report": lambda: stage_report(out, dry, args)}[name]
    return fn()


# ---- the parent: stages in children, each limited, the summary table -------------------------------------------

def campaign(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not (PLANS / "manifest.json").exists():
        log(f"no {PLANS.relative_to(ROOT)}/manifest.json: run --make-plans on a CPU machine first")
        return 2
    budget_end = time.time() + args.budget_s
    os.environ[COMMAND_VAR] = "python3 validation/gpu_campaign.py " + " ".join(args.argv)  # the children's report
    logfile = open(out / "campaign.log", "a", encoding="utf-8")
    summary = []
    for name, gpu_limit in STAGES.items():
        if args.stages and name not in args.stages.split(","):
            continue
        limit = DRY_HANG_S if args.dry_run else min(gpu_limit, max(1.0, budget_end - time.time()))
        if name == "report":
            limit = max(limit, 10.0)
        deadline = time.time() + limit
        cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--out", str(out), "--date", args.date,
               "--deadline", f"{deadline:.1f}"] + (["--dry-run"] if args.dry_run else []) \
            + (["--plans", args.plans] if args.plans else []) \
            + (["--device-name", args.device_name] if args.device_name else [])
        log(f"stage {name}: limit {limit:.0f} s")
        logfile.write(f"\n===== stage {name} (limit {limit:.0f} s) =====\n")
        logfile.flush()
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=ROOT, stdout=logfile, stderr=logfile, timeout=limit)
            status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {limit:.0f} s"
        took = time.perf_counter() - t0
        rec = out / f"stage-{name}.json"
        result = json.loads(rec.read_text()).get("result") if rec.exists() else None
        if not rec.exists() or status != "ok":
            rec.write_text(json.dumps({"stage": name, "status": status, "wall_s": took, "result": result}) + "\n")
        summary.append((name, status, took, result))
        log(f"stage {name}: {status} in {took:.1f} s")
    logfile.close()
    _print_summary(summary, out)
    _tidy(out)
    return 0 if all(s[1] == "ok" for s in summary) else 1


def _print_summary(summary, out: Path) -> None:
    print(f"\n{'stage':10} {'status':28} {'wall s':>7}  result")
    for name, status, took, result in summary:
        brief = json.dumps(result, default=str)[:110] if result is not None else "-"
        print(f"{name:10} {status:28} {took:>7.1f}  {brief}")
    micro = out / "micro.json"
    if micro.exists():
        data = json.loads(micro.read_text())
        print("\nmicro-benchmarks, measured / priced by op kind (median, range):")
        for label, ops in data["misses_by_op"].items():
            for op, v in ops.items():
                print(f"  {label:10} {op:12} {v['median_ratio']:6.2f}  ({v['min_ratio']:.2f}-{v['max_ratio']:.2f}, "
                      f"{v['cases']} cases)")


def _tidy(out: Path) -> None:
    """At most 8 flat files come back from the GPU machine: the stage records and the plan rows are inside the
    fidelity JSON, the re-solved plans too; remove them so the rest fits."""
    for p in out.glob("stage-*.json"):
        p.unlink()
    (out / "plans.jsonl").unlink(missing_ok=True)
    (out / "rounds.jsonl").unlink(missing_ok=True)
    if (out / "resolved").exists():
        shutil.rmtree(out / "resolved")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--out", help="results folder (created)")
    ap.add_argument("--dry-run", action="store_true", help="every stage on this CPU at tiny sizes")
    ap.add_argument("--make-plans", action="store_true", help="write validation/gpu_plans/ (CPU, before the call)")
    ap.add_argument("--reprice-plans", action="store_true",
                    help="price validation/gpu_plans/ again with today's cost model, the plans unchanged")
    ap.add_argument("--time-limit", type=float, default=20.0, help="--make-plans: ILP time limit per workload, s")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S,
                    help=f"wall time of the whole campaign, s (default {BUDGET_S})")
    ap.add_argument("--device-name", default=None,
                    help="the GPU's name as the datasheet selection reads it (default: the device's; a dry run "
                         "defaults to 'NVIDIA H200', so that it exercises the selection)")
    ap.add_argument("--stages", help="comma-separated subset of stages (default all)")
    ap.add_argument("--plans", help="comma-separated plan names to run (default all; e.g. ilp for a short call)")
    ap.add_argument("--date", default=_dt.date.today().isoformat())
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.dry_run and not args.device_name:
        args.device_name = DRY_DEVICE_NAME
    if not (args.make_plans or args.reprice_plans) and not args.out:
        ap.error("--out DIR is required (or --make-plans, --reprice-plans)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.make_plans:
        return make_plans(args.time_limit)
    if args.reprice_plans:
        return reprice_plans()
    if args.stage:
        out = Path(args.out)
        t0 = time.perf_counter()
        result = run_stage(args.stage, out, args.dry_run, args.deadline or time.time() + 600, args)
        (out / f"stage-{args.stage}.json").write_text(json.dumps(
            {"stage": args.stage, "status": "ok", "wall_s": time.perf_counter() - t0, "result": result},
            default=str) + "\n")
        return 0
    return campaign(args)


if __name__ == "__main__":
    raise SystemExit(main())
