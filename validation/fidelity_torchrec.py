#!/usr/bin/env python3
"""TorchRec campaign: does placer predict the step of TorchRec's DistributedModelParallel, and does its plan beat
TorchRec's own there? (issue 51 item 5)

On CPU gloo ranks (``--nproc N``, default 2), one command:

1. calibrate: ``placer calibrate --device cpu --nproc N --trainer torchrec`` (one rank measured while the others
   work, the gloo all-to-all and all-reduce, FBGEMM's TBE forward and fused backward on the CPU), unless ``--spec``;
2. plans per workload (validation/ranks_workloads/: fidelity_ranks.py's three and ranks-tiny-dp), every one
   planned and priced under ``--trainer torchrec``: placer's ILP, TorchRec's own planner told the machine as placer
   models it (``--method torchrec``) and told only its defaults (``torchrec-defaults``: world size, ranks per
   host, compute device, as a user who writes no bandwidths), greedy_size, round_robin, random, and the forced
   plans of fidelity_ranks.py (every table on one rank, every table row-wise, column-wise, the small tables
   data-parallel); duplicates run once;
3. every plan exported (``placer export --torchrec --device cpu``) and trained under DistributedModelParallel on
   N gloo ranks (examples/train_torchrec.py --json: TorchRec's DLRM, or placer's dense model over DMP's sharded
   tables where TorchRec's classes cannot express it, so the step has the dense work placer prices), the plans in
   ``--rounds`` interleaved rounds (validation/rounds.py), each plan's median with its bootstrap 90% interval;
4. TorchRec's own estimate of every plan (placer/torchrec_io/estimate.py: its perf model's rating, the largest
   rank's sum of shard perfs, with the Topology placer tells it and with TorchRec's defaults), beside placer's
   prediction; it covers the sharded embeddings only (no dense part, no DMP overhead), so its error against the
   step is reported with its rank correlation, which is what a planner needs of it;
5. DMP's step by phase (``--profile-steps N``, 0 for none): after the rounds, one more DMP run per plan with N steps
   under torch.profiler, the slowest rank's operators split into placer's phases plus DMP's own Python
   (validation/fidelity_dmp_phases.py, placer/torchrec_io/dmp_phases.py) beside placer's phases re-cut the same
   way; that run counts in no round;
6. the summary per workload: MAPE of placer's prediction against DMP's measured step, Spearman over the plans whose
   intervals separate (with its interval), the ILP against the fastest plan and against TorchRec's own plans on
   paired rounds; the same MAPE and Spearman of TorchRec's estimate; measured / priced per phase over its plans.

Writes ``<out>/fidelity-torchrec-<nproc>ranks-<date>.json`` (command, commit, machine, versions, date, rows) and
prints a markdown table. Run it with nothing else on the machine.

    python3 validation/fidelity_torchrec.py                     # 4 workloads, 2 ranks, 5 rounds
    python3 validation/fidelity_torchrec.py --nproc 4 --spec FILE
    python3 validation/fidelity_torchrec.py --smoke --out /tmp/t  # 2 plans of one workload, 2 rounds (CI)
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
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
from validation.fidelity_dmp_phases import phase_fields, phase_lines, phase_table, profiled  # noqa: E402
from validation.fidelity_ranks import CAMPAIGN, WORKLOADS, forced_plans, torchrec_rows  # noqa: E402
from validation.fidelity_report import measured_ms, rounds_lines, round_statistics, summarize  # noqa: E402
from validation.rounds import paired  # noqa: E402

METHODS = ["ilp", "torchrec", "greedy_size", "round_robin", "random"]
#: fidelity_ranks.py's workloads and two where TorchRec's perf model and DMP's costs part (their yamls say why)
TORCHREC_CAMPAIGN = [name for name, _ in CAMPAIGN] + ["ranks-tiny-dp", "ranks-wide"]
ROUNDS = 5
DMP_STEPS, DMP_WARMUP = 30, 5
#: profiled steps per plan (--profile-steps; --smoke at most SMOKE_PROFILE_STEPS)
PROFILE_STEPS, SMOKE_PROFILE_STEPS = 5, 2


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
        model = CostModel(topo, wl)
        plans += torchrec_defaults_plan(model, time_limit)
        greedy = next((p for m, p in plans if m == "greedy_size"), None)
        plans += forced_plans(topo, wl, model, greedy)
    return write_plans(plans, folder)


def torchrec_defaults_plan(model, time_limit: float) -> list[tuple[str, object]]:
    """TorchRec's planner told only its default Topology (``torchrec-defaults``), priced by placer; [] if it fails."""
    from placer.errors import PlacerError
    from placer.planner.solve_run import make_plan
    from placer.torchrec_io import planner as trec_planner

    try:
        got = trec_planner.collect(trec_planner.start(model, time_limit, topology="defaults"))
        return [("torchrec-defaults", make_plan(model, "torchrec-defaults", got.placements, None))]
    except PlacerError as exc:
        log(f"  torchrec-defaults: no plan ({exc})")
        return []


