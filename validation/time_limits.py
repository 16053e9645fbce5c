"""Does ``placer solve --time-limit L`` hold (issue 36 item 3)? Runs every shipped workload x hardware pair
(workloads/*.yaml x hardware_specs/*.yaml) and a 10,000-table workload (small tables, written here: see
small_tables_yaml) on dgx-h100 at each limit L as a CLI process, and prints a table: pair, L, wall seconds,
exit code, the method that returned the plan (the ILP, or which baseline), and whether it ended past L + 1 s.
Writes validation/results/time-limits-<date>.json with the command, commit, machine and date.

    python3 validation/time_limits.py                  # L = 5 and 10, every pair (about 20-30 min)
    python3 validation/time_limits.py --limits 5 --pairs production-856@dgx-h100,small-10000@dgx-h100

A limit that holds on a loaded machine holds on an idle one; the JSON records the load average before and after.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.common import ROOT, environment, write_json  # noqa: E402  (after the path is set)

#: The extra workload: this many small tables (rows 10^U(2, 5), dims 8-32), planned on dgx-h100.
SMALL_TABLES = 10_000
SMALL_NAME = f"small-{SMALL_TABLES}"
SMALL_HARDWARE = "dgx-h100"
#: Slack past the limit that counts as holding it (s): the issue's target, L + 1 s.
SLACK_S = 1.0


def small_tables_yaml(n: int = SMALL_TABLES, seed: int = 0) -> str:
    """A synthetic workload of ``n`` small tables (rows 10^U(2, 5), dims 8/16/32, one-hot, zipf 1.05), as YAML."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = np.round(10 ** rng.uniform(2, 5, n)).astype(int)
    dims = rng.choice([8, 16, 32], n)
    lines = ["schema_version: 1", f"name: small-{n}",
             f"description: SYNTHETIC, {n} small tables (rows 10^U(2,5), dims 8-32) for time-limit checks",
             "batch_size: 65536", "optimizer: {name: rowwise_adagrad, lr: 0.01}", "tables:"]
    lines += [f"  - {{name: t{i:05d}, rows: {rows[i]}, dim: {dims[i]}, pooling_factor: 1, "
              "access: {kind: zipf, alpha: 1.05}}" for i in range(n)]
    lines += ["dense:", "  num_dense_features: 13", "  bottom_mlp: [512, 256, 64]", "  interaction: {kind: concat}",
              "  top_mlp: [1024, 1]", "  dtype: bf16"]
    return "\n".join(lines) + "\n"


def _method(plan: dict) -> str:
    """Which planner's placements the plan is: 'ilp', 'two_stage', or a baseline's name."""
    note = (plan.get("solver") or {}).get("note") or ""
    m = re.search(r"plan from (\w+)", note)
    return m.group(1) if m else plan.get("method", "?")


def run_one(hw: Path, wl: Path, limit: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        argv = [sys.executable, "-m", "placer.cli", "solve", str(hw), str(wl), "--time-limit", f"{limit:g}", "-q",
                "-o", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        row = {"pair": f"{wl.stem}@{hw.stem}", "limit_s": limit, "wall_s": round(wall, 2),
               "exit_code": proc.returncode, "over": wall > limit + SLACK_S,
               "stderr_first_line": (proc.stderr.strip().splitlines() or [""])[0][:300]}
        if proc.returncode == 0 and out.exists():
            plan = json.loads(out.read_text())
            s = plan["solver"]
            row.update(method=_method(plan), step_ms=round(plan["predicted"]["step_time_s"] * 1e3, 4),
                       solve_wall_s=round(s.get("wall_s") or 0.0, 2), ran_out=s.get("ran_out"),
                       what_ifs="skipped" if "skipped" in (plan.get("robustness") or {}) else "priced")
        else:
            row["method"] = "-"
            row["error"] = proc.stderr.strip()[-300:]
        return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", default="5,10", help="comma-separated time limits, s (default 5,10)")
    ap.add_argument("--pairs", default=None, help="only these WORKLOAD@HARDWARE pairs, comma-separated")
    ap.add_argument("--out", default=None, help="JSON path (default validation/results/time-limits-<date>.json)")
    args = ap.parse_args(argv)
    limits = [float(x) for x in args.limits.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / f"{SMALL_NAME}.yaml"
        small.write_text(small_tables_yaml())
        pairs = [(hw, wl) for wl in sorted((ROOT / "workloads").glob("*.yaml"))
                 for hw in sorted((ROOT / "hardware_specs").glob("*.yaml"))]
        pairs.append((ROOT / "hardware_specs" / f"{SMALL_HARDWARE}.yaml", small))
        if args.pairs:
            wanted = set(args.pairs.split(","))
            pairs = [(hw, wl) for hw, wl in pairs if f"{wl.stem}@{hw.stem}" in wanted]
        load_before = os.getloadavg()
        rows = []
        print(f"{'pair':48} {'L':>4} {'wall s':>7} {'exit':>4}  {'method':12} over L+1 s?", flush=True)
        for limit in limits:
            for hw, wl in pairs:
                row = run_one(hw, wl, limit)
                rows.append(row)
                print(f"{row['pair']:48} {limit:4g} {row['wall_s']:7.2f} {row['exit_code']:4d}  {row['method']:12} "
                      f"{'OVER' if row['over'] else 'no'}", flush=True)
    over = [r for r in rows if r["over"]]
    print(f"{len(over)} of {len(rows)} runs ended past L + {SLACK_S:g} s; load average before "
          f"{load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    date = _dt.date.today().isoformat()
    out = Path(args.out) if args.out else ROOT / "validation" / "results" / f"time-limits-{date}.json"
    write_json(out, {"command": " ".join(["python3", "validation/time_limits.py", *(argv or sys.argv[1:])]),
                     "date": _dt.datetime.now().isoformat(timespec="seconds"), "environment": environment(),
                     "load_average_before": load_before, "load_average_after": os.getloadavg(),
                     "slack_s": SLACK_S, "small_workload": {"tables": SMALL_TABLES, "hardware": SMALL_HARDWARE},
                     "runs": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
