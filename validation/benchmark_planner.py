#!/usr/bin/env python3
"""Planner benchmark: every method on a grid of workloads x hardware (1..256 GPUs), same cost model.

For every case (workload, hardware) it runs the baselines in one subprocess and the ILP in another, each
under a wall-clock limit (a hang is killed, and the row says ``timeout``), and records per method: step time,
lower bound, gap, status, solve wall time and the peak resident memory of the subprocess (``wait4``'s
ru_maxrss: the max over the solve process and the solver process it starts). Every outcome is a row:
``optimal``, ``feasible``, ``heuristic`` (a baseline, or TorchRec's planner), ``infeasible`` (does not fit),
``no_solution``, ``failed`` (TorchRec's planner found no plan placer can use), ``timeout``, ``error``,
``skipped``. Nothing crashes the whole run. Where torchrec is installed, the ``torchrec`` method (TorchRec's
EmbeddingShardingPlanner on the same machine and workload, its plan priced by placer's model) runs in a child of
its own, and the report's headline is ILP vs TorchRec per case with both planning times.

Results are merged into validation/results/planner-benchmark.json (rows of cases not run this time are
kept) and written after every case, so an interrupted run can go on with ``--resume``; the markdown report
validation/results/planner-benchmark.md is rebuilt from all rows.

    python3 validation/benchmark_planner.py                      # the full grid (see docs/benchmark.md)
    python3 validation/benchmark_planner.py --quick              # smoke test, < 60 s
    python3 validation/benchmark_planner.py --cases 16node,32node --time-limit 120   # re-run the big cases
    python3 validation/benchmark_planner.py --resume             # finish an interrupted run
    python3 validation/benchmark_planner.py --report-only        # rebuild the markdown from the JSON
"""
from __future__ import annotations

import argparse
import datetime as _dt
import fnmatch
import importlib.util
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from validation.common import environment, write_json  # noqa: E402  (after the path is set)
from validation.planner_report import (  # noqa: E402
    BASELINE_METHODS, HARDWARE, SOLVED, WORKLOADS, render_markdown)

RESULTS = ROOT / "validation" / "results"
QUICK_CASES = [("tiny", "h100-pcie-host"), ("tiny", "dgx-h100"), ("criteo-kaggle-dlrm", "h100-pcie-host"),
               ("mlperf-dlrm-v1", "h100-pcie-host")]
#: TorchRec's own EmbeddingShardingPlanner (placer/torchrec_io/planner.py), where torchrec is installed; its
#: plan is not on the ILP's menu, so the headline compares the ILP with it case by case
TORCHREC = importlib.util.find_spec("torchrec") is not None
#: the order the baselines run in: the ones that are O(tables x GPUs) first, O(tables x GPUs^2) last
BASELINE_ORDER = ["host_cpu", "fae", "round_robin", "random", "uvm", "greedy_size"]
METHODS = ["ilp"] + BASELINE_METHODS + (["torchrec"] if TORCHREC else [])
#: methods that run in a child of their own (the others share one)
OWN_CHILD = ("ilp", "torchrec")
#: statuses a --resume run tries again
RETRY = ("error",)
ROW_MARK = "@@row "
READY_MARK = "@@ready"


# ---------------------------------------------------------------------------------------------------------
# child processes: one solve each, rows printed as JSON lines
# ---------------------------------------------------------------------------------------------------------

def _rss_self() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _emit(row: dict) -> None:
    sys.stdout.write(ROW_MARK + json.dumps(row) + "\n")
    sys.stdout.flush()


def _plan_row(plan, wall: float) -> dict:
    s = plan.solver
    pred = plan.predicted
    return {"step_time_s": pred["step_time_s"], "throughput_samples_per_s": pred["throughput_samples_per_s"],
            "bottleneck": pred.get("bottleneck"), "status": s.status, "gap": s.gap,
            "lower_bound_step_time_s": s.lower_bound_step_time_s, "solve_wall_s": wall,
            "num_variables": s.num_variables, "num_constraints": s.num_constraints,
            "warm_start": s.warm_start if s.warm_start not in (None, "none") else None}


