"""``placer compare HW WL``: every method on the same cost model, side by side."""
from __future__ import annotations

import argparse
import json
import sys
import time

from placer.report import make_console

from placer.commands._common import add_hw_wl, add_solver_options, load_pair, solve_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hw_wl(p)
    p.add_argument("--json", action="store_true", help="print a JSON list of rows")
    p.add_argument("--methods", default=None, help="comma-separated subset of methods (default: all)")
    add_solver_options(p, method=False)


def parse_methods(text: str) -> list[str]:
    """'ilp,greedy_size' -> ['ilp', 'greedy_size'] (order kept, repeats dropped); SpecError naming --methods on
    an unknown or empty list."""
    from placer.errors import SpecError
    from placer.planner.solve import METHODS

    out: list[str] = []
    for m in (part.strip() for part in text.split(",")):
        if not m:
            continue
        if m not in METHODS:
            raise SpecError(f"unknown method {m!r}; choose from {', '.join(METHODS)}", field="--methods")
        if m not in out:
            out.append(m)
    if not out:
        raise SpecError(f"no method given; a comma-separated list of {', '.join(METHODS)}", field="--methods")
    return out


def compare_rows(topo, wl, args) -> list[dict]:
    """One row per method: step time, throughput, speedup over host_cpu, HBM used, solve time, status."""
    from placer.errors import InfeasibleError, SolverError
    from placer.planner.solve import METHODS, solve

    methods = parse_methods(args.methods) if args.methods is not None else list(METHODS)
    rows = []
    for m in methods:
        t0 = time.perf_counter()
        if m == "torchrec":  # TorchRec's planner: skipped with a note when torchrec is not installed
            from placer.torchrec_io.planner import available

            ok, why = available()
            if not ok:
                from placer.torchrec_io import INSTALL_HINT

                rows.append({"method": m, "step_time_s": None, "throughput_samples_per_s": None,
                             "status": "skipped", "solve_wall_s": time.perf_counter() - t0,
                             "note": f"torchrec not installed ({why}); install: {INSTALL_HINT}"})
                continue
        try:
            plan = solve(topo, wl, solve_config(args, method=m))
        except InfeasibleError as exc:
            rows.append({"method": m, "step_time_s": None, "throughput_samples_per_s": None,
                         "status": "infeasible", "solve_wall_s": time.perf_counter() - t0, "note": str(exc)})
            continue
        except SolverError as exc:
            if m != "torchrec":
                raise
            rows.append({"method": m, "step_time_s": None, "throughput_samples_per_s": None,
                         "status": "failed", "solve_wall_s": time.perf_counter() - t0, "note": str(exc)})
            continue
        pred = plan.predicted
        hbm = sum(v.get("hbm_used_bytes", 0.0) for v in pred["devices"].values())
        rows.append({"method": m, "step_time_s": pred["step_time_s"],
                     "throughput_samples_per_s": pred["throughput_samples_per_s"], "status": plan.solver.status,
                     "gap": plan.solver.gap, "lower_bound_step_time_s": plan.solver.lower_bound_step_time_s,
                     "hbm_used_bytes": hbm, "solve_wall_s": time.perf_counter() - t0,
                     "bottleneck": pred["bottleneck"]})
    base = next((r["step_time_s"] for r in rows if r["method"] == "host_cpu" and r["step_time_s"]), None)
    for r in rows:
        r["speedup_over_host_cpu"] = base / r["step_time_s"] if base and r["step_time_s"] else None
    return rows


def run(args) -> int:
    from placer.report import compare_table

    if args.methods is not None:
        parse_methods(args.methods)  # refuse a typo before loading and solving anything
    solve_config(args)
    topo, wl = load_pair(args)
    rows = compare_rows(topo, wl, args)
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
    else:
        compare_table(rows, make_console())
    return 0
