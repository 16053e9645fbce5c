#!/usr/bin/env python3
"""Fidelity campaign: does the cost model predict what runs on THIS machine?

One command: calibrate the machine (``placer calibrate``, unless ``--spec`` gives a calibrated spec), plan a
set of workloads that fit it with every method, at forced hot-row levels and at fp16, run every plan ALONE
(``placer run``, one process after another, in fresh processes) in ``--rounds`` interleaved rounds per workload
(every plan once per round, the order shuffled per round: validation/rounds.py), and compare the measured step
time (the median over rounds of each run's median step, with its 90% bootstrap interval) with the prediction,
per step, per phase and per op kind and stream (the runner's instrumented pass times every op of the step
program). Per workload the summary keeps only what the rounds separate: Spearman over the plans whose intervals
separate, the ILP over the fastest plan and the ILP against each other plan on paired rounds, with intervals.

    python3 validation/fidelity.py --device cpu                  # the campaign (~35-65 min on 2 cores)
    python3 validation/fidelity.py --device cpu --spec FILE      # skip calibrate, use FILE
    python3 validation/fidelity.py --device cpu --rounds 3       # fewer rounds (intervals ~ the range)
    python3 validation/fidelity.py --smoke --out /tmp/f          # two plans, 2 rounds, structure only (CI)

Writes ``<out>/fidelity-<device>-<date>.json`` (command, commit, device, versions, date; per plan: name,
method, workload, predicted and measured step time with its interval and every round's, per phase, per op
kind; per workload the rounds' orders), ``<out>/fidelity-<device>-<date>.png`` (predicted vs measured, the
intervals as bars) and prints a markdown table. Run it with nothing else on the machine: a second
busy process makes torch's threads spin and steps 100x slower.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from validation.common import environment, write_json  # noqa: E402
from validation.fidelity_report import markdown, scatter, summarize  # noqa: E402
from validation.rounds import interleave, median_interval  # noqa: E402

#: (name, shipped workload, batch, rows divided by, every table allowed at fp16, seconds of timed steps per run)
CAMPAIGN = [
    ("tiny", "tiny", 256, 1, True, 2.0),
    ("criteo-kaggle@2048", "criteo-kaggle-dlrm", 2048, 1, True, 3.0),
    ("mlperf-dlrm-v2/64@256", "mlperf-dlrm-v2", 256, 64, True, 4.0),
    ("production-856/1000@64", "production-856", 64, 1000, False, 4.0),
    ("kaggle-forms@2048", "criteo-kaggle-dlrm", 2048, 1, False, 3.0),
]
#: the cases whose tables allow the answers to "it does not fit" (allow_forms): their plans use QR, TT, int8
FORMS_CASES = {"kaggle-forms@2048"}
#: allow_forms: QR (k <= 4) and TT (ranks 16, 16) on tables of at least FORMS_BIG_ROWS rows; frozen, with int8
#: rows allowed, those of FORMS_FROZEN_ROWS rows (a range)
FORMS_BIG_ROWS = 1_000_000
FORMS_FROZEN_ROWS = (10_000, 1_000_000)
SMOKE = [("tiny", "tiny", 64, 1, True, 0.2)]
METHODS = ["ilp", "host_cpu", "uvm", "greedy_size", "round_robin", "random", "fae"]
ROUNDS = 5  # interleaved rounds per plan on the CPU (every plan once per round)
HOT_LEVELS = [0.5, 0.1, 0.01]  # forced: every table's hottest fraction in "HBM", the rest "in host memory"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def placer_cmd(*argv: str) -> list[str]:
    return [sys.executable, "-m", "placer.cli", *argv]


def calibrate(device: str, threads: int, workloads: list[Path], out: Path, quick: bool, nproc: int | None = None,
              extra: tuple[str, ...] = ()) -> Path:
    """``placer calibrate`` of this machine into ``out`` (GEMM shapes of the campaign's workloads included;
    ``nproc``: a machine of that many CPU rank processes, ``--nproc``; ``extra``: more flags)."""
    cmd = placer_cmd("calibrate", "--device", device, "--threads", str(threads), "-o", str(out), *extra)
    cmd += ["--nproc", str(nproc)] if nproc else []
    for w in workloads:
        cmd += ["--workload", str(w)]
    if quick:
        cmd.append("--quick")
    log("calibrating: " + " ".join(cmd[2:]))
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return out


def allow_forms(t):
    """Table ``t`` with the forms of FORMS_CASES allowed by its size (FORMS_BIG_ROWS, FORMS_FROZEN_ROWS)."""
    from placer.specs.compression import CompressionSpec

    if t.rows >= FORMS_BIG_ROWS:
        return t.model_copy(update={"compression": CompressionSpec.model_validate(
            {"qr": {"max_collisions": 4}, "tt": {"ranks": [16, 16]}})})
    if FORMS_FROZEN_ROWS[0] <= t.rows < FORMS_FROZEN_ROWS[1]:
        return t.model_copy(update={"frozen": True, "compression": CompressionSpec.model_validate({"int8": True})})
    return t


def make_workloads(cases, folder: Path, dense_dtype: str | None = None) -> list[tuple[str, Path, float]]:
    """The campaign's workload variants written as YAML (batch, rows divided, fp16 allowed; the dense part's
    dtype replaced by ``dense_dtype`` when given): (name, path, timed seconds per run)."""
    import yaml

    from placer.specs.workload import load_workload

    out = []
    folder.mkdir(parents=True, exist_ok=True)
    for name, shipped, batch, divide, fp16, seconds in cases:
        wl = load_workload(ROOT / "workloads" / f"{shipped}.yaml")
        if divide > 1:
            wl = wl.with_scaled_rows(divide)
        tables = [t.model_copy(update={"allow_fp16": True}) if fp16 else t for t in wl.tables]
        tables = [allow_forms(t) for t in tables] if name in FORMS_CASES else tables
        dense = wl.dense.model_copy(update={"dtype": dense_dtype}) if dense_dtype else wl.dense
        wl = wl.model_copy(update={"batch_size": batch, "tables": tables, "name": name, "dense": dense,
                                   "description": f"{shipped}: batch {batch}, rows / {divide}, fp16 allowed: {fp16}, "
                                                  f"dense {dense.dtype} (validation/fidelity.py)"})
        data = wl.model_dump(mode="json", exclude={"source_path", "sha256"})
        path = folder / f"{name.replace('/', '-').replace('@', '-at-')}.yaml"
        path.write_text(f"# written by validation/fidelity.py from workloads/{shipped}.yaml\n"
                        + yaml.safe_dump(data, sort_keys=False))
        out.append((name, path, seconds))
    return out


def forced(topo, wl, hot: float | None, precision: str | None):
    """Every table table-wise on the first GPU: its hottest ``hot`` fraction in HBM (None: all), or every table
    on the host (``hot`` = "host"), at ``precision`` (None: the table's own)."""
    from placer.plan import Placement, Shard

    g, host = topo.gpus[0], topo.hosts[0]
    out = []
    for t in wl.tables:
        prec = precision or t.dtype
        if hot == "host":
            out.append(Placement(table=t.name, sharding="host", precision=prec, shards=[
                Shard(device=host, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)]))
            continue
        k = t.rows if hot is None else max(1, min(t.rows - 1, int(round(hot * t.rows)))) if t.rows > 1 else t.rows
        out.append(Placement(table=t.name, sharding="table_wise", precision=prec, shards=[
            Shard(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=k, host_rows=t.rows - k)]))
    return out


#: the smoke run's methods: the first two with different placements are run (greedy_size may equal the ILP)
SMOKE_METHODS = ("ilp", "greedy_size", "host_cpu", "round_robin")


def make_plans(spec: Path, wl_path: Path, folder: Path, time_limit: float, smoke: bool, all_hbm: bool = False
               ) -> list[tuple[str, Path]]:
    """Every method's plan and the forced ones (``all_hbm``: also every table whole in HBM, where it fits),
    deduplicated by placements, written as JSON: (name, path)."""
    from placer.cost import CostModel
    from placer.errors import PlacerError
    from placer.plan import Plan, SpecRef
    from placer.planner.solve import SolveConfig, solve
    from placer.planner.solve_run import make_plan as priced
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    hw, wl = load_hardware(spec), load_workload(wl_path)
    topo = Topology(hw, wl.dense.dtype)
    model = CostModel(topo, wl)
    plans: list[tuple[str, Plan]] = []
    from placer.forms.storage import FORCED_FORMS, allowing

    forced_forms = [f for f in FORCED_FORMS if allowing(wl, f)]  # each answer the workload allows, forced
    for method in (SMOKE_METHODS if smoke else METHODS + forced_forms):
        try:
            plans.append((method, solve(topo, wl, SolveConfig(method=method, time_limit_s=time_limit))))
        except PlacerError as exc:
            log(f"  {method}: no plan ({exc})")
    if not smoke:
        variants = [(f"hot{int(f * 100)}%", f, None) for f in HOT_LEVELS] + [("all-host", "host", None)]
        variants += [("all-hbm", None, None)] if all_hbm else []
        if all(t.allow_fp16 or t.dtype == "fp16" for t in wl.tables):
            variants += [("fp16-hbm", None, "fp16"), ("fp16-hot10%", 0.1, "fp16")]
        refs = (SpecRef(name=hw.name, sha256=hw.sha256), SpecRef(name=wl.name, sha256=wl.sha256))
        for name, hot, prec in variants:
            placements = forced(topo, wl, hot, prec)
            plan = Plan(hardware=refs[0], workload=refs[1], method=f"forced:{name}", placements=placements)
            try:
                plans.append((f"forced:{name}", priced(model, plan.method, placements, None)))
            except PlacerError as exc:
                log(f"  forced {name}: {exc}")
    return write_plans(plans, folder, limit=2 if smoke else None)


def write_plans(plans: list, folder: Path, limit: int | None = None) -> list[tuple[str, Path]]:
    """(name, Plan) pairs written as JSON into ``folder``, a plan whose placements an earlier one already has
    left out (said on stderr); at most ``limit`` of them: (name, path)."""
    out, seen = [], {}
    folder.mkdir(parents=True, exist_ok=True)
    for name, plan in plans:
        key = json.dumps([p.model_dump(mode="json") for p in plan.placements], sort_keys=True)
        if key in seen:
            log(f"  {name}: same placements as {seen[key]}, not run twice")
            continue
        seen[key] = name
        path = folder / f"{name.replace(':', '-').replace('%', 'pct')}.json"
        plan.write(path)
        out.append((name, path))
        if limit is not None and len(out) == limit:
            break
    return out


def run_once(spec: Path, wl_path: Path, plan_path: Path, seconds: float, predicted: float, threads: int,
             timeout: float, nproc: int | None = None) -> dict:
    """One ``placer run`` in a fresh process (``nproc``: that many rank processes): as many timed steps as fill
    ``seconds`` at the predicted step time (10..400), a tenth of them as warm-up."""
    steps = int(min(400, max(10, seconds / max(predicted, 1e-6))))
    cmd = placer_cmd("run", str(spec), str(wl_path), str(plan_path), "--device", "cpu", "--threads", str(threads),
                     "--steps", str(steps), "--warmup", str(max(3, steps // 10)), "--phase-steps",
                     str(max(3, min(20, steps // 4))), "--json")
    cmd += ["--nproc", str(nproc)] if nproc else []
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"placer run exited {r.returncode}: {r.stderr.strip()[-800:]}")
    return json.loads(r.stdout)


def plan_row(name: str, wl_name: str, plan_path: Path, runs: list[dict | None], failures: list) -> dict:
    """The row the campaign keeps for one plan from its ``placer run`` results by round (None: that round's run
    failed or was not run): the median step with its 90% interval (validation/rounds.py), every round's step
    (``rounds_step_time_s``, None where it failed; ``runs_step_time_s``: the steps measured), medians of the
    phases and op kinds over the runs; an error row when no run succeeded."""
    import statistics

    plan = json.loads(plan_path.read_text())
    predicted = plan["predicted"]["step_time_s"]
    failed = [f"round {r + 1}: {why}" for r, why in failures]
    ok = [r for r in runs if r is not None]
    if not ok:
        return {"name": name, "workload": wl_name, "error": "; ".join(failed) or "not run"}
    med = statistics.median
    phases = {ph: {"measured_s": med([r["measured"]["phases_s"][ph] for r in ok]),
                  "predicted_s": ok[0]["predicted"]["phases_s"][ph]} for ph in ok[0]["predicted"]["phases_s"]}
    ops = {}
    for row in ok[0]["measured"]["ops"]:
        k = f"{row['kind']}@{row['stream']}"
        ops[k] = {"kind": row["kind"], "stream": row["stream"], "priced_s": row["priced_s"],
                  "measured_s": med([next((x["measured_s"] for x in r["measured"]["ops"]
                                           if x["kind"] == row["kind"] and x["stream"] == row["stream"]), 0.0)
                                     for r in ok])}
    by_round = [None if r is None else r["measured"]["step_time_s"] for r in runs]
    iv = median_interval(by_round)
    row = {"name": name, "method": plan["method"], "workload": wl_name, "plan_file": plan_path.name,
           "predicted_step_time_s": predicted, "measured_step_time_s": iv.median, "measured_interval_s": [iv.lo, iv.hi],
           "ratio": iv.median / predicted, "rounds_step_time_s": by_round,
           "runs_step_time_s": [x for x in by_round if x is not None],
           "steps_per_run": ok[0]["steps"], "phases": phases, "ops": list(ops.values()),
           "bottleneck": plan["predicted"].get("bottleneck"), "hardware_note": ok[0].get("hardware_note"),
           "solver_status": (plan.get("solver") or {}).get("status")}
    return dict(row, failures=failed) if failed else row


def run_rounds(spec: Path, wl_name: str, wl_path: Path, plans: list[tuple[str, Path]], seconds: float, rounds: int,
               threads: int, timeout: float, nproc: int | None = None, seed: int = 0) -> tuple[list[dict], dict]:
    """Every plan of one workload run in ``rounds`` interleaved rounds (validation/rounds.py: each round runs every
    plan once, ``placer run`` in a fresh process, in an order shuffled per round with ``seed``; ``nproc``: as that
    many rank processes); a plan that fails is recorded and not run again. (rows, the rounds' record: rounds
    asked and completed, each round's order and wall time, s)."""
    paths = dict(plans)
    predicted = {name: json.loads(path.read_text())["predicted"]["step_time_s"] for name, path in plans}

    def run(name: str, r: int) -> dict:
        log(f"{wl_name}: round {r + 1}/{rounds}: {name}")
        return run_once(spec, wl_path, paths[name], seconds, predicted[name], threads, timeout, nproc)

    done = interleave(list(paths), rounds, run, seed=seed, value=lambda x: x["measured"]["step_time_s"])
    for name, fails in done.failures.items():
        for r, why in fails:
            log(f"  {name}: failed in round {r + 1}: {why}")
    rows = [plan_row(name, wl_name, path, done.results[name], done.failures[name]) for name, path in plans]
    record = {"rounds_requested": done.rounds_requested, "rounds_completed": done.rounds_completed,
              "orders": done.orders, "round_s": done.round_s, "stopped": done.stopped, "seed": seed}
    return rows, record


def rounds_from(args, smoke_rounds: int = 2) -> int:
    """The rounds per plan: ``--rounds`` (``--repeats``, its deprecated alias, where given instead); the smoke
    form ``smoke_rounds``."""
    if args.repeats is not None:
        log("warning: --repeats is deprecated: the plans run in interleaved rounds, --rounds N")
    if args.smoke:
        return smoke_rounds
    return args.rounds if args.repeats is None else args.repeats


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--spec", help="a calibrated hardware spec of this machine (default: calibrate now)")
    ap.add_argument("--out", default=str(ROOT / "validation" / "results"), help="results folder")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help=f"interleaved rounds: every plan once per round, fresh processes (default {ROUNDS})")
    ap.add_argument("--repeats", type=int, default=None, help="deprecated alias of --rounds")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, for calibrate and every run (default 1)")
    ap.add_argument("--time-limit", type=float, default=30.0, help="ILP time limit per workload, s (default 30)")
    ap.add_argument("--workloads", help="comma-separated campaign names to run (default all)")
    ap.add_argument("--smoke", action="store_true", help="two plans of a small tiny, 2 rounds: structure only")
    ap.add_argument("--date", default=_dt.date.today().isoformat())
    args = ap.parse_args(argv)
    if args.device == "cuda":
        ap.error("--device cuda: the campaign's GPU runs are not written yet (it plans for a CUDA spec and "
                 "runs placer run --device cuda; see the GPU issue)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"fidelity-{args.device}-{args.date}" + ("-smoke" if args.smoke else "")
    cases = SMOKE if args.smoke else [c for c in CAMPAIGN if not args.workloads or c[0] in args.workloads.split(",")]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > 0.5 and not args.smoke:
        log(f"warning: load average {load:.2f}: another process is busy; timings will be disturbed")
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="placer-fidelity-")) if args.smoke else out / stem
    workloads = make_workloads(cases, work / "workloads")
    spec = Path(args.spec) if args.spec else calibrate(args.device, args.threads, [p for _, p, _ in workloads],
                                                       work / "spec.yaml", quick=args.smoke)
    rounds = rounds_from(args)
    rows, records = [], {}
    for wl_name, wl_path, seconds in workloads:
        log(f"{wl_name}: planning")
        plans = make_plans(spec, wl_path, work / "plans" / wl_path.stem, args.time_limit, args.smoke)
        log(f"{wl_name}: {len(plans)} plans in {rounds} interleaved rounds")
        got, records[wl_name] = run_rounds(spec, wl_name, wl_path, plans, seconds, rounds, args.threads, timeout=1800)
        rows += got
    data = {"schema": "placer-fidelity/2", "command": "python3 validation/fidelity.py " + " ".join(sys.argv[1:]),
            "date": args.date, "device": args.device, "spec": str(spec), "rounds": rounds, "workload_rounds": records,
            "threads": args.threads, "wall_s": time.perf_counter() - t0, **environment(),
            "torch": _torch_version(), "device_name": _device_name(spec), "rows": rows}
    data["summary"] = summarize([r for r in rows if "error" not in r])
    write_json(out / f"{stem}.json", data)
    scatter(data, out / f"{stem}.png")
    print(markdown(data))
    return 0


def _torch_version() -> str:
    import torch

    return torch.__version__


def _device_name(spec: Path) -> str:
    from placer.specs import load_hardware

    hw = load_hardware(spec)
    return next(iter(hw.templates.values())).gpus.model


if __name__ == "__main__":
    raise SystemExit(main())
