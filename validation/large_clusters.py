"""The planner's large-cluster targets (issue 19), measured as a user meets them: the `placer solve` command,
run N times per case one after another, each in its own process; its wall time and peak memory (of the
command and its children), and from the plan it writes: the step time, the bound, the gap and the seconds each
stage took. Prints a table (median, worst and spread of the gap per case) and writes JSON with the command,
commit, machine, versions and date.

    python3 validation/large_clusters.py --runs 5 --out validation/results/large-clusters.json
    python3 validation/large_clusters.py --cases production-856@dgx-h100-16node:30 --runs 1

Run it alone: on a 2-core machine a second busy process slows the solver and changes its answer.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.common import ROOT, environment, parse_case, write_json  # noqa: E402  (after the path is set)

TIME_BIN = "/usr/bin/time"  # GNU time: peak memory of the command (absent: not recorded)
#: workload@hardware:limit_s, the targets of issue 19
DEFAULT_CASES = ("production-856@dgx-h100-16node:30", "production-856@dgx-h100-16node:60",
                 "synthetic-1000@dgx-h100-32node:60")


def run_once(wl: str, hw: str, limit: float) -> dict:
    """One `placer solve` in a fresh process: wall seconds, peak RSS of it and its children, the plan's numbers."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        argv = [sys.executable, "-m", "placer.cli", "solve", f"hardware_specs/{hw}.yaml", f"workloads/{wl}.yaml",
                "--time-limit", f"{limit:g}", "-q", "-o", str(out)]
        timed = ([TIME_BIN, "-f", "placer-peak-rss-kb %M"] if Path(TIME_BIN).exists() else []) + argv
        t0 = time.perf_counter()
        proc = subprocess.run(timed, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        peak = [line.split()[1] for line in proc.stderr.splitlines() if line.startswith("placer-peak-rss-kb ")]
        row = {"command": " ".join(["placer", *argv[3:-2]]), "exit_code": proc.returncode, "cli_wall_s": wall,
               # the largest resident set of the command or of a child it waited for (GNU time's %M)
               "peak_rss_mb": int(peak[-1]) / 1024 if peak else None}
        if proc.returncode != 0 or not out.exists():
            row["error"] = (proc.stderr or proc.stdout)[-400:]
            return row
        solver = json.loads(out.read_text())["solver"]
    row.update(step_ms=solver["objective_step_time_s"] * 1e3, bound_ms=solver["lower_bound_step_time_s"] * 1e3,
               gap=solver["gap"], status=solver["status"], solver_wall_s=solver["wall_s"],
               stage_times_s=solver.get("stage_times_s"))
    return row


def summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if "gap" in r]
    if not ok:
        return {"runs": len(rows), "ok": 0}
    gaps = sorted(r["gap"] for r in ok)
    med = statistics.median(gaps)
    return {"runs": len(rows), "ok": len(ok), "step_ms": [round(r["step_ms"], 3) for r in ok],
            "gap_median": med, "gap_worst": gaps[-1], "gap_best": gaps[0],
            "worst_within_1pt_of_median": gaps[-1] - med <= 0.01,
            "cli_wall_s_median": statistics.median(r["cli_wall_s"] for r in ok),
            "cli_wall_s_max": max(r["cli_wall_s"] for r in ok),
            "peak_rss_mb_max": max((r["peak_rss_mb"] or 0.0) for r in ok)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), metavar="WL@HW:S")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = ap.parse_args(argv)
    cases = [parse_case(c) for c in args.cases]
    results = {"command": "python3 validation/large_clusters.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "date": _dt.datetime.now().isoformat(timespec="seconds"), "environment": environment(), "cases": []}
    print(f"{'case':45} {'limit':>5} {'run':>3} {'step ms':>8} {'bound ms':>8} {'gap':>6} {'CLI s':>6} {'RSS MB':>7}")
    for wl, hw, limit in cases:
        rows = []
        for i in range(args.runs):
            r = run_once(wl, hw, limit)
            rows.append(r)
            if "gap" in r:
                rss = f"{r['peak_rss_mb']:.0f}" if r["peak_rss_mb"] else "-"
                print(f"{wl + ' @ ' + hw:45} {limit:5g} {i + 1:3} {r['step_ms']:8.3f} {r['bound_ms']:8.3f} "
                      f"{r['gap'] * 100:5.2f}% {r['cli_wall_s']:6.1f} {rss:>7}", flush=True)
            else:
                print(f"{wl + ' @ ' + hw:45} {limit:5g} {i + 1:3} failed: {r.get('error', '')[-200:]}", flush=True)
        s = summary(rows)
        results["cases"].append({"workload": wl, "hardware": hw, "time_limit_s": limit, "summary": s, "runs": rows})
        if s.get("ok"):
            print(f"  -> gap median {s['gap_median'] * 100:.2f}% (best {s['gap_best'] * 100:.2f}%, worst "
                  f"{s['gap_worst'] * 100:.2f}%), CLI median {s['cli_wall_s_median']:.1f} s (max "
                  f"{s['cli_wall_s_max']:.1f} s), peak RSS {s['peak_rss_mb_max']:.0f} MB", flush=True)
        if args.out:
            write_json(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
