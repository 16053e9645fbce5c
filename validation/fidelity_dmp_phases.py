#!/usr/bin/env python3
"""DMP's step by phase for the TorchRec campaign (validation/fidelity_torchrec.py ``--profile-steps N``): after the
timed rounds, one more DMP run per plan with N steps under torch.profiler on every rank (dmp_train.train's
``profile_steps``), its profile split into placer's phases (placer/torchrec_io/dmp_phases.py) beside placer's price
of the plan re-cut the same way; per workload, measured / priced per phase summed over its plans.

The profiled run is a process of its own (this file as a script, like examples/train_torchrec.py for the timed
rounds), so that a hung or aborted rank costs the row its phases, not the campaign:

    python3 validation/fidelity_dmp_phases.py EXPORT.torchrec.json WORKLOAD.yaml --profile-steps 5   # JSON
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: steps before the profiled ones (the first builds the optimizers' state; the profile starts warm)
WARMUP = 2


def profiled(export: Path, wl_path: Path, profile_steps: int, timeout: float = 900.0) -> dict:
    """One DMP run of ``export`` on the workload with ``profile_steps`` profiled steps (a process of its own):
    dmp_phases.measured's fields and ``profile_ops_s`` (the slowest rank's operators: [self s, calls] per step);
    or ``measured_phases_error``: why not."""
    cmd = [sys.executable, str(Path(__file__).resolve()), str(export), str(wl_path),
           "--profile-steps", str(profile_steps)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"measured_phases_error": f"the profiled run took over {timeout:.0f} s"}
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()] or ["no output"]
        return {"measured_phases_error": f"exit {r.returncode}: {lines[-1][-300:]}"}
    return json.loads(r.stdout)


def phase_fields(model, plan_path: Path, got: dict) -> dict:
    """A row's phase fields from ``got`` (profiled): the measured ones, ``priced_phases_dmp_s`` (placer's phases
    re-cut as the profile is: dmp_phases.priced_phases) and ``phases`` ({key: {measured_s, predicted_s}}, what
    fidelity_report.phase_errors sums over all plans)."""
    from placer.plan import load_plan
    from placer.torchrec_io.dmp_phases import priced_phases

    if "measured_phases_s" not in got:
        return got
    priced = priced_phases(model, load_plan(plan_path))
    return {**got, "priced_phases_dmp_s": priced,
            "phases": {k: {"measured_s": got["measured_phases_s"][k], "predicted_s": priced[k]} for k in priced}}


def phase_table(rows: list[dict]) -> dict | None:
    """One workload's rows: per phase key, measured and priced (re-cut) seconds summed over the plans that have
    both, and measured / priced (None where priced is 0); ``plans``: how many; ``profile_over_step``: the profiles'
    total self time over the plans' measured steps (what the profile does not see: module docstring of
    dmp_phases); ``failed``: the plans whose profiled run failed, and why. None when no plan has phases."""
    mine = [r for r in rows if "measured_phases_s" in r and "priced_phases_dmp_s" in r]
    failed = {r["name"]: r["measured_phases_error"] for r in rows if "measured_phases_error" in r}
    if not mine:
        return {"plans": 0, "failed": failed} if failed else None
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in mine:
        for k, v in r["priced_phases_dmp_s"].items():
            acc[k][0] += r["measured_phases_s"][k]
            acc[k][1] += v
    return {"plans": len(mine),
            "profile_over_step": sum(r["profile_total_s"] for r in mine) / sum(r["measured_step_time_s"] for r in mine),
            "phases": {k: {"measured_s": m, "priced_s": p, "measured_over_priced": m / p if p > 0 else None}
                       for k, (m, p) in acc.items()},
            "unclassified": sorted({n for r in mine for n in r.get("unclassified", [])}), "failed": failed}


def phase_lines(per_workload: dict) -> list[str]:
    """Markdown: per workload and phase, measured / priced summed over its plans (the ms of both beside)."""
    tables = [(wl, w["dmp_phases"]) for wl, w in per_workload.items() if w.get("dmp_phases")]
    failed = [f"{wl} {name} ({why[:80]})" for wl, t in tables for name, why in t["failed"].items()]
    mine = [(wl, t) for wl, t in tables if t["plans"]]
    if not mine:
        return ["", "DMP's step by phase: every profiled run failed: " + "; ".join(failed)] if failed else []
    keys = list(mine[0][1]["phases"])
    lines = ["", "DMP's step by phase (one profiled run per plan after the rounds: the slowest rank's operators by "
             "self CPU time, placer/torchrec_io/dmp_phases.py), measured / priced summed over each workload's plans "
             "(priced: placer's phases re-cut as the profile is; measured ms / priced ms):", "",
             "| workload | plans | profile / step | " + " | ".join(keys) + " |",
             "|---|---:|---:|" + "---:|" * len(keys)]
    for wl, t in mine:
        cells = []
        for k in keys:
            v = t["phases"][k]
            ratio = "-" if v["measured_over_priced"] is None else f"**{v['measured_over_priced']:.2f}**"
            cells.append(f"{ratio} ({v['measured_s'] * 1e3:.1f} / {v['priced_s'] * 1e3:.1f})")
        lines.append(f"| {wl} | {t['plans']} | {t['profile_over_step']:.2f} | " + " | ".join(cells) + " |")
    if failed:
        lines += ["", "Profiled runs that failed: " + "; ".join(failed)]
    odd = sorted({n for _, t in mine for n in t["unclassified"]})
    if odd:
        lines += ["", "Operators no rule knows (in `other`): " + ", ".join(f"`{n}`" for n in odd[:20])
                  + (f" and {len(odd) - 20} more" if len(odd) > 20 else "")]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="one DMP run with profiled steps, its phases as JSON")
    ap.add_argument("export", help="placer export --torchrec --device cpu JSON")
    ap.add_argument("workload", help="the workload spec (batches and the dense model)")
    ap.add_argument("--profile-steps", type=int, default=5, help="steps under torch.profiler (default 5)")
    args = ap.parse_args(argv)

    from placer.errors import PlacerError
    from placer.specs import load_workload
    from placer.torchrec_io.dmp_phases import measured
    from placer.torchrec_io.dmp_train import train

    steps = max(args.profile_steps, 1)
    try:
        doc = json.loads(Path(args.export).read_text())
        res = train(doc, load_workload(args.workload), steps=1, warmup=WARMUP, profile_steps=steps)
    except (PlacerError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = measured(res["ops_per_rank"])
    out["profile_ops_s"] = res["ops_per_rank"][out["measured_phases_rank"]]
    out["profile_steps"] = steps
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
