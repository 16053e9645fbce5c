"""Idle HBM check (issue 17 part 3): over shipped workload x hardware pairs, does a solved plan leave a table on
host DRAM or UVM while a GPU's HBM that would hold the whole table sits free?

For every host or UVM table (no row in HBM) of the plan and every GPU, the table is moved table-wise onto that
GPU with every row in HBM; where the moved plan fits every memory (priced by the cost model) that is a miss,
split by the cost model's verdict: 'idle' when the moved plan is no slower, 'slower' when it is slower (then
the plan is right to keep the table off HBM). Pairs that are infeasible or on machines with no GPU are skipped;
pairs that take the two-stage path are marked (their tie-break is the local search of
planner/tiebreak_local.py, not the second ILP).

    python3 validation/hbm_idle.py [--time-limit 20] [--only WL@HW ...] [-o validation/results/hbm-idle.json]
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.common import ROOT, environment, git, write_json  # noqa: E402

#: hardware left out by default: no GPU (nothing to fill), or too large for a quick run on a shared machine
SKIP_HW = ("local-cpu-procs", "measured-cpu-2026-11-23", "cpu-server", "dgx-h100-16node", "dgx-h100-32node")


def check_pair(wl_path: Path, hw_path: Path, time_limit: float) -> dict:
    from placer.cost import CostModel
    from placer.errors import InfeasibleError, PlacerError, SpecError
    from placer.plan import Placement, Shard
    from placer.planner.solve import SolveConfig, solve
    from placer.simulate import memory_overflows, phase_times, total_cost
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(wl_path)
    topo = Topology(load_hardware(hw_path), wl.dense.dtype)
    row = {"workload": wl_path.stem, "hardware": hw_path.stem}
    if not topo.gpus:
        return row | {"skipped": "no GPU"}
    t0 = time.perf_counter()
    try:
        plan = solve(topo, wl, SolveConfig(time_limit_s=time_limit))
    except InfeasibleError as exc:
        return row | {"skipped": f"infeasible ({str(exc)[:80]})"}
    except (PlacerError, SpecError) as exc:
        return row | {"skipped": f"error ({str(exc)[:80]})"}
    model = CostModel(topo, wl)
    cost = total_cost(model, plan)
    step = sum(phase_times(model, cost)[0])
    base = model.base_cost.memory
    spare = {}
    for g in topo.gpus:
        m = topo.memory_of(g)
        spare[g] = model.usable_memory[m] - (cost.memory.get(m, 0.0) - base.get(m, 0.0))
    tb = plan.solver.tie_break if plan.solver else None
    off_hbm, idle, slower = [], [], []
    by_name = {t.name: t for t in wl.tables}
    for p in plan.placements:
        if not (p.sharding == "host" or (p.sharding in ("table_wise", "row_wise") and p.hot_fraction == 0)):
            continue
        off_hbm.append(p.table)
        t = by_name[p.table]
        verdict = None
        for g in topo.gpus:
            moved = Placement(table=t.name, sharding="table_wise", precision=p.precision, shards=[
                Shard(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows, host_rows=0)])
            others = [q for q in plan.placements if q.table != t.name]
            c = total_cost(model, plan.model_copy(update={"placements": others + [moved]}))
            if memory_overflows(model, c):
                continue
            s = sum(phase_times(model, c)[0])
            entry = {"table": t.name, "gpu": g, "step_s": s, "delta": s / step - 1}
            if s <= step * (1 + 1e-9):
                verdict = ("idle", entry)
                break
            verdict = verdict or ("slower", entry)
        if verdict:
            (idle if verdict[0] == "idle" else slower).append(verdict[1])
    two_stage = bool(plan.solver and "two-stage" in plan.solver.backend)
    return row | {
        "status": plan.solver.status if plan.solver else None, "two_stage": two_stage,
        "step_s": step, "wall_s": time.perf_counter() - t0, "spare_hbm_bytes": sum(max(v, 0.0) for v in spare.values()),
        "off_hbm_tables": off_hbm, "idle": idle, "slower": slower,
        "tie_break": tb, "robustness": plan.robustness}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--only", "--pairs", nargs="*", metavar="WL@HW", help="just these pairs (file stems); "
                    "write them elsewhere with -o, the default output is the full run's")
    ap.add_argument("--all-hardware", action="store_true", help=f"also {', '.join(SKIP_HW)}")
    ap.add_argument("-o", "--output", default=str(ROOT / "validation" / "results" / "hbm-idle.json"))
    args = ap.parse_args(argv)
    pairs = []
    for wl in sorted((ROOT / "workloads").glob("*.yaml")):
        for hw in sorted((ROOT / "hardware_specs").glob("*.yaml")):
            key = f"{wl.stem}@{hw.stem}"
            if args.only is not None and key not in args.only:
                continue
            if args.only is None and not args.all_hardware and hw.stem in SKIP_HW:
                continue
            pairs.append((wl, hw))
    rows = []
    print(f"{'pair':48s} {'status':9s} {'step ms':>9s} {'wall s':>6s} {'spare GiB':>9s} {'off-HBM':>7s} "
          f"{'idle':>4s} {'slower':>6s}  tie-break slow share before -> after")
    for wl, hw in pairs:
        r = check_pair(wl, hw, args.time_limit)
        rows.append(r)
        key = f"{r['workload']}@{r['hardware']}"
        if "skipped" in r:
            print(f"{key:48s} skipped: {r['skipped']}", flush=True)
            continue
        tb = r["tie_break"]
        tbs = ((f"{tb['share_before']:.4%} -> {tb.get('share_after', tb['share_before']):.4%}"
                + (" (two-stage: local search)" if r["two_stage"] else "")) if tb
               else ("none (two-stage path)" if r["two_stage"] else "none (not run)"))
        print(f"{key:48s} {r['status']:9s} {r['step_s'] * 1e3:9.3f} {r['wall_s']:6.1f} "
              f"{r['spare_hbm_bytes'] / 2**30:9.2f} {len(r['off_hbm_tables']):7d} {len(r['idle']):4d} "
              f"{len(r['slower']):6d}  {tbs}", flush=True)
    checked = [r for r in rows if "skipped" not in r]
    summary = {"pairs": len(rows), "checked": len(checked), "with_idle": sum(1 for r in checked if r["idle"])}
    print(f"{summary['checked']} pairs checked, {summary['with_idle']} with a host/UVM table that idle HBM would hold "
          "at no step-time cost")
    write_json(Path(args.output), {
        "command": "python3 validation/hbm_idle.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(), "time_limit_s": args.time_limit, "summary": summary, "rows": rows})
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
