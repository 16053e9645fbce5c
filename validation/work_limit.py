"""Reproducibility of ``placer solve --work-limit`` (issue 19): the same specs and the same work limit give the same
plan and bound on a slower or busier machine. Runs the command N times alone, then N times beside busy processes
that keep every core spinning (a busier machine, as the planner meets it), each in a fresh process with its own
PYTHONHASHSEED; compares the plans (placements, step, bound, work used: a digest) and reports the wall seconds.
Prints a table and writes JSON with the command, commit, machine, versions and date.

    python3 validation/work_limit.py --runs 2 --out validation/results/work-limit.json
    python3 validation/work_limit.py --cases mlperf-dlrm-v2@dgx-h100-2node:8000 --runs 1

Run it alone (beside nothing but its own busy processes).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.common import ROOT, environment, parse_case, write_json  # noqa: E402  (after the path is set)

#: workload@hardware:work units
DEFAULT_CASES = ("production-856@dgx-h100-16node:30000", "mlperf-dlrm-v2@dgx-h100-2node:30000")


def _spin() -> None:
    while True:
        pass


def run_once(wl: str, hw: str, units: float, hash_seed: int) -> dict:
    """One `placer solve --work-limit` in a fresh process: wall seconds and the plan's numbers and digest."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        argv = [sys.executable, "-m", "placer.cli", "solve", f"hardware_specs/{hw}.yaml", f"workloads/{wl}.yaml",
                "--work-limit", f"{units:g}", "-q", "-o", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": str(hash_seed)})
        row = {"command": " ".join(["placer", *argv[3:-2]]), "hash_seed": hash_seed, "exit_code": proc.returncode,
               "cli_wall_s": time.perf_counter() - t0}
        if proc.returncode != 0 or not out.exists():
            row["error"] = (proc.stderr or proc.stdout)[-400:]
            return row
        plan = json.loads(out.read_text())
    s = plan["solver"]
    essence = json.dumps([plan["placements"], s["objective_step_time_s"], s["lower_bound_step_time_s"],
                          s.get("work_used")], sort_keys=True)
    row.update(step_ms=s["objective_step_time_s"] * 1e3, bound_ms=s["lower_bound_step_time_s"] * 1e3,
               gap=s["gap"], work_used=s.get("work_used"), solve_wall_s=s["wall_s"],
               digest=hashlib.sha256(essence.encode()).hexdigest()[:16])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), metavar="WL@HW:UNITS")
    ap.add_argument("--runs", type=int, default=2, help="runs per case and condition (default 2)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = ap.parse_args(argv)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rows = []
    seed = 0
    for case in args.cases:
        wl, hw, units = parse_case(case, "UNITS")
        for busy in (False, True):
            spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)] \
                if busy else []
            for p in spinners:
                p.start()
            try:
                for _ in range(args.runs):
                    seed += 1
                    row = run_once(wl, hw, units, seed)
                    row.update(case=case, condition=f"beside {len(spinners)} busy processes" if busy else "alone")
                    rows.append(row)
                    print(f"{case:45} {row['condition']:28} seed {seed:2d}  {row.get('cli_wall_s', 0):6.1f} s  "
                          f"step {row.get('step_ms', float('nan')):8.4f} ms  gap {row.get('gap', float('nan')):6.2%}"
                          f"  work {row.get('work_used') or 0:9.0f}  {row.get('digest', row.get('error'))}",
                          flush=True)
            finally:
                for p in spinners:
                    p.kill()
    summary = []
    print(f"\n{'case':45} {'plans':>6} {'identical':>9} {'wall alone s':>13} {'wall busy s':>12}")
    for case in args.cases:
        mine = [r for r in rows if r["case"] == case and "digest" in r]
        alone = [r["cli_wall_s"] for r in mine if r["condition"] == "alone"]
        busy = [r["cli_wall_s"] for r in mine if r["condition"] != "alone"]
        same = len({r["digest"] for r in mine}) == 1 and len(mine) == 2 * args.runs
        summary.append({"case": case, "plans": len(mine), "identical": same,
                        "median_wall_alone_s": statistics.median(alone) if alone else None,
                        "median_wall_busy_s": statistics.median(busy) if busy else None})
        print(f"{case:45} {len(mine):6d} {str(same):>9} {summary[-1]['median_wall_alone_s'] or 0:13.1f} "
              f"{summary[-1]['median_wall_busy_s'] or 0:12.1f}")
    if args.out:
        write_json(args.out, {"command": "python3 validation/work_limit.py " + " ".join(argv or sys.argv[1:]),
                              "started": started, **environment(), "rows": rows, "summary": summary})
        print(f"written {args.out}")
    return 0 if all(s["identical"] for s in summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