def torchrec_model(spec: Path, wl_path: Path):
    """placer's cost model of ``spec`` and the workload under the torchrec trainer."""
    from placer.cost import CostModel
    from placer.specs import load_hardware
    from placer.topology import Topology

    wl = torchrec_workload(wl_path)
    return CostModel(Topology(load_hardware(spec), wl.dense.dtype), wl)


def torchrec_estimates(inputs, export: Path) -> dict:
    """TorchRec's perf model's figures for the exported plan (module docstring, item 4): told placer's machine
    (``inputs``: planner.planner_inputs; ``torchrec_estimate``) and TorchRec's defaults
    (``torchrec_estimate_defaults``); or why not."""
    from placer.torchrec_io.estimate import torchrec_estimate
    from placer.torchrec_io.planner import default_topology

    doc = json.loads(export.read_text())
    try:
        return {"torchrec_estimate": torchrec_estimate(doc, inputs).as_json(),
                "torchrec_estimate_defaults": torchrec_estimate(doc, inputs, default_topology(inputs)).as_json()}
    except (ValueError, RuntimeError) as exc:  # a plan TorchRec's enumerator cannot express
        return {"torchrec_estimate_error": f"{type(exc).__name__}: {exc}"[:300]}


def predicted(model, plan_path: Path) -> dict:
    """placer's prediction of the plan's step on ``model`` (torchrec_model)."""
    from placer.plan import load_plan
    from placer.simulate import predict

    return predict(model, load_plan(plan_path))


def rows_of(spec: Path, wl_name: str, wl_path: Path, plans: list[tuple[str, Path]], rounds: int, smoke: bool,
            profile_steps: int = 0) -> list[dict]:
    """One row per plan: placer's prediction and TorchRec's estimate beside DMP's measured step (interleaved
    rounds); with ``profile_steps``, the step by phase of one more, profiled run after the rounds."""
    from placer.torchrec_io.planner import planner_inputs

    trained = torchrec_rows(spec, wl_path, plans, rounds, 3 if smoke else DMP_STEPS, 1 if smoke else DMP_WARMUP)
    model = torchrec_model(spec, wl_path)
    inputs = planner_inputs(model)
    rows = []
    for name, plan_path in plans:
        got = trained.get(name, {"refused": "not run"})
        if "measured_step_time_s" not in got:
            rows.append({"name": name, "workload": wl_name, "error": got.get("refused")})
            continue
        pred = predicted(model, plan_path)
        got = {**got, **torchrec_estimates(inputs, Path(got["export"]))}
        if profile_steps:
            log(f"{wl_name}: DMP profiled ({profile_steps} steps): {name}")
            got = {**got, **phase_fields(model, plan_path, profiled(Path(got["export"]), wl_path, profile_steps))}
        rows.append({"name": name, "method": name.split(":")[0] if not name.startswith("forced") else name,
                     "workload": wl_name, "plan_file": plan_path.name, "predicted_step_time_s": pred["step_time_s"],
                     "predicted_phases_s": pred["phases_s"], "bottleneck": pred.get("bottleneck"),
                     "ratio": got["measured_step_time_s"] / pred["step_time_s"], "ops": [], "phases": {}, **got})
    return rows


def estimator_fit(rows: list[dict], key: str) -> dict:
    """MAPE of TorchRec's rating (``key``) against the measured steps, Spearman over all plans and over the plans
    whose intervals separate (rounds.spearman_separable, as placer's own), and the number of plans it rated."""
    from scipy.stats import spearmanr

    from validation.rounds import spearman_separable

    got = [r for r in rows if key in r]
    if len(got) < 2:
        return {"plans": len(got)}
    rating = {r["name"]: r[key]["rating_ms"] / 1e3 for r in got}
    measured = [r["measured_step_time_s"] for r in got]
    return {"plans": len(got), "mape": sum(abs(rating[r["name"]] / r["measured_step_time_s"] - 1) for r in got)
            / len(got), "spearman": float(spearmanr([rating[r["name"]] for r in got], measured)[0]),
            "spearman_separable": spearman_separable(rating, {r["name"]: r["rounds_step_time_s"] for r in got})}


