"""Where a two-stage plan's gap lies (issue 19): between the bound and stage 1's own choice (the aggregated
model's gap: what stage 1's bound tree left open), and between that choice and the plan stage 2 makes of it
(what the aggregated rows do not see of placing tables on devices). Per phase: stage 1's phase time for its
choice, the plan's busiest resource, the spread of the plan's GPU streams (mean, least, most) and what the
fused groups' fixed costs add to a stream on average (each GPU pays a group's fixed costs once per group it
opens). Runs the stages in this process with fixed budgets (not the CLI's split of one limit), so its numbers
are a diagnosis, not the targets (validation/large_clusters.py measures those). Prints a table and writes JSON
with the command, commit, machine, versions and date.

    python3 validation/gap_split.py production-856@dgx-h100-16node --out validation/results/gap-split.json

Run it alone: stage 1 and stage 2 are time-boxed, and a busy machine changes their answers.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.common import ROOT, environment, write_json  # noqa: E402  (after the path is set)


def split(wl: str, hw: str, stage1_s: float, stage2_s: float) -> dict:
    """The gap of ``wl`` on ``hw`` taken apart (times in ms): see the module docstring."""
    from placer.cost import PHASES, CostModel
    from placer.options import OptionConfig
    from placer.planner.accumulator import Accumulator
    from placer.planner.assign import Assigner
    from placer.planner.budget import Budget
    from placer.planner.context import Context
    from placer.planner.fit import with_fit_levels
    from placer.planner.kinds import KindFolder
    from placer.planner.stage1 import solve_stage1
    from placer.planner.symmetry import Symmetry
    from placer.planner.stage2 import place_choice  # one stage-1 choice through stage 2, as solve_two_stage does
    from placer.specs.hardware import load_hardware
    from placer.specs.workload import load_workload
    from placer.topology import Topology

    topo = Topology(load_hardware(ROOT / f"hardware_specs/{hw}.yaml"))
    model = CostModel(topo, load_workload(ROOT / f"workloads/{wl}.yaml"))
    ctx = Context.of(model, Symmetry.of(topo), with_fit_levels(model, OptionConfig()))
    t0 = time.perf_counter()
    kinds = KindFolder(ctx).kinds()
    t1 = time.perf_counter()
    stage1 = solve_stage1(ctx, kinds, Budget(stage1_s), gap=0.005, backend="cbc", threads=None)
    t2 = time.perf_counter()
    if stage1.result.chosen is None:
        raise SystemExit(f"{wl}@{hw}: stage 1 found no choice in {stage1_s:g} s")
    placed = place_choice(Assigner(ctx), stage1.problem, kinds, stage1.result.chosen, Budget(stage2_s))
    placements, step_s = placed.placements, placed.step_s
    t3 = time.perf_counter()
    if not placements:
        raise SystemExit(f"{wl}@{hw}: stage 2 placed no plan in {stage2_s:g} s")
    acc = Accumulator(model)
    fixed_per_stream: dict[tuple[int, str], dict] = {}
    for p in placements:
        cost = model.placement_cost(p)
        acc.add(cost)
        for group, charges in cost.once.items():
            for key, seconds in charges.items():
                if key[1].endswith(":stream"):
                    fixed_per_stream.setdefault(key, {})[group] = seconds
    streams = [r for r in topo.resources if r.endswith(":stream")]
    fixed_s = sum(model.fixed_latency_s.values())
    chosen_times = stage1.problem.phase_times(stage1.result.chosen)
    phases = []
    for ph, name in enumerate(PHASES):
        loads = acc.load_array[acc.index.phase(ph)]
        busiest = int(np.argmax(loads))
        on_streams = np.array([acc.loads[(ph, r)] for r in streams])
        fixed = np.array([sum(fixed_per_stream.get((ph, r), {}).values()) for r in streams])
        groups = np.array([len(fixed_per_stream.get((ph, r), {})) for r in streams])
        phases.append({"phase": name, "stage1_choice_ms": chosen_times[ph] * 1e3, "plan_ms": loads[busiest] * 1e3,
                       "plan_busiest": acc.index.keys[acc.index.phase(ph).start + busiest][1],
                       "streams_mean_ms": on_streams.mean() * 1e3, "streams_min_ms": on_streams.min() * 1e3,
                       "streams_max_ms": on_streams.max() * 1e3, "group_fixed_mean_ms": fixed.mean() * 1e3,
                       "groups_per_stream_mean": float(groups.mean())})
    bound, choice, plan = (stage1.result.lower_bound_s * 1e3, stage1.problem.objective(stage1.result.chosen) * 1e3,
                           (step_s + fixed_s) * 1e3)
    return {"case": f"{wl}@{hw}", "stage1_s": stage1_s, "stage2_s": stage2_s, "bound_ms": bound,
            "stage1_choice_ms": choice, "plan_ms": plan, "gap": (plan - bound) / plan,
            "stage1_gap": (choice - bound) / plan, "stage2_loss": (plan - choice) / plan,
            "wall_s": {"kinds": t1 - t0, "stage1": t2 - t1, "stage2": t3 - t2}, "phases": phases}


def show(r: dict) -> None:
    print(f"{r['case']}: bound {r['bound_ms']:.3f} ms, stage 1's choice {r['stage1_choice_ms']:.3f} ms, plan "
          f"{r['plan_ms']:.3f} ms: gap {r['gap']:.2%} = stage 1's own {r['stage1_gap']:.2%} + stage 2's loss "
          f"{r['stage2_loss']:.2%}  (stage 1 {r['wall_s']['stage1']:.1f} s, stage 2 {r['wall_s']['stage2']:.1f} s)")
    print(f"{'phase':20s} {'stage 1':>8s} {'plan':>8s} {'streams: mean':>14s} {'least':>7s} {'most':>7s} "
          f"{'groups':>7s} {'their fixed':>11s}  busiest")
    for p in r["phases"]:
        print(f"{p['phase']:20s} {p['stage1_choice_ms']:8.3f} {p['plan_ms']:8.3f} {p['streams_mean_ms']:14.3f} "
              f"{p['streams_min_ms']:7.3f} {p['streams_max_ms']:7.3f} {p['groups_per_stream_mean']:7.2f} "
              f"{p['group_fixed_mean_ms']:11.3f}  {p['plan_busiest']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", metavar="WL@HW")
    ap.add_argument("--stage1-seconds", type=float, default=40.0, help="stage 1's budget (default 40: about what a "
                    "60 s CLI limit leaves it on production-856 @ dgx-h100-16node)")
    ap.add_argument("--stage2-seconds", type=float, default=15.0, help="stage 2's budget (default 15)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = ap.parse_args(argv)
    rows = []
    for case in args.cases:
        try:
            wl, hw = case.split("@")
        except ValueError:
            raise SystemExit(f"cases: expected WORKLOAD@HARDWARE, got {case!r}") from None
        rows.append(split(wl, hw, args.stage1_seconds, args.stage2_seconds))
        show(rows[-1])
    if args.out:
        write_json(args.out, {"command": "python3 validation/gap_split.py " + " ".join(argv or sys.argv[1:]),
                              "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                              **environment(), "rows": rows})
        print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
