#!/usr/bin/env python3
"""Two-rank CPU campaign: on a machine where placement decides the step, does placer rank plans as they run?

In one process every option of a table costs the same; two rank processes over gloo (``placer run --nproc 2
--device cpu``) are a machine where which rank holds which table decides the balance of lookups and updates,
and the sharding decides the bytes of the all-to-all. One command:

1. calibrate: ``placer calibrate --device cpu --nproc 2`` (one rank measured while the other works, the gloo
   all-to-all and all-reduce between two processes), unless ``--spec`` gives such a spec;
2. plans per workload (validation/ranks_workloads/): the methods ilp, greedy_size, round_robin, random,
   torchrec, and forced plans: every table on one rank, every table row-wise, every table column-wise, the
   small tables data-parallel (the rest as greedy_size places them); duplicates run once;
3. every plan run ALONE in fresh processes (``placer run --nproc 2``), the plans of a workload in ``--rounds``
   interleaved rounds (every plan once per round, the order shuffled per round: validation/rounds.py): the
   median of the rounds' median steps with its 90% bootstrap interval, and the rounds' spread ((max - min) /
   median); per workload Spearman over the plans whose intervals separate, the ILP over the fastest plan and
   the ILP against each other plan on paired rounds, each with its interval;
4. with ``--torchrec``, TorchRec as a second trainer: each plan exported (``placer export --torchrec --device
   cpu``) and trained under DistributedModelParallel on 2 gloo ranks (examples/train_torchrec.py --json), in
   ``--rounds`` interleaved rounds of its own, the median with its interval; a plan TorchRec cannot run says
   why. Its model is the tables and a linear head (not placer's dense MLP): its absolute times are not placer's
   step, its ranking is compared.

Writes ``<out>/fidelity-ranks-<date>.json`` (command, commit, machine, versions, date, per plan: predicted,
measured by placer's runner with its interval, the rounds and their spread, per phase and op kind; TorchRec's
measured step with its interval; per workload the rounds' orders),
``<out>/fidelity-ranks-<date>.png`` and prints a markdown table. Run it with nothing else on the machine.

    python3 validation/fidelity_ranks.py                       # ~65 min on 2 cores (--torchrec: ~+35 min)
    python3 validation/fidelity_ranks.py --spec FILE --torchrec
    python3 validation/fidelity_ranks.py --smoke --out /tmp/r   # 2 plans, 2 rounds, a few steps (CI)
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from validation.common import environment, write_json  # noqa: E402
from validation.fidelity import ROUNDS, calibrate, forced, log, placer_cmd, rounds_from, run_rounds, write_plans  # noqa
from validation.fidelity_report import (_iv, measured_ms, rounds_lines, rounds_ms, runs_said, scatter,  # noqa: E402
                                       summarize)
from validation.rounds import interleave, median_interval, paired  # noqa: E402

WORKLOADS = ROOT / "validation" / "ranks_workloads"
#: (workload file stem, seconds of timed steps per run)
CAMPAIGN = [("ranks-skewed8", 2.0), ("ranks-multihot", 2.0), ("ranks-many-small", 2.0)]
METHODS = ["ilp", "greedy_size", "round_robin", "random", "torchrec"]
NPROC = 2
#: tables up to this size are data-parallel in the forced "small-dp" plan, bytes (fp32 weights)
SMALL_DP_BYTES = 1 << 20
#: TorchRec trainer steps per run (after its warm-up)
DMP_STEPS, DMP_WARMUP = 30, 5


def forced_plans(topo, wl, model, greedy) -> list[tuple[str, object]]:
    """The forced plans (module docstring) priced on ``model``; ``greedy``: the greedy_size plan (its
    placements of the large tables for small-dp), or None."""
    from placer.errors import PlacerError
    from placer.forms import data_parallel, row_wise
    from placer.plan import Placement, Shard
    from placer.planner.solve_run import make_plan

    gpus = list(topo.gpus)
    one_rank = forced(topo, wl, None, None)  # every table whole on the first rank, all rows in its memory

    def columns(t, whole):
        width = t.dim // len(gpus)
        if t.dim % len(gpus) or width % 4:
            return whole
        return Placement(table=t.name, sharding="column_wise", precision=t.dtype, shards=[
            Shard(device=g, rows=(0, t.rows), cols=(i * width, (i + 1) * width), hbm_rows=t.rows, host_rows=0)
            for i, g in enumerate(gpus)])

    variants = {"one-rank": one_rank,
                "row-wise": [row_wise.placement(t, gpus, t.dtype, 1.0) for t in wl.tables],
                "column-wise": [columns(t, whole) for t, whole in zip(wl.tables, one_rank)]}
    if greedy is not None:
        by_table = {p.table: p for p in greedy.placements}
        variants["small-dp"] = [data_parallel.placement(t, gpus, t.dtype) if t.size_bytes(t.dtype) <= SMALL_DP_BYTES
                                else by_table[t.name] for t in wl.tables]
    out = []
    for name, placements in variants.items():
        try:
            out.append((f"forced:{name}", make_plan(model, f"forced:{name}", placements, None)))
        except PlacerError as exc:
            log(f"  forced {name}: {exc}")
    return out


def make_plans(spec: Path, wl_path: Path, folder: Path, time_limit: float, smoke: bool) -> list[tuple[str, Path]]:
    from placer.cost import CostModel
    from placer.errors import PlacerError
    from placer.planner.solve import SolveConfig, solve
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    hw, wl = load_hardware(spec), load_workload(wl_path)
    topo = Topology(hw, wl.dense.dtype)
    plans = []
    for method in (["ilp"] if smoke else METHODS):  # smoke: the ILP and the first forced plan (one-rank)
        try:
            plans.append((method, solve(topo, wl, SolveConfig(method=method, time_limit_s=time_limit))))
        except PlacerError as exc:
            log(f"  {method}: no plan ({exc})")
    greedy = next((p for m, p in plans if m == "greedy_size"), None)
    plans += forced_plans(topo, wl, CostModel(topo, wl), greedy)
    return write_plans(plans, folder, limit=2 if smoke else None)


def dmp_once(export: Path, spec: Path, wl_path: Path, steps: int, warmup: int, timeout: float) -> dict:
    cmd = [sys.executable, str(ROOT / "examples" / "train_torchrec.py"), str(export), str(spec), str(wl_path),
           "--steps", str(steps), "--warmup", str(warmup), "--json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"train_torchrec exited {r.returncode}: {_reason(r.stderr)}")
    return json.loads(r.stdout)


def _reason(stderr: str) -> str:
    """The line of a failed trainer's stderr that says why (a C++ abort, an error), else its last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("terminate called"):
            return f"a rank process aborted inside TorchRec/FBGEMM's C++ ({ln})"
    errors = [ln for ln in lines if "Error" in ln.split(":")[0] or ln.startswith("error:")]
    return (errors or lines or ["no output"])[-1][-400:]