def summarize_torchrec(rows: list[dict]) -> dict:
    """fidelity_report.summarize (MAPE, Spearman, the ILP's rank) with the rounds' statistics per workload and the
    ILP against TorchRec's own plan on paired rounds."""
    ok = [r for r in rows if "error" not in r]
    out = summarize(ok)
    for wl, w in out.get("per_workload", {}).items():
        mine = {r["method"]: r for r in ok if r["workload"] == wl}
        for own in ("torchrec", "torchrec-defaults"):
            if "ilp" in mine and own in mine:
                tag = own.replace("-", "_")
                w[f"ilp_over_{tag}_paired"] = paired(mine["ilp"]["rounds_step_time_s"], mine[own]["rounds_step_time_s"])
                w[f"ilp_over_{tag}_predicted"] = (mine["ilp"]["predicted_step_time_s"]
                                                  / mine[own]["predicted_step_time_s"])
        w.update(round_statistics([r for r in ok if r["workload"] == wl]) if len(mine) > 1 else {})
        these = [r for r in ok if r["workload"] == wl]
        w["torchrec_estimator"] = {k: estimator_fit(these, k)
                                   for k in ("torchrec_estimate", "torchrec_estimate_defaults")}
        w["dmp_phases"] = phase_table(these)
    return out


def markdown(data: dict) -> str:
    commit = (data.get("git_commit") or "?")[:10]
    lines = [f"# TorchRec campaign {data['date']}: {data['nproc']} CPU gloo ranks ({commit})",
             "", f"`{data['command']}`: {data['rounds']} interleaved rounds; spec {data['spec']}", "",
             "| workload | plan | predicted ms | DMP measured ms [90%] | error "
             "| TorchRec's estimate ms (told / defaults) |",
             "|---|---|---:|---:|---:|---:|"]
    for r in data["rows"]:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['name']} | - | refused: {r['error'][:80]} | |")
            continue
        est = " / ".join(f"{r[k]['rating_ms']:.3f}" if k in r else "-"
                         for k in ("torchrec_estimate", "torchrec_estimate_defaults"))
        lines.append(f"| {r['workload']} | {r['name']} | {r['predicted_step_time_s'] * 1e3:.3f} | {measured_ms(r)} | "
                     f"{r['predicted_step_time_s'] / r['measured_step_time_s'] - 1:+.0%} | {est} |")
    s = data["summary"]
    lines += ["", "| workload | plans | MAPE | Spearman (all) | ILP / TorchRec's plan, paired [90%] | "
              "ILP / TorchRec-defaults' plan | TorchRec's estimate: MAPE, Spearman (told; defaults) |",
              "|---|---:|---:|---:|---|---|---|"]

    def ratio(p):
        return "-" if not p else f"{p['ratio']:.3f} [{p['lo']:.3f}, {p['hi']:.3f}] {p['verdict']}"

    def fit(f):
        return "-" if "mape" not in f else f"{f['mape']:.0%}, {f['spearman']:.2f}"

    for wl, w in s.get("per_workload", {}).items():
        rho = "-" if w.get("spearman") is None else f"{w['spearman']:.2f}"
        est = w.get("torchrec_estimator", {})
        lines.append(f"| {wl} | {w['plans']} | {w['mape']:.0%} | {rho} | {ratio(w.get('ilp_over_torchrec_paired'))} | "
                     f"{ratio(w.get('ilp_over_torchrec_defaults_paired'))} | "
                     f"{fit(est.get('torchrec_estimate', {}))}; {fit(est.get('torchrec_estimate_defaults', {}))} |")
    lines += rounds_lines(s.get("per_workload", {}))
    lines += phase_lines(s.get("per_workload", {}))
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
    ap.add_argument("--profile-steps", type=int, default=PROFILE_STEPS,
                    help=f"profiled DMP steps per plan after the rounds, for its step by phase (default "
                         f"{PROFILE_STEPS}; 0: none; --smoke: at most {SMOKE_PROFILE_STEPS})")
    ap.add_argument("--smoke", action="store_true", help="2 plans of ranks-skewed8, 2 rounds, a few steps")
    ap.add_argument("--date", default=_dt.date.today().isoformat())
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"fidelity-torchrec-{args.nproc}ranks-{args.date}" + ("-smoke" if args.smoke else "")
    names = [n for n in TORCHREC_CAMPAIGN if (n == "ranks-skewed8" if args.smoke else
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
    profile = max(0, min(args.profile_steps, SMOKE_PROFILE_STEPS) if args.smoke else args.profile_steps)
    rows = []
    for wl_name, wl_path in paths:
        log(f"{wl_name}: planning under --trainer torchrec")
        plans = make_plans(spec, wl_path, work / "plans" / wl_name, args.time_limit, args.smoke)
        log(f"{wl_name}: {len(plans)} plans under DMP in {rounds} interleaved rounds")
        rows += rows_of(spec, wl_name, wl_path, plans, rounds, args.smoke, profile)
    data = {"schema": "placer-fidelity-torchrec/1",
            "command": "python3 validation/fidelity_torchrec.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "date": args.date, "device": "cpu", "nproc": args.nproc, "spec": str(spec), "rounds": rounds,
            "profile_steps": profile,
            "wall_s": time.perf_counter() - t0, **environment(), "rows": rows}
    data["summary"] = summarize_torchrec(rows)
    write_json(out / f"{stem}.json", data)
    print(markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
