"""Re-derive the planner's fitted constants (placer/planner/tuning.py) by measurement, one group at a time.

Each group measures what its constants stand for on this machine, fits them and prints a table (name, unit,
value in tuning.py, value measured here), then writes JSON with the command, commit, machine, versions and date
(validation/results/tune-planner-GROUP-<date>.json unless --out says otherwise):

    least-work   LEAST_WORK_*: the cost model, greedy_size and its pricing, timed per case; least squares over
                 (1, pairs with GPUs counted up to LEAST_WORK_GPUS, GPUs)
    trace        TRACE_*: the dense trace where none is at hand (torch's imports included), a fresh process per
                 case; least squares over (1, features)
    what-if      WHAT_IF_S_PER_PAIR: the skew what-ifs (placer/skew.py) of greedy_size's plan, per pair
    options      OPTIONS_S_PER_PAIR: the single-stage ILP's options, their pricing and the baselines, per pair
    after-solve  AFTER_SOLVE_*: `placer solve` from the solve's end to the command's exit (the command's wall
                 time less the plan's solver.wall_s and the interpreter's start), least squares over (1, pairs)
    nice         BASELINES_NICE, STAGE2_CHILD_NICE: two-stage solves with each pair of nicenesses; the command's
                 wall time and how long it waited for the baselines (the lowest of both wins)
    effort       the work meter's rates (effort.py): work-limited solves; per stage, wall seconds over nominal
                 seconds, and each rate scaled by its stage's ratio (SIMPLEX_GROWTH, an exponent, is shown only)
    group-level  GROUP_LEVEL: stage 1's MIP (as stage1_mip.py runs it) with the group counts at several levels;
                 its bound and time (the highest bound wins, then the least time)
    step-weight  STEP_WEIGHT: the single-stage tie-break at several weights; the slow-lookup share and the step
                 (the largest weight that keeps the fewest slow lookups)

    python3 validation/tune_planner.py least-work                  # the default cases (minutes)
    python3 validation/tune_planner.py what-if --cases production-856@dgx-h100
    python3 validation/tune_planner.py all --tiny                  # every group on the tiny workload, seconds
    python3 validation/tune_planner.py all --dry-run               # what would run, nothing measured

Timing is a benchmark: run it alone on the reference machine (the project's 2-core VM); --tiny only shows that
the measurement runs (its fit on one tiny case means nothing).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.common import ROOT, environment, write_json  # noqa: E402  (after the path is set)

#: group -> (the constants it re-derives, its default cases, its --tiny cases)
GROUPS = {
    "least-work": (("LEAST_WORK_S", "LEAST_WORK_S_PER_PAIR", "LEAST_WORK_S_PER_GPU", "LEAST_WORK_GPUS"),
                   ("production-856@dgx-h100", "production-856@dgx-h100-16node", "synthetic-1000@dgx-h100-32node",
                    "tiny@dgx-h100"), ("tiny@pcie-4gpu-workstation", "tiny@dgx-h100")),
    "trace": (("TRACE_IMPORT_S", "TRACE_S_PER_FEATURE"),
              ("tiny@dgx-h100", "criteo-kaggle-dlrm@dgx-h100", "production-856@dgx-h100", "synthetic-1000@dgx-h100"),
              ("tiny@dgx-h100",)),
    "what-if": (("WHAT_IF_S_PER_PAIR",), ("production-856@dgx-h100", "production-856@dgx-h100-16node",
                                          "synthetic-1000@dgx-h100-32node"), ("tiny@dgx-h100",)),
    "options": (("OPTIONS_S_PER_PAIR",), ("production-856@cpu-server", "mlperf-dlrm-v2@dgx-h100"),
                ("tiny@pcie-4gpu-workstation",)),
    "after-solve": (("AFTER_SOLVE_S", "AFTER_SOLVE_S_PER_PAIR", "AFTER_SOLVE_MAX_S"),
                    ("production-856@dgx-h100:30", "production-856@dgx-h100-16node:30",
                     "synthetic-1000@dgx-h100-32node:30"), ("tiny@dgx-h100-2node:5",)),
    "nice": (("BASELINES_NICE", "STAGE2_CHILD_NICE"), ("synthetic-1000@dgx-h100-32node:60",),
             ("tiny@dgx-h100-2node:5",)),
    "effort": (("SETUP_S_PER_PAIR", "LP_CALL_S", "SIMPLEX_S_AT_10K", "SIMPLEX_GROWTH", "IPM_S_PER_NONZERO",
                "CBC_CALL_S", "CBC_S_PER_NONZERO", "CBC_ITERATION_S_PER_NONZERO", "CBC_NODE_S_PER_NONZERO",
                "MIP_NODE_S_PER_NONZERO", "MIP_ROOT_S_PER_NONZERO", "SCORE_CALL_S", "SCORE_S_PER_ENTRY",
                "GROUP_S_PER_ENTRY", "PRICING_S_PER_LOAD", "SWAP_S_PER_PAIR", "REPACK_S_PER_PARTNER",
                "POTENTIAL_S_PER_LOAD", "TIE_BREAK_OPTION_S"),
               ("production-856@dgx-h100-16node:30000", "mlperf-dlrm-v2@dgx-h100-2node:8000"),
               ("tiny@dgx-h100-2node:2000",)),
    "group-level": (("GROUP_LEVEL",), ("production-856@dgx-h100-16node:60",), ("tiny@dgx-h100-2node:2",)),
    "step-weight": (("STEP_WEIGHT",), ("mlperf-dlrm-v2@dgx-h100:30", "criteo-terabyte-full@pcie-4gpu-workstation:30"),
                    ("tiny@pcie-4gpu-workstation:5",)),
}
NICE_PAIRS = ((10, 15), (0, 0), (10, 0), (19, 15))
LEVELS = (1.1, 1.15, 1.2, 1.3)
WEIGHTS = (1e-5, 1e-4, 1e-3, 1e-2)
#: the stages of a work-limited solve whose ratio (wall / nominal seconds) scales each rate of effort.py
EFFORT_STAGES = {"option kinds": ("SETUP_S_PER_PAIR",),
                 "stage 1": ("LP_CALL_S", "SIMPLEX_S_AT_10K", "IPM_S_PER_NONZERO", "CBC_CALL_S", "CBC_S_PER_NONZERO",
                             "CBC_ITERATION_S_PER_NONZERO", "CBC_NODE_S_PER_NONZERO", "MIP_NODE_S_PER_NONZERO",
                             "MIP_ROOT_S_PER_NONZERO"),
                 "stage 2": ("SCORE_CALL_S", "SCORE_S_PER_ENTRY", "GROUP_S_PER_ENTRY", "PRICING_S_PER_LOAD",
                             "SWAP_S_PER_PAIR", "REPACK_S_PER_PARTNER", "POTENTIAL_S_PER_LOAD"),
                 "tie-break": ("TIE_BREAK_OPTION_S",)}


def _case(text: str) -> tuple[str, str, float | None]:
    pair, _, limit = text.partition(":")
    wl, hw = pair.split("@")
    return wl, hw, float(limit) if limit else None


def _model(wl: str, hw: str):
    from placer.cost import CostModel
    from placer.specs.hardware import load_hardware
    from placer.specs.workload import load_workload
    from placer.topology import Topology

    w = load_workload(ROOT / "workloads" / f"{wl}.yaml")
    return CostModel(Topology(load_hardware(ROOT / "hardware_specs" / f"{hw}.yaml"), w.dense.dtype), w)


def _pairs16(model) -> int:
    from placer.planner.tuning import LEAST_WORK_GPUS
    return len(model.wl.tables) * min(len(model.topo.gpus), LEAST_WORK_GPUS)


def _nnls(columns: list[list[float]], ys: list[float]) -> list[float]:
    """Non-negative least squares of ``ys`` on ``columns`` (one list per row); with fewer rows than columns, the
    first column alone (the rest 0)."""
    from scipy.optimize import nnls

    a, b = np.asarray(columns, dtype=float), np.asarray(ys, dtype=float)
    if len(b) < a.shape[1]:
        return [float(b.mean() / max(a[:, 0].mean(), 1e-12))] + [0.0] * (a.shape[1] - 1)
    return [float(v) for v in nnls(a, b)[0]]


def least_work(cases, tiny):
    from placer.plan import Plan
    from placer.planner.baselines import run_baseline
    from placer.simulate import predict

    _model(*cases[0][:2])  # untimed: the imports and the first model's one-off costs
    rows = []
    for wl, hw, _ in cases:
        t0 = time.perf_counter()
        model = _model(wl, hw)
        placements = run_baseline("greedy_size", model, seed=0)
        predict(model, Plan.model_construct(placements=placements, method="greedy_size"))
        gpus = len(model.topo.gpus)
        rows.append({"case": f"{wl}@{hw}", "pairs16": _pairs16(model), "gpus": gpus,
                     "wall_s": time.perf_counter() - t0})
    fit = _nnls([[1.0, r["pairs16"], r["gpus"]] for r in rows], [r["wall_s"] for r in rows])
    return rows, dict(zip(GROUPS["least-work"][0][:3], fit))  # LEAST_WORK_GPUS: greedy_size's, not fitted


def trace(cases, tiny):
    """The dense trace where none is at hand: a fresh process per case (torch's imports included), timed around
    the trace alone; least squares over (1, features)."""
    code = ("import sys, time; from placer.cost import CostModel; from placer.specs.hardware import load_hardware; "
            "from placer.specs.workload import load_workload; from placer.topology import Topology; "
            "w = load_workload(sys.argv[1]); m = CostModel(Topology(load_hardware(sys.argv[2]), w.dense.dtype), w); "
            "t0 = time.perf_counter(); m.builder.dense_trace(m.gpus[0]); print(time.perf_counter() - t0)")
    rows = []
    for wl, hw, _ in cases:
        from placer.specs.workload import load_workload

        path = ROOT / "workloads" / f"{wl}.yaml"
        done = subprocess.run([sys.executable, "-c", code, str(path), str(ROOT / "hardware_specs" / f"{hw}.yaml")],
                              cwd=ROOT, capture_output=True, text=True, check=True)
        rows.append({"case": f"{wl}@{hw}", "features": len(load_workload(path).resolved_features),
                     "wall_s": float(done.stdout.split()[-1])})
    fit = _nnls([[1.0, r["features"]] for r in rows], [r["wall_s"] for r in rows])
    return rows, dict(zip(GROUPS["trace"][0], fit))


def what_if(cases, tiny):
    from placer.plan import Plan
    from placer.planner.baselines import run_baseline
    from placer.simulate import predict
    from placer.skew import robustness

    rows = []
    for wl, hw, _ in cases:
        model = _model(wl, hw)
        plan = Plan.model_construct(placements=run_baseline("greedy_size", model, seed=0), method="greedy_size")
        base = predict(model, plan)["step_time_s"]
        t0 = time.perf_counter()
        robustness(model, plan, base_s=base)
        wall = time.perf_counter() - t0
        rows.append({"case": f"{wl}@{hw}", "pairs16": _pairs16(model), "wall_s": wall,
                     "s_per_pair": wall / _pairs16(model)})
    return rows, {"WHAT_IF_S_PER_PAIR": statistics.mean(r["s_per_pair"] for r in rows)}


def options(cases, tiny):
    from placer.options import OptionConfig, all_options
    from placer.planner.fit import with_fit_levels
    from placer.planner.baselines import BASELINES
    from placer.planner.solve_run import each_feasible_baseline

    rows = []
    for wl, hw, _ in cases:
        model = _model(wl, hw)
        t0 = time.perf_counter()
        opts = all_options(model.topo, model.wl, with_fit_levels(model, OptionConfig()))
        list(each_feasible_baseline(model, 0, BASELINES))
        for t in model.wl.tables:
            for p in opts[t.name]:
                model.placement_cost(p)
        wall = time.perf_counter() - t0
        pairs = len(model.wl.tables) * len(model.topo.gpus)
        rows.append({"case": f"{wl}@{hw}", "pairs": pairs, "wall_s": wall, "s_per_pair": wall / pairs})
    return rows, {"OPTIONS_S_PER_PAIR": max(r["s_per_pair"] for r in rows)}  # a gate: the slowest case


def _cli(wl: str, hw: str, limit: str, *, patch: str = "") -> dict:
    """`placer solve` as a process (``patch``: Python run before it), its wall time and plan."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        code = f"import sys; {patch + '; ' if patch else ''}from placer.cli import main; sys.exit(main())"
        argv = [sys.executable, "-c", code, "solve", str(ROOT / "hardware_specs" / f"{hw}.yaml"),
                str(ROOT / "workloads" / f"{wl}.yaml"), "-q", "-o", str(out), *limit.split()]
        t0 = time.perf_counter()
        run = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if run.returncode != 0:
            raise SystemExit(f"{wl}@{hw}: placer solve exited {run.returncode}: {run.stderr[-500:]}")
        return {"wall_s": wall, "plan": json.loads(out.read_text())}


def _import_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import placer.cli"], check=True, cwd=ROOT)
    return time.perf_counter() - t0


def after_solve(cases, tiny):
    start = _import_s()
    rows = []
    for wl, hw, limit in cases:
        run = _cli(wl, hw, f"--time-limit {limit:g}")
        solver = run["plan"]["solver"]
        pairs = _pairs_of(wl, hw)
        rows.append({"case": f"{wl}@{hw}:{limit:g}", "pairs": pairs, "command_wall_s": run["wall_s"],
                     "solve_wall_s": solver["wall_s"], "after_s": run["wall_s"] - solver["wall_s"] - start})
    fit = _nnls([[1.0, r["pairs"]] for r in rows], [r["after_s"] for r in rows])
    return rows, {"AFTER_SOLVE_S": fit[0], "AFTER_SOLVE_S_PER_PAIR": fit[1],
                  "AFTER_SOLVE_MAX_S": max(r["after_s"] for r in rows)}


def _pairs_of(wl: str, hw: str) -> int:
    model = _model(wl, hw)
    return len(model.wl.tables) * len(model.topo.gpus)


def nice(cases, tiny):
    rows = []
    for wl, hw, limit in cases:
        for base, stage2 in NICE_PAIRS:
            patch = (f"import placer.planner.solve as s, placer.planner.stage2 as t; s.BASELINES_NICE = {base}; "
                     f"t.CHILD_NICE = {stage2}")
            run = _cli(wl, hw, f"--time-limit {limit:g}", patch=patch)
            stages = run["plan"]["solver"].get("stage_times_s") or {}
            rows.append({"case": f"{wl}@{hw}:{limit:g}", "baselines_nice": base, "stage2_nice": stage2,
                         "command_wall_s": run["wall_s"], "waited_for_baselines_s":
                         stages.get("baselines (waited for)", 0.0),
                         "baselines_cut": "baselines" in (run["plan"]["solver"].get("ran_out") or [])})
    best = min(rows, key=lambda r: (r["baselines_cut"], r["waited_for_baselines_s"] + r["command_wall_s"]))
    return rows, {"BASELINES_NICE": best["baselines_nice"], "STAGE2_CHILD_NICE": best["stage2_nice"]}


def effort(cases, tiny):
    from placer.planner import tuning
    from placer.planner.budget import WORK_UNIT_S
    from placer.planner.solve import SolveConfig, solve

    rows, ratios = [], {}
    for wl, hw, units in cases:
        model = _model(wl, hw)
        plan = solve(model.topo, model.wl, SolveConfig(work_limit=units))
        times, work = dict(plan.solver.stage_times_s or {}), dict(plan.solver.stage_work or {})
        # the setup is charged outside the stages, per pair: its wall time is the model's and the kinds'
        times["option kinds"] = times.get("model", 0.0) + times.get("option kinds", 0.0)
        work["option kinds"] = tuning.SETUP_S_PER_PAIR * len(model.wl.tables) * len(model.topo.gpus) / WORK_UNIT_S
        for stage in EFFORT_STAGES:
            if work.get(stage):
                ratio = times.get(stage, 0.0) / (work[stage] * WORK_UNIT_S)
                ratios.setdefault(stage, []).append(ratio)
                rows.append({"case": f"{wl}@{hw}:{units:g}", "stage": stage, "wall_s": times.get(stage, 0.0),
                             "nominal_s": work[stage] * WORK_UNIT_S, "wall_over_nominal": ratio})
    fitted = {name: getattr(tuning, name) * statistics.median(ratios[stage])
              for stage, names in EFFORT_STAGES.items() if stage in ratios for name in names}
    return rows, fitted


def group_level(cases, tiny):
    from placer.options import OptionConfig
    from placer.planner import ilp, stage1_groups
    from placer.planner.budget import Budget
    from placer.planner.context import Context
    from placer.planner.fit import with_fit_levels
    from placer.planner.kinds import KindFolder
    from placer.planner.stage1 import solve_stage1
    from placer.planner.stage1_mip import GAP, OPTIONS
    from placer.planner.symmetry import Symmetry

    rows = []
    for wl, hw, seconds in cases:
        model = _model(wl, hw)
        ctx = Context.of(model, Symmetry.of(model.topo), with_fit_levels(model, OptionConfig()))
        kinds = KindFolder(ctx).kinds()
        stage1 = solve_stage1(ctx, kinds, Budget(seconds), gap=0.005, backend="cbc", threads=None)
        if stage1.result.chosen is None:
            raise SystemExit(f"{wl}@{hw}: stage 1 found no choice in {seconds:g} s")
        for level in (None,) + LEVELS:
            stage1_groups.LEVEL = level or stage1_groups.LEVEL
            counts = [] if level is None else stage1_groups.group_counts(ctx, kinds, stage1.problem,
                                                                        stage1.result.chosen)
            problem = dataclasses.replace(stage1.problem, levels=[], group_counts=list(counts))
            t0 = time.perf_counter()
            res = ilp.solve(problem, backend="highs", gap=GAP, warm_start=stage1.result.chosen,
                            budget=Budget(seconds), highs_options=OPTIONS)
            rows.append({"case": f"{wl}@{hw}:{seconds:g}", "level": level, "bound_ms": res.lower_bound_s * 1e3,
                         "status": res.status, "wall_s": time.perf_counter() - t0})
    counted = [r for r in rows if r["level"] is not None]
    best = max(counted, key=lambda r: (round(r["bound_ms"], 3), -r["wall_s"]))
    return rows, {"GROUP_LEVEL": best["level"]}


def step_weight(cases, tiny):
    from placer.planner import tiebreak
    from placer.planner.solve import SolveConfig, solve

    rows = []
    for wl, hw, limit in cases:
        model = _model(wl, hw)
        for weight in WEIGHTS:
            tiebreak.STEP_WEIGHT = weight
            tie = solve(model.topo, model.wl, SolveConfig(time_limit_s=limit)).solver.tie_break or {}
            rows.append({"case": f"{wl}@{hw}:{limit:g}", "weight": weight, "result": tie.get("result"),
                         "slow_share": tie.get("share_after", tie.get("share_before")),
                         "step_ms": (tie.get("step_time_after_s") or 0.0) * 1e3})
    least = {}
    for r in rows:
        least[r["case"]] = min(least.get(r["case"], float("inf")), r["slow_share"] or 0.0)
    keeps = [w for w in WEIGHTS if all((r["slow_share"] or 0.0) <= least[r["case"]] * (1 + 1e-6) + 1e-12
                                       for r in rows if r["weight"] == w)]
    return rows, {"STEP_WEIGHT": max(keeps) if keeps else None}


MEASURE = {"least-work": least_work, "trace": trace, "what-if": what_if, "options": options, "after-solve": after_solve,
           "nice": nice, "effort": effort, "group-level": group_level, "step-weight": step_weight}


def run_group(group: str, cases: list[str], tiny: bool, dry_run: bool, out: Path | None, argv: list[str]) -> None:
    from placer.planner import tuning

    names, default, small = GROUPS[group]
    chosen = cases or list(small if tiny else default)
    print(f"== {group}: {', '.join(chosen)}", flush=True)
    rows, fitted = ([], {}) if dry_run else MEASURE[group]([_case(c) for c in chosen], tiny)
    for r in rows:
        print("  " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    print(f"  {'constant':28} {'unit':28} {'tuning.py':>11} {'measured':>11}")
    for name in sorted(set(names) | set(fitted)):
        entry = tuning.TABLE[name]
        got = fitted.get(name)
        print(f"  {name:28} {entry.unit:28} {entry.value:11.4g} {'-' if got is None else f'{got:11.4g}':>11}")
    if dry_run:
        return
    date = _dt.date.today().isoformat()
    path = out or ROOT / "validation" / "results" / f"tune-planner-{group}-{date}.json"
    write_json(path, {"command": " ".join(["python3", "validation/tune_planner.py", *argv]),
                      "date": _dt.datetime.now().isoformat(timespec="seconds"), "environment": environment(),
                      "load_average": os.getloadavg(), "group": group, "tiny": tiny, "cases": chosen,
                      "current": {n: tuning.TABLE[n].value for n in sorted(set(names) | set(fitted))},
                      "measured": fitted, "rows": rows})
    print(f"  wrote {path}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("group", choices=list(GROUPS) + ["all"])
    ap.add_argument("--cases", nargs="+", default=None, metavar="WL@HW[:LIMIT]",
                    help="instead of the group's cases (LIMIT: s, or work units for effort)")
    ap.add_argument("--tiny", action="store_true", help="the tiny workload only: shows that it runs (seconds)")
    ap.add_argument("--dry-run", action="store_true", help="print the cases and current values; measure nothing")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here (one group)")
    args = ap.parse_args(argv)
    groups = list(GROUPS) if args.group == "all" else [args.group]
    for group in groups:
        out = args.out if len(groups) == 1 else None
        if args.tiny and out is None and not args.dry_run:
            out = Path(tempfile.gettempdir()) / f"tune-planner-{group}-tiny.json"  # not a result to keep
        run_group(group, args.cases or [], args.tiny, args.dry_run, out, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