def export_torchrec(spec: Path, wl_path: Path, plan_path: Path, folder: Path) -> tuple[Path | None, str | None]:
    """The plan exported for TorchRec on CPU (``placer export --torchrec --device cpu``): (the export, None), or
    (None, why it cannot be)."""
    export = folder / (plan_path.stem + ".torchrec.json")
    with tempfile.TemporaryDirectory() as tmp:  # the ShardingPlan builder module: not what the trainer reads
        r = subprocess.run(placer_cmd("export", "--torchrec", str(spec), str(wl_path), str(plan_path), "--device",
                                      "cpu", "-o", str(export), "--python", str(Path(tmp) / "builder.py")),
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, "placer export: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return export, None


def torchrec_rows(spec: Path, wl_path: Path, plans: list[tuple[str, Path]], rounds: int, steps: int, warmup: int,
                  seed: int = 1) -> dict[str, dict]:
    """Per plan name: the plan exported for TorchRec on CPU and trained under DMP in ``rounds`` interleaved
    rounds (the plans that export; seeded order): the median step with its 90% interval, the rounds, their
    spread, the first run's losses; or ``refused``: why it cannot run."""
    out, exports = {}, {}
    for name, plan_path in plans:
        export, why = export_torchrec(spec, wl_path, plan_path, plan_path.parent)
        if why:
            out[name] = {"refused": why}
        else:
            exports[name] = export

    def run(name: str, r: int) -> dict:
        log(f"{wl_path.stem}: TorchRec DMP round {r + 1}/{rounds}: {name}")
        try:
            return dmp_once(exports[name], spec, wl_path, steps, warmup, timeout=900)
        except json.JSONDecodeError as exc:
            raise RuntimeError(f"no JSON from the trainer: {exc}") from None

    done = interleave(list(exports), rounds, run, seed=seed, value=lambda x: x["median_step_s"])
    for name in exports:
        runs = [x for x in done.results[name] if x is not None]
        if not runs:
            why = "; ".join(w for _, w in done.failures[name]) or "not run"
            out[name] = {"refused": f"DistributedModelParallel: {why[-400:]}"}
            continue
        iv = median_interval(done.values[name])
        steps_s = [v for v in done.values[name] if v is not None]
        out[name] = {"export": str(exports[name]), "measured_step_time_s": iv.median,
                     "measured_interval_s": [iv.lo, iv.hi],
                     "rounds_step_time_s": done.values[name], "runs_step_time_s": steps_s,
                     "spread": (max(steps_s) - min(steps_s)) / iv.median, "loss_first": runs[0]["losses"][0],
                     "loss_last": runs[0]["losses"][-1]}
    return out


def summarize_ranks(rows: list[dict]) -> dict:
    """fidelity_report.summarize plus, per workload, the run-to-run spread, the measured spread of the plans
    and TorchRec's side: Spearman of placer's predictions against TorchRec's measured steps, and the ILP's
    plan against TorchRec's own plan under TorchRec's trainer."""
    from scipy.stats import spearmanr

    ok = [r for r in rows if "error" not in r]
    out = summarize(ok)
    for wl, w in out.get("per_workload", {}).items():
        mine = [r for r in ok if r["workload"] == wl]
        spreads = [r["spread"] for r in mine]
        meas = [r["measured_step_time_s"] for r in mine]
        w["run_spread_median"] = statistics.median(spreads)
        w["measured_spread"] = max(meas) / min(meas) - 1
        w["predicted_spread"] = max(r["predicted_step_time_s"] for r in mine) / \
            min(r["predicted_step_time_s"] for r in mine) - 1
        w["spearman_counts"] = w["measured_spread"] > 3 * w["run_spread_median"]
        tr = [r for r in mine if (r.get("torchrec") or {}).get("measured_step_time_s")]
        if len(tr) > 2:
            rho = spearmanr([r["predicted_step_time_s"] for r in tr],
                            [r["torchrec"]["measured_step_time_s"] for r in tr]).statistic
            w["torchrec_spearman"] = None if rho != rho else float(rho)
        by = {r["method"]: r for r in tr}
        if "ilp" in by and "torchrec" in by:
            a, b = by["ilp"]["torchrec"], by["torchrec"]["torchrec"]
            w["torchrec_ilp_over_own"] = a["measured_step_time_s"] / b["measured_step_time_s"]
            w["torchrec_spread"] = max(a["spread"], b["spread"])
            if a.get("rounds_step_time_s") and b.get("rounds_step_time_s"):  # the same rounds, paired
                w["torchrec_ilp_over_own_paired"] = paired(a["rounds_step_time_s"], b["rounds_step_time_s"])
        w["torchrec_trained"] = len(tr)
        w["torchrec_refused"] = [f"{r['name']}: {r['torchrec']['refused']}" for r in mine
                                 if (r.get("torchrec") or {}).get("refused")]
    return out


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def markdown(data: dict) -> str:
    s = data["summary"]
    commit = (data.get("git_commit") or "?")[:10]
    lines = [f"# Two-rank CPU campaign {data['date']} ({data['device_name']}, {commit})", "",
             f"`{data['command']}`: {runs_said(data)}, fresh runs, each alone; spec {data['spec']}", "",
             "| workload | plan | predicted ms | measured ms [90%] | error | rounds (ms) | rounds spread | "
             "TorchRec ms [90%] |", "|---|---|---:|---:|---:|---|---:|---:|"]
    for r in data["rows"]:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['name']} | - | failed | | | | |")
            continue
        tr = r.get("torchrec") or {}
        trs = measured_ms(tr) if "measured_step_time_s" in tr else ("refused" if tr else "-")
        err = r["predicted_step_time_s"] / r["measured_step_time_s"] - 1
        lines.append(f"| {r['workload']} | {r['name']} | {_ms(r['predicted_step_time_s'])} | {measured_ms(r)} | "
                     f"{err:+.0%} | {rounds_ms(r)} | {r['spread']:.0%} | {trs} |")
    lines += ["", "| workload | plans | MAPE | Spearman | ILP rank | ILP / fastest | measured spread | run spread | "
                  "Spearman vs TorchRec | ILP / TorchRec's plan (DMP, paired) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for wl, w in s.get("per_workload", {}).items():
        f = lambda x, fmt: "-" if x is None else format(x, fmt)
        own = w.get("torchrec_ilp_over_own_paired")
        own = _iv(own["ratio"], own["lo"], own["hi"], ".2f") if own else f(w.get("torchrec_ilp_over_own"), ".2f")
        lines.append(f"| {wl} | {w['plans']} | {w['mape']:.0%} | {f(w['spearman'], '.2f')} | {w['ilp_rank']} | "
                     f"{f(w['ilp_over_fastest'], '.2f')} | {w['measured_spread']:.0%} | {w['run_spread_median']:.0%} | "
                     f"{f(w.get('torchrec_spearman'), '.2f')} | {own} |")
    lines += rounds_lines(s.get("per_workload", {}))
    lines += ["", f"All plans: MAPE {s.get('mape', 0):.0%}, Spearman {s.get('spearman')}, worst {s.get('worst_plan')}"]
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--spec", help="a spec from placer calibrate --device cpu --nproc 2 (default: calibrate now)")
    ap.add_argument("--out", default=str(ROOT / "validation" / "results"), help="results folder")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help=f"interleaved rounds: every plan once per round, fresh runs (default {ROUNDS})")
    ap.add_argument("--repeats", type=int, default=None, help="deprecated alias of --rounds")
    ap.add_argument("--time-limit", type=float, default=30.0, help="solve time limit per method, s (default 30)")
    ap.add_argument("--workloads", help="comma-separated workload names (default all)")
    ap.add_argument("--torchrec", action="store_true", help="also train every plan under TorchRec's DMP")
    ap.add_argument("--smoke", action="store_true", help="2 plans of ranks-skewed8, 2 rounds, a few steps")
    ap.add_argument("--date", default=_dt.date.today().isoformat())
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"fidelity-ranks-{args.date}" + ("-smoke" if args.smoke else "")
    cases = [(n, 0.2 if args.smoke else sec) for n, sec in CAMPAIGN
             if (n == "ranks-skewed8" if args.smoke else not args.workloads or n in args.workloads.split(","))]
    load = os.getloadavg()[0]
    if load > 1.5 and not args.smoke:
        log(f"warning: load average {load:.2f}: another process is busy; timings will be disturbed")
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="placer-ranks-")) if args.smoke else out / stem
    work.mkdir(parents=True, exist_ok=True)
    paths = [(n, WORKLOADS / f"{n}.yaml", sec) for n, sec in cases]
    spec = Path(args.spec) if args.spec else calibrate("cpu", 1, [p for _, p, _ in paths], work / "spec.yaml",
                                                       args.smoke, nproc=NPROC)
    rounds = rounds_from(args)
    rows, records = [], {}
    for wl_name, wl_path, seconds in paths:
        log(f"{wl_name}: planning")
        plans = make_plans(spec, wl_path, work / "plans" / wl_name, args.time_limit, args.smoke)
        log(f"{wl_name}: {len(plans)} plans in {rounds} interleaved rounds")
        got, records[wl_name] = run_rounds(spec, wl_name, wl_path, plans, seconds, rounds, 1, 1800, nproc=NPROC)
        for row in got:
            if "error" not in row:
                runs = row["runs_step_time_s"]
                row["spread"] = (max(runs) - min(runs)) / row["measured_step_time_s"]
        if args.torchrec:
            trained = torchrec_rows(spec, wl_path, [(n, p) for (n, p), r in zip(plans, got) if "error" not in r],
                                    rounds, 3 if args.smoke else DMP_STEPS, 1 if args.smoke else DMP_WARMUP)
            for row in got:
                if row["name"] in trained:
                    row["torchrec"] = trained[row["name"]]
        rows += got
    data = {"schema": "placer-fidelity-ranks/2",
            "command": "python3 validation/fidelity_ranks.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "date": args.date, "device": "cpu", "nproc": NPROC, "spec": str(spec), "rounds": rounds,
            "workload_rounds": records, "wall_s": time.perf_counter() - t0, **environment(), **_versions(),
            "device_name": _device_name(spec), "rows": rows}
    data["summary"] = summarize_ranks(rows)
    write_json(out / f"{stem}.json", data)
    scatter(data, out / f"{stem}.png")
    print(markdown(data))
    return 0


def _versions() -> dict:
    import importlib.metadata as md

    import torch

    try:
        torchrec = md.version("torchrec")
    except md.PackageNotFoundError:
        torchrec = None
    return {"torch": torch.__version__, "torchrec": torchrec}


def _device_name(spec: Path) -> str:
    from placer.specs import load_hardware

    return next(iter(load_hardware(spec).templates.values())).gpus.model


if __name__ == "__main__":
    raise SystemExit(main())
