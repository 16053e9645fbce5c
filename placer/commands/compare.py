"""``placer compare HW WL``: every method on the same cost model, side by side, within one time budget.

``--time-limit`` is the budget of the whole comparison (counted from the start of the command, loading the
specs included). TorchRec's planner starts first, in its child process (torchrec_io/planner.py: start /
collect), and plans while the parent runs the baselines and then the ILP; the ILP's solver gets what is left,
less a margin and the time its tie-break may take after the main solve (planner/schedule.py, the one place
that splits time: Schedule.compare_search_s, compare_torchrec_s), so
that the whole comparison ends within the budget. Each row says how long its method took on its own
(``solve_wall_s``) and the time limit it was given; the output names the budget and how it was spent.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from placer.report import make_console

from placer.commands._common import (add_dense_dtype, add_hw_wl, add_solver_options, add_trainer, check_forced_method,
                                     limit_given, limit_line, load_pair, solve_config)
from placer.commands._progress import Heartbeat
from placer.planner.schedule import SCHEDULE

def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hw_wl(p)
    add_trainer(p)
    add_dense_dtype(p)
    p.add_argument("--json", action="store_true", help="print a JSON list of rows")
    p.add_argument("--methods", default=None, help="comma-separated subset of methods (default: all; the forced "
                                                   "forms qr, tt, int8, node_local where the workload allows them)")
    add_solver_options(p, method=False)
    for action in p._actions:  # the shared option, with compare's meaning
        if action.dest == "time_limit":
            action.help = ("time budget of the whole comparison, s (default 60): TorchRec's planner runs alongside, "
                           "the ILP's solver gets what the other methods leave")


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


def default_methods(wl) -> list[str]:
    """Every method, less the forced forms (forms.FORCED_FORMS) no table of ``wl`` allows and, under TorchRec's
    trainer, the methods whose plans it cannot run (planner/trainers.py)."""
    from placer.forms.storage import FORCED_FORMS, allowing
    from placer.planner.solve import METHODS
    from placer.planner.trainers import TORCHREC_REFUSED

    refused = TORCHREC_REFUSED if wl.trainer == "torchrec" else {}
    return [m for m in METHODS if (m not in FORCED_FORMS or allowing(wl, m)) and m not in refused]


def _empty_row(method: str, status: str, wall: float, note: str, **extra) -> dict:
    return {"method": method, "step_time_s": None, "throughput_samples_per_s": None, "status": status,
            "solve_wall_s": wall, "note": note, **extra}


def _priced_row(method: str, pred: dict, status: str, wall: float, **extra) -> dict:
    hbm = sum(v.get("hbm_used_bytes", 0.0) for v in pred["devices"].values())
    return {"method": method, "step_time_s": pred["step_time_s"],
            "throughput_samples_per_s": pred["throughput_samples_per_s"], "status": status,
            "hbm_used_bytes": hbm, "solve_wall_s": wall, "bottleneck": pred["bottleneck"], **extra}


def _said(row: dict) -> str:
    """A finished method for stderr: 'greedy_size: 8.123 ms (feasible) in 0.4 s'."""
    if row["step_time_s"] is None:
        return f"  {row['method']}: {row['status']} after {row['solve_wall_s']:.1f} s"
    return (f"  {row['method']}: step {row['step_time_s'] * 1e3:.3f} ms ({row['status']}) in "
            f"{row['solve_wall_s']:.1f} s")


def compare_rows(topo, wl, args, started: float | None = None, heartbeat=None) -> list[dict]:
    """One row per method: step time, throughput, speedup over host_cpu, HBM used, solve time (the method's
    own), the time limit it got, status (the ILP's with its gap). ``args.time_limit`` is the budget of the
    whole comparison, counted from ``started`` (a time.perf_counter() value; default now). ``heartbeat``
    (commands/_progress.Heartbeat): each method's start and result said on stderr, silences filled."""
    from contextlib import nullcontext
    from dataclasses import replace
    from functools import partial

    def say(text: str) -> None:
        if heartbeat is not None:
            heartbeat.say(text)

    def task(what: str, limit: float | None = None):
        return heartbeat.task(what, limit) if heartbeat is not None else nullcontext()

    from placer.cost import CostModel
    from placer.errors import InfeasibleError, SolverError
    from placer.planner import infeasible
    from placer.forms.storage import FORCED_FORMS
    from placer.planner import portfolio
    from placer.planner.solve import solve

    started = time.perf_counter() if started is None else started
    budget = float(args.time_limit)
    deadline = started + budget
    methods = parse_methods(args.methods) if args.methods is not None else default_methods(wl)
    rows: dict[str, dict] = {}

    trec = None
    if "torchrec" in methods:  # first: TorchRec plans in its child process while the rest runs here
        from placer.torchrec_io import INSTALL_HINT
        from placer.torchrec_io import planner as trec_planner

        t0 = time.perf_counter()
        limit, left = SCHEDULE.compare_torchrec_s(deadline - t0)
        try:
            model = CostModel(topo, wl)
            infeasible.check_dense(model)
            trec = trec_planner.start(model, time_limit_s=limit, deadline_s=left)
            say(f"  torchrec: planning in a child process alongside the others (killed after {left:.0f} s)")
        except trec_planner.TorchRecUnavailable as exc:
            rows["torchrec"] = _empty_row("torchrec", "skipped", time.perf_counter() - t0,
                                          f"torchrec not installed ({exc.reason}); install: {INSTALL_HINT}")
        except InfeasibleError as exc:
            rows["torchrec"] = _empty_row("torchrec", "infeasible", time.perf_counter() - t0, str(exc))
        except SolverError as exc:
            rows["torchrec"] = _empty_row("torchrec", "failed", time.perf_counter() - t0, str(exc))
    try:
        searched = ("ilp", "torchrec") + FORCED_FORMS  # the forced forms after the baselines, the ILP last
        order = ([m for m in methods if m not in searched] + [m for m in methods if m in FORCED_FORMS]
                 + (["ilp"] if "ilp" in methods else []))

        def one(i: int, m: str, limit: float | None) -> None:
            config, extra = solve_config(args, method=m), {}
            if limit is not None:  # the ILP and the forced forms (ILPs too) share what the others leave
                config, extra = replace(config, time_limit_s=limit), {"time_limit_s": limit}
                say(f"  [{i}/{len(order)}] {m}: " + limit_line(round(limit, 1), what="solver limit",
                                                               source="what the budget leaves"))
            else:
                say(f"  [{i}/{len(order)}] {m} ...")
            t0 = time.perf_counter()
            try:
                with task(f"solving {m}", limit):
                    plan = solve(topo, wl, config)
            except InfeasibleError as exc:
                rows[m] = _empty_row(m, "infeasible", time.perf_counter() - t0, str(exc), **extra)
            else:
                if limit is not None:
                    extra.update(gap=plan.solver.gap, lower_bound_step_time_s=plan.solver.lower_bound_step_time_s)
                rows[m] = _priced_row(m, plan.predicted, plan.solver.status, time.perf_counter() - t0, **extra)
            say(_said(rows[m]))

        entries = [portfolio.Entry(m, partial(one, i, m), searches=m == "ilp" or m in FORCED_FORMS)
                   for i, m in enumerate(order, 1)]
        list(portfolio.run(entries, lambda n: SCHEDULE.compare_search_s(deadline - time.perf_counter(), n)))
        if trec is not None:
            t0 = time.perf_counter()
            limits = {"time_limit_s": trec.time_limit_s, "deadline_s": trec.deadline_s}
            try:
                with task("waiting for torchrec's planner", trec.deadline_s):
                    res = trec_planner.collect(trec)
            except trec_planner.TorchRecUnavailable as exc:
                rows["torchrec"] = _empty_row("torchrec", "skipped", trec.setup_s,
                                              f"torchrec not installed ({exc.reason}); install: {INSTALL_HINT}")
            except SolverError as exc:  # TorchRecPlannerError: its failure, its deadline
                rows["torchrec"] = _empty_row("torchrec", "failed", trec.setup_s + time.perf_counter() - t0,
                                              str(exc), **limits)
            else:
                rows["torchrec"] = _priced_row("torchrec", res.predicted, "heuristic", res.wall_s,
                                               planner_s=res.planner_s, **limits)
            say(_said(rows["torchrec"]))
    finally:
        if trec is not None:
            trec.cancel()
    out = [rows[m] for m in methods]
    base = next((r["step_time_s"] for r in out if r["method"] == "host_cpu" and r["step_time_s"]), None)
    for r in out:
        r["speedup_over_host_cpu"] = base / r["step_time_s"] if base and r["step_time_s"] else None
    return out


def budget_lines(rows: list[dict], budget: float, total: float) -> list[str]:
    """How the --time-limit budget was spent, for the table's reader."""
    by = {r["method"]: r for r in rows}
    lines = [f"time budget {budget:g} s (--time-limit, the whole comparison); took {total:.1f} s"
             + (" (over budget)" if total > budget else "")]
    ilp = by.get("ilp")
    if ilp is not None and "time_limit_s" in ilp:
        head = f"ilp: solver limit {ilp['time_limit_s']:.1f} s (what the other methods left, less its tie-break " \
               f"allowance and {SCHEDULE.compare_margin_s:g} s)"
        if ilp.get("gap") is not None:
            head += f"; {ilp['status']}, gap {ilp['gap']:.2%} to its lower bound " \
                    f"{ilp['lower_bound_step_time_s'] * 1e3:.3f} ms"
            if ilp["status"] != "optimal":
                head += " (time limit reached: a longer --time-limit may close it)"
        lines.append(head)
    trec = by.get("torchrec")
    if trec is not None and "deadline_s" in trec:
        lines.append(f"torchrec: planned in a child process alongside the others (its search limit "
                     f"{trec['time_limit_s']:.0f} s, killed after {trec['deadline_s']:.0f} s); its solve time is "
                     f"its own" + (f", {trec['planner_s']:.2f} s of it in TorchRec's planner (torchrec import "
                                   f"included)" if trec.get("planner_s") else ""))
    return lines


def _display(rows: list[dict]) -> list[dict]:
    """Rows for the table: the ILP's status with its gap (a forced form's too)."""
    out = []
    for r in rows:
        if r.get("gap") is not None and r["step_time_s"] is not None:
            r = {**r, "status": f"{r['status']}, gap {r['gap']:.1%}"}
        out.append(r)
    return out


def run(args) -> int:
    from placer.report import compare_table

    started = time.perf_counter()
    if args.methods is not None:
        parse_methods(args.methods)  # refuse a typo before loading and solving anything
    solve_config(args)
    with Heartbeat() as heartbeat:
        heartbeat.say("compare: " + limit_line(float(args.time_limit), what="time budget", given=limit_given(args))
                      + " (the whole comparison)")
        topo, wl = load_pair(args)
        for m in parse_methods(args.methods) if args.methods is not None else ():  # before anything is solved
            check_forced_method(wl, m, "--methods")  # a forced form no table allows, named (default: allowed ones)
        rows = compare_rows(topo, wl, args, started=started, heartbeat=heartbeat)
    total = time.perf_counter() - started
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
    else:
        console = make_console()
        compare_table(_display(rows), console)
        for line in budget_lines(rows, float(args.time_limit), total):
            console.print(line, markup=False)
    return 0