def child_main(args) -> int:
    """Solve one case with the given methods; print one row per method."""
    from placer.errors import InfeasibleError, PlacerError
    from placer.planner.solve import SolveConfig, solve
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    from placer.cost import CostModel

    wl = load_workload(args.workload)
    topo = Topology(load_hardware(args.hardware), wl.dense.dtype)
    # the dense step traced before any clock starts: torch's imports (about 4 s) are the process's, once, not a
    # method's; a solve's least-work estimate counts them where no trace is at hand (planner/least_work.py)
    CostModel(topo, wl).builder.dense_trace(topo.gpus[0])
    sys.stdout.write(READY_MARK + "\n")  # the first method's clock starts after loading
    sys.stdout.flush()
    for method in args.methods.split(","):
        print(f"[child] {method}: start", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        cfg = SolveConfig(method=method, solver=args.solver, time_limit_s=args.time_limit, gap=args.gap,
                          threads=args.threads)
        try:
            row = _plan_row(solve(topo, wl, cfg), time.perf_counter() - t0)
        except InfeasibleError as exc:
            row = {"status": "infeasible", "note": str(exc)}
        except PlacerError as exc:
            if method == "torchrec" and str(exc).startswith("torchrec planner failed"):
                row = {"status": "failed", "note": str(exc)}
                row.setdefault("solve_wall_s", time.perf_counter() - t0)
                row.update(method=method, peak_rss_bytes=_rss_self())
                _emit(row)
                continue
            status = "no_solution" if "found no solution" in str(exc) else "error"
            row = {"status": status, "note": f"{type(exc).__name__}: {exc}"}
        except MemoryError:
            row = {"status": "error", "note": "MemoryError"}
        except Exception as exc:  # a bug: record it, go on with the next method
            row = {"status": "error", "note": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc(limit=6)}
        row.setdefault("solve_wall_s", time.perf_counter() - t0)
        row.update(method=method, peak_rss_bytes=_rss_self())
        _emit(row)
        print(f"[child] {method}: {row['status']} in {row['solve_wall_s']:.1f} s", file=sys.stderr, flush=True)
    return 0


# ---------------------------------------------------------------------------------------------------------
# the parent: grid, subprocesses with limits, merge, report
# ---------------------------------------------------------------------------------------------------------

def run_child(hw: Path, wl: Path, methods: list[str], args, timeout_s: float, log) -> tuple[list[dict], dict]:
    """Run a child solving ``methods`` in turn; each method gets ``timeout_s`` of wall clock (counted from
    the previous method's row), after which the child is killed. Returns (rows it printed, process info).
    Never raises for the child's own failures: a kill or a crash is reported in the info."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--hardware", str(hw), "--workload",
           str(wl), "--methods", ",".join(methods), "--time-limit", str(args.time_limit), "--gap", str(args.gap),
           "--solver", args.solver] + (["--threads", str(args.threads)] if args.threads else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryFile("w+b") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env=env, start_new_session=True)
        killed = False
        seen_rows, last_row_t = 0, t0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.perf_counter()
            n = _count_rows(out)
            if n > seen_rows:
                seen_rows, last_row_t = n, now
            if now - last_row_t > timeout_s:
                killed = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its solver
                except ProcessLookupError:
                    pass
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
        rows = [json.loads(line[len(ROW_MARK):]) for line in text.splitlines() if line.startswith(ROW_MARK)]
        err.seek(0)
        stderr_tail = err.read()[-2000:]
    info = {"killed": killed, "returncode": proc.returncode, "wall_s": wall, "peak_rss_bytes": usage.ru_maxrss * 1024,
            "stderr_tail": stderr_tail, "since_last_row_s": wall - (last_row_t - t0)}
    if proc.returncode not in (0, None) and not killed:
        log(f"    child exited {proc.returncode}: {_last_line(stderr_tail)}")
    return rows, info


def _count_rows(f) -> int:
    f.seek(0)
    return f.read().count(b"@@")  # rows and the ready mark: each starts a method's clock


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def fit_check(hw_path: Path, wl_path: Path) -> tuple[dict, str | None]:
    """(facts about the case, a reason it cannot fit or None). Cheap: no options, no costs per option."""
    from placer.cost import CostModel
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology
    from placer.units import GiB, element_bytes

    wl = load_workload(wl_path)
    topo = Topology(load_hardware(hw_path), wl.dense.dtype)
    model = CostModel(topo, wl)
    need = 0.0
    for t in wl.tables:
        precs = ["fp16"] if t.dtype == "fp16" else (["fp32", "fp16"] if t.allow_fp16 else ["fp32"])
        state = model.state_factor[t.name] * t.dim * 4
        need += min(t.rows * (t.dim * element_bytes(p) + state) for p in precs)
    hold = sum(max(v, 0.0) for v in model.usable_memory.values())
    facts = {"gpus": len(topo.gpus), "nodes": len(topo.nodes), "tables": len(wl.tables),
             "table_bytes_min": need, "usable_bytes": hold}
    if need > hold:
        return facts, (f"does not fit: tables need at least {need / GiB:,.1f} GiB, the {len(topo.gpus)} GPU(s) + "
                       f"{len(topo.hosts)} host(s) hold {hold / GiB:,.1f} GiB for tables")
    return facts, None


def _resolve(kind: str, name: str) -> Path:
    p = Path(name)
    if p.suffix in (".yaml", ".yml", ".json") or p.exists():
        return p if p.is_absolute() else (Path.cwd() / p)
    return ROOT / kind / f"{name}.yaml"


def _matches(case_id: str, patterns: list[str]) -> bool:
    """A pattern with '@' or a glob character matches the whole id; otherwise it is a substring."""
    for pat in patterns:
        if "@" in pat or any(ch in pat for ch in "*?["):
            if fnmatch.fnmatchcase(case_id, pat):
                return True
        elif pat in case_id:
            return True
    return False


def load_results(path: Path) -> dict:
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            pass
    return {"schema": "placer-planner-benchmark/1", "runs": [], "rows": []}


def run_case(wl_name: str, hw_name: str, methods: list[str], args, run_id: str, log,
             history: dict[tuple[str, str], dict[str, int]]) -> list[dict]:
    """All rows of one case (one per method)."""
    hw, wl = _resolve("hardware_specs", hw_name), _resolve("workloads", wl_name)
    base = {"workload": wl_name, "hardware": hw_name, "run": run_id}
    if not wl.exists() or not hw.exists():
        missing = wl if not wl.exists() else hw
        shown = missing.relative_to(ROOT) if missing.is_relative_to(ROOT) else missing
        return [dict(base, method=m, status="skipped", note=f"file not found: {shown}")
                for m in methods]
    try:
        facts, reason = fit_check(hw, wl)
    except Exception as exc:
        return [dict(base, method=m, status="error", note=f"loading: {type(exc).__name__}: {exc}") for m in methods]
    base.update(gpus=facts["gpus"], nodes=facts["nodes"], tables=facts["tables"])
    if reason:
        return [dict(base, method=m, status="infeasible", note=reason, solve_wall_s=0.0) for m in methods]
    rows = []
    # baselines first (fastest first), one child for all; a child killed at the limit is started again
    # for the methods after the one that ran out of time. Then the ILP in its own child.
    queue = [m for m in BASELINE_ORDER if m in methods] + [m for m in ("torchrec", "ilp") if m in methods]
    while queue:
        m = queue[0]
        limit = _skip_limit(history, m, wl_name, facts["gpus"], args)
        if limit is not None:
            # a method that ran out of time on fewer GPUs for this workload (and never got a plan on as
            # many) will run out on more: skip it
            rows.append(dict(base, method=m, status="skipped",
                             note=f"timed out at {limit} GPUs for this workload (--no-skip-larger to try)"))
            queue.pop(0)
            continue
        group = [m] if m in OWN_CHILD else [x for x in queue if x not in OWN_CHILD
                                            and _skip_limit(history, x, wl_name, facts["gpus"], args) is None]
        timeout = args.case_timeout if m in OWN_CHILD else args.baseline_timeout
        t0 = time.perf_counter()
        got, info = run_child(hw, wl, group, args, timeout, log)
        by_method = {r["method"]: r for r in got}
        for x in group:
            if x in by_method:
                r = dict(base, **by_method[x])
                if x == "ilp":
                    r["peak_rss_bytes"] = info["peak_rss_bytes"]  # wait4: includes the CBC process
                rows.append(r)
                queue.remove(x)
                if r.get("status") in SOLVED:
                    h = history.setdefault((x, wl_name), {})
                    h["ok"] = max(h.get("ok", 0), facts["gpus"])
                continue
            if info["killed"]:  # x was running when the limit hit; the ones after it start again
                rows.append(dict(base, method=x, status="timeout", solve_wall_s=info["since_last_row_s"],
                                 peak_rss_bytes=info["peak_rss_bytes"],
                                 note=f"killed after {timeout:g} s; last output: {_last_line(info['stderr_tail'])}"))
                h = history.setdefault((x, wl_name), {})
                h["timeout"] = min(h.get("timeout", 10**9), facts["gpus"])
            else:
                rows.append(dict(base, method=x, status="error", peak_rss_bytes=info["peak_rss_bytes"],
                                 solve_wall_s=time.perf_counter() - t0,
                                 note=f"process exited {info['returncode']}: {_last_line(info['stderr_tail'])}"))
            queue.remove(x)
            break  # start a new child for the rest
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(rows, key=lambda r: order.get(r["method"], 99))


def _skip_limit(history, method: str, wl_name: str, gpus: int, args) -> int | None:
    """The GPU count where ``method`` timed out on ``wl_name`` if that predicts a timeout on ``gpus``."""
    h = history.get((method, wl_name), {})
    limit = h.get("timeout")
    if limit is None or gpus <= limit or h.get("ok", 0) >= limit or args.no_skip_larger:
        return None
    return limit


def grid(args) -> list[tuple[str, str]]:
    if args.quick:
        cases = list(QUICK_CASES)
    else:
        wls = args.workloads.split(",") if args.workloads else WORKLOADS
        hws = args.hardware_list.split(",") if args.hardware_list else HARDWARE
        cases = [(w, h) for h in hws for w in wls]  # hardware-major: smaller machines first
    if args.cases:
        cases = [c for c in cases if _matches(f"{c[0]}@{c[1]}", args.cases.split(","))]
    return cases


def main_parent(args) -> int:
    out_dir = Path(args.out) if args.out else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "planner-benchmark-quick" if args.quick and not args.out else "planner-benchmark"
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    data = {"schema": "placer-planner-benchmark/1", "runs": [], "rows": []} if args.fresh else load_results(json_path)
    if args.report_only:
        md_path.write_text(render_markdown(data))
        print(f"wrote {md_path}")
        return 0
    methods = args.methods.split(",") if args.methods else list(METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        print(f"unknown method(s): {', '.join(unknown)}; choose from {', '.join(METHODS)}", file=sys.stderr)
        return 2
    cases = grid(args)
    if not cases:
        print("no case matches --cases", file=sys.stderr)
        return 2
    run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = "python3 " + " ".join(shlex.quote(a) for a in
                                    [os.path.relpath(Path(__file__).resolve(), ROOT)] + sys.argv[1:])
    run = {"id": run_id, "command": command, "date": run_id, "time_limit_s": args.time_limit,
           "case_timeout_s": args.case_timeout,
           "baseline_timeout_s": args.baseline_timeout, "max_minutes": args.max_minutes, "gap": args.gap,
           "solver": args.solver, "threads": args.threads,
           "methods": methods, "cases": [f"{w}@{h}" for w, h in cases], **environment()}
    data["runs"].append(run)
    done = {(r["workload"], r["hardware"], r["method"]) for r in data["rows"]
            if r.get("status") not in RETRY and not r.get("retry")}
    log_file = open(args.log, "a") if args.log else None

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)
        if log_file:
            log_file.write(msg + "\n")
            log_file.flush()

    log(f"[{run_id}] {command}: {len(cases)} case(s), methods {','.join(methods)}, time limit {args.time_limit:g} s, "
        f"ILP limit {args.case_timeout:g} s, baseline limit {args.baseline_timeout:g} s -> {json_path}")
    history: dict[tuple[str, str], dict[str, int]] = {}  # (method, workload) -> GPUs where it timed out / solved
    t_all = time.perf_counter()
    for i, (w, h) in enumerate(cases, 1):
        todo = [m for m in methods if not (args.resume and (w, h, m) in done)]
        if not todo:
            log(f"[{i}/{len(cases)}] {w} @ {h}: done before, skipped (--resume)")
            continue
        t0 = time.perf_counter()
        if args.max_minutes and t0 - t_all > 60 * args.max_minutes:
            note = (f"the run's budget of {args.max_minutes:g} min was used up before this case; "
                    "finish with --resume or run it with --cases")
            rows = [{"workload": w, "hardware": h, "run": run_id, "method": m, "status": "skipped", "note": note,
                     "retry": True} for m in todo]
        else:
            rows = run_case(w, h, todo, args, run_id, log, history)
        data["rows"] = [r for r in data["rows"] if not (r["workload"] == w and r["hardware"] == h
                                                          and r["method"] in todo)] + rows
        write_json(json_path, data)
        md_path.write_text(render_markdown(data))
        summary = ", ".join(f"{r['method']} {r['status']}" + (f" {r['step_time_s'] * 1e3:.3g} ms"
                                                               if r.get("step_time_s") else "") for r in rows)
        log(f"[{i}/{len(cases)}] {w} @ {h} ({rows[0].get('gpus', '?')} GPUs): {summary} "
            f"[{time.perf_counter() - t0:.0f} s]")
    run["total_wall_s"] = time.perf_counter() - t_all
    write_json(json_path, data)
    md_path.write_text(render_markdown(data))
    log(f"done in {run['total_wall_s']:.0f} s: {json_path}, {md_path}")
    return 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="a small grid for a smoke test (< 60 s)")
    ap.add_argument("--cases", help="comma-separated filters on 'workload@hardware': substrings, or globs "
                                    "(e.g. '16node,32node' or 'synthetic-1000@*')")
    ap.add_argument("--workloads", help="comma-separated workload names or paths (default: the standard list)")
    ap.add_argument("--hardware", dest="hardware_list", help="comma-separated hardware names or paths")
    ap.add_argument("--methods", help=f"comma-separated subset of {','.join(METHODS)} (default all)")
    ap.add_argument("--time-limit", type=float, default=None, help="ILP solver time limit per case, s "
                                                                   "(default 30; --quick 5)")
    ap.add_argument("--case-timeout", type=float, default=None,
                    help="wall-clock limit of each ILP subprocess, s, after which it is killed and recorded as "
                         "timeout (default max(240, 4 x time limit); --quick 60)")
    ap.add_argument("--baseline-timeout", type=float, default=None,
                    help="wall-clock limit of each baseline, s (default 60; --quick 30)")
    ap.add_argument("--max-minutes", type=float, default=50.0,
                    help="start no new case after this many minutes; the rest are recorded as skipped and can be "
                         "finished with --resume (default 50; 0 = no limit)")
    ap.add_argument("--gap", type=float, default=0.005, help="relative gap the ILP stops at (default 0.005)")
    ap.add_argument("--solver", default="cbc", choices=["cbc", "highs"])
    ap.add_argument("--threads", type=int, default=None, help="solver threads (default: the solver's choice)")
    ap.add_argument("--out", help="output folder (default validation/results)")
    ap.add_argument("--resume", action="store_true", help="skip (case, method) pairs already in the JSON "
                                                          "(except errors and cases the budget left out)")
    ap.add_argument("--fresh", action="store_true", help="start a new JSON instead of merging into the old one")
    ap.add_argument("--no-skip-larger", action="store_true",
                    help="run a method on a case even if it timed out on fewer GPUs for the same workload")
    ap.add_argument("--report-only", action="store_true", help="rebuild the markdown from the JSON and exit")
    ap.add_argument("--log", help="append progress lines to this file too")
    # internal: a child process solving one case
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.time_limit is None:
        args.time_limit = 5.0 if args.quick else 30.0
    if args.case_timeout is None:
        args.case_timeout = 60.0 if args.quick else max(240.0, 4 * args.time_limit)
    if args.baseline_timeout is None:
        args.baseline_timeout = 30.0 if args.quick else 60.0
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        args.hardware = args.hardware_list
        return child_main(args)
    return main_parent(args)


if __name__ == "__main__":
    raise SystemExit(main())
