#!/usr/bin/env python3
"""TorchRec campaign: does placer predict the step of TorchRec's DistributedModelParallel, and does its plan beat
TorchRec's own there? (issue 51 item 5)

On CPU gloo ranks (``--nproc N``, default 2), one command:

1. calibrate: ``placer calibrate --device cpu --nproc N --trainer torchrec`` (one rank measured while the others
   work, the gloo all-to-all and all-reduce, FBGEMM's TBE forward and fused backward on the CPU), unless ``--spec``;
2. plans per workload (validation/ranks_workloads/), every one planned and priced under ``--trainer torchrec``:
   placer's ILP, TorchRec's own planner (``--method torchrec``), greedy_size, round_robin, random, and the forced
   plans of fidelity_ranks.py (every table on one rank, every table row-wise, column-wise, the small tables
   data-parallel); duplicates run once;
3. every plan exported (``placer export --torchrec --device cpu``) and trained under DistributedModelParallel on
   N gloo ranks (examples/train_torchrec.py --json: TorchRec's DLRM, or placer's dense model over DMP's sharded
   tables where TorchRec's classes cannot express it, so the step has the dense work placer prices), the plans in
   ``--rounds`` interleaved rounds (validation/rounds.py), each plan's median with its bootstrap 90% interval;
4. the summary per workload: MAPE of placer's prediction against DMP's measured step, Spearman over the plans whose
   intervals separate (with its interval), the ILP against the fastest plan and against TorchRec's own plan on
   paired rounds.

Not here yet: TorchRec's own estimate of each plan (its planner's perf figures) beside placer's.

Writes ``<out>/fidelity-torchrec-<nproc>ranks-<date>.json`` (command, commit, machine, versions, date, rows) and
prints a markdown table. Run it with nothing else on the machine.

    python3 validation/fidelity_torchrec.py                     # 3 workloads, 2 ranks, 5 rounds
    python3 validation/fidelity_torchrec.py --nproc 4 --spec FILE
    python3 validation/fidelity_torchrec.py --smoke --out /tmp/t  # 2 plans of one workload, 2 rounds (CI)
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from validation.common import environment, write_json  # noqa: E402
from validation.fidelity import calibrate, log, write_plans  # noqa: E402
from validation.fidelity_ranks import CAMPAIGN, WORKLOADS, forced_plans, torchrec_rows  # noqa: E402
from validation.fidelity_report import measured_ms, rounds_lines, round_statistics, summarize  # noqa: E402
from validation.rounds import paired  # noqa: E402

METHODS = ["ilp", "torchrec", "greedy_size", "round_robin", "random"]
ROUNDS = 5
DMP_STEPS, DMP_WARMUP = 30, 5


def torchrec_workload(wl_path: Path):
    from placer.specs import load_workload

    return load_workload(wl_path).model_copy(update={"trainer": "torchrec"})


def make_plans(spec: Path, wl_path: Path, folder: Path, time_limit: float, smoke: bool) -> list[tuple[str, Path]]:
    """The campaign's plans of one workload (module docstring), planned under the torchrec trainer, written."""
    from placer.cost import CostModel
    from placer.errors import PlacerError
    from placer.planner.solve import SolveConfig, solve
    from placer.specs import load_hardware
    from placer.topology import Topology

    wl = torchrec_workload(wl_path)
    topo = Topology(load_hardware(spec), wl.dense.dtype)
    plans = []
    for method in (["ilp", "greedy_size"] if smoke else METHODS):
        try:
            plans.append((method, solve(topo, wl, SolveConfig(method=method, time_limit_s=time_limit))))
        except PlacerError as exc:
            log(f"  {method}: no plan ({exc})")
    if not smoke:
        greedy = next((p for m, p in plans if m == "greedy_size"), None)
        plans += forced_plans(topo, wl, CostModel(topo, wl), greedy)
    return write_plans(plans, folder)


def predicted(spec: Path, wl_path: Path, plan_path: Path) -> dict:
    """placer's prediction of the plan's step under the torchrec trainer on ``spec``."""
    from placer.cost import CostModel
    from placer.plan import load_plan
    from placer.simulate import predict
    from placer.specs import load_hardware
    from placer.topology import Topology

    wl = torchrec_workload(wl_path)
    return predict(CostModel(Topology(load_hardware(spec), wl.dense.dtype), wl), load_plan(plan_path))


def rows_of(spec: Path, wl_name: str, wl_path: Path, plans: list[tuple[str, Path]], rounds: int, smoke: bool
            ) -> list[dict]:
    """One row per plan: placer's prediction beside DMP's measured step (interleaved rounds)."""
    trained = torchrec_rows(spec, wl_path, plans, rounds, 3 if smoke else DMP_STEPS, 1 if smoke else DMP_WARMUP)
    rows = []
    for name, plan_path in plans:
        got = trained.get(name, {"refused": "not run"})
        if "measured_step_time_s" not in got:
            rows.append({"name": name, "workload": wl_name, "error": got.get("refused")})
            continue
        pred = predicted(spec, wl_path, plan_path)
        rows.append({"name": name, "method": name.split(":")[0] if not name.startswith("forced") else name,
                     "workload": wl_name, "plan_file": plan_path.name, "predicted_step_time_s": pred["step_time_s"],
                     "predicted_phases_s": pred["phases_s"], "bottleneck": pred.get("bottleneck"),
                     "ratio": got["measured_step_time_s"] / pred["step_time_s"], "ops": [], "phases": {}, **got})
    return rows


def summarize_torchrec(rows: list[dict]) -> dict:
    """fidelity_report.summarize (MAPE, Spearman, the ILP's rank) with the rounds' statistics per workload and the
    ILP against TorchRec's own plan on paired rounds."""
    ok = [r for r in rows if "error" not in r]
    out = summarize(ok)
    for wl, w in out.get("per_workload", {}).items():
        mine = {r["method"]: r for r in ok if r["workload"] == wl}
        if "ilp" in mine and "torchrec" in mine:
            w["ilp_over_torchrec_paired"] = paired(mine["ilp"]["rounds_step_time_s"],
                                                   mine["torchrec"]["rounds_step_time_s"])
            w["ilp_over_torchrec_predicted"] = (mine["ilp"]["predicted_step_time_s"]
                                                / mine["torchrec"]["predicted_step_time_s"])
        w.update(round_statistics([r for r in ok if r["workload"] == wl]) if len(mine) > 1 else {})
    return out


def markdown(data: dict) -> str:
    commit = (data.get("git_commit") or "?")[:10]
    lines = [f"# TorchRec campaign {data['date']}: {data['nproc']} CPU gloo ranks ({commit})",
             "", f"`{data['command']}`: {data['rounds']} interleaved rounds; spec {data['spec']}", "",
             "| workload | plan | predicted ms | DMP measured ms [90%] | error |", "|---|---|---:|---:|---:|"]
    for r in data["rows"]:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['name']} | - | refused: {r['error'][:80]} | |")
            continue
        lines.append(f"| {r['workload']} | {r['name']} | {r['predicted_step_time_s'] * 1e3:.3f} | {measured_ms(r)} | "
                     f"{r['predicted_step_time_s'] / r['measured_step_time_s'] - 1:+.0%} |")
    s = data["summary"]
    lines += ["", "| workload | plans | MAPE | Spearman (all) | ILP / TorchRec's plan, paired [90%] |",
              "|---|---:|---:|---:|---|"]
    for wl, w in s.get("per_workload", {}).items():
        p = w.get("ilp_over_torchrec_paired")
        own = "-" if not p else f"{p['ratio']:.3f} [{p['lo']:.3f}, {p['hi']:.3f}] {p['verdict']}"
        rho = "-" if w.get("spearman") is None else f"{w['spearman']:.2f}"
        lines.append(f"| {wl} | {w['plans']} | {w['mape']:.0%} | {rho} | {own} |")
    lines += rounds_lines(s.get("per_workload", {}))
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--spec", help="a spec from placer calibrate --device cpu --nproc N --trainer torchrec")
    ap.add_argument("--nproc", type=int, default=2, help="gloo ranks (default 2)")
    ap.add_argument("--out", default=str(ROOT / "validation" / "results"), help="results folder")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    ap.add_argument("--time-limit", type=float, default=30.0, help="solve time limit per method, s (default 30)")
    ap.add_argument("--workloads", help="comma-separated workload names (default all)")
    ap.add_argument("--smoke", action="store_true", help="2 plans of ranks-skewed8, 2 rounds, a few steps")
    ap.add_argument("--date", default=_dt.date.today().isoformat())
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"fidelity-torchrec-{args.nproc}ranks-{args.date}" + ("-smoke" if args.smoke else "")
    names = [n for n, _ in CAMPAIGN if (n == "ranks-skewed8" if args.smoke else
                                        not args.workloads or n in args.workloads.split(","))]
    if os.getloadavg()[0] > 1.5 and not args.smoke:
        log(f"warning: load average {os.getloadavg()[0]:.2f}: another process is busy; timings will be disturbed")
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="placer-trec-")) if args.smoke else out / stem
    work.mkdir(parents=True, exist_ok=True)
    paths = [(n, WORKLOADS / f"{n}.yaml") for n in names]
    spec = Path(args.spec) if args.spec else calibrate("cpu", 1, [p for _, p in paths], work / "spec.yaml", args.smoke,
                                                       nproc=args.nproc, extra=("--trainer", "torchrec"))
    rounds = 2 if args.smoke else args.rounds
    rows = []
    for wl_name, wl_path in paths:
        log(f"{wl_name}: planning under --trainer torchrec")
        plans = make_plans(spec, wl_path, work / "plans" / wl_name, args.time_limit, args.smoke)
        log(f"{wl_name}: {len(plans)} plans under DMP in {rounds} interleaved rounds")
        rows += rows_of(spec, wl_name, wl_path, plans, rounds, args.smoke)
    data = {"schema": "placer-fidelity-torchrec/1",
            "command": "python3 validation/fidelity_torchrec.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "date": args.date, "device": "cpu", "nproc": args.nproc, "spec": str(spec), "rounds": rounds,
            "wall_s": time.perf_counter() - t0, **environment(), "rows": rows}
    data["summary"] = summarize_torchrec(rows)
    write_json(out / f"{stem}.json", data)
    print(markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
