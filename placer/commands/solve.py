"""``placer solve HW WL``: choose the placement, print the summary, write the plan JSON."""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from contextlib import contextmanager

from placer import argtypes as _args
from placer.report import add_listing_arguments, make_console

from placer.commands._common import (add_dense_dtype, add_hw_wl, add_solver_options, add_trainer, check_forced_method,
                                     limit_given, limit_line, load_pair, solve_config)
from placer.commands._output import check_output_path, check_plot_path, save_figure, write_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hw_wl(p)
    add_trainer(p)
    add_dense_dtype(p)
    p.add_argument("-o", "--output", metavar="PLAN", help="write the plan JSON here")
    add_listing_arguments(p)
    add_plot_argument(p)
    p.add_argument("--json", action="store_true", help="print the plan JSON on stdout instead of the summary")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress on stderr while solving (stage, elapsed, best plan, bound, gap)")
    add_solver_options(p)
    p.add_argument("--work-limit", type=_args.work_limit, default=None, metavar="UNITS",
                   help="a deterministic budget for the ILP's search instead of --time-limit's: work units "
                        "(counted solver iterations and nodes and stage-2 moves, each about a millisecond on a "
                        "2-core machine), so the same specs give the same plan on any machine, however long it "
                        f"takes there; > 0 and at most {_args.MAX_WORK_LIMIT:g}")


@contextmanager
def progress_reporter(quiet: bool, limit_s: float | None = None):
    """A reporter for the planner: a live line on a terminal (erased at the end), else a line on stderr when
    the stage changes and every few seconds while the numbers move, and a heartbeat line after a few seconds
    of silence (commands/_progress.py; ``limit_s``: the time limit it names); None when quiet."""
    from placer.planner.progress import LineReporter, line

    if quiet:
        yield None
        return
    console = make_console(stderr=True)
    if not console.is_terminal:
        from placer.commands._progress import Heartbeat

        with Heartbeat() as heartbeat, heartbeat.task("solving", limit_s):
            yield LineReporter(heartbeat.say)
        return
    from rich.live import Live
    from rich.text import Text

    t0 = time.perf_counter()
    with Live(Text("starting"), console=console, transient=True, refresh_per_second=4) as live:
        yield lambda report: live.update(Text(line(report, time.perf_counter() - t0)))


#: seconds of the time limit the summary's bf16 re-pricing needs (a second trace of the dense model, ~1.5 s here);
#: with less left it is not done, and the summary says so (the limit is the whole command's)
REPRICE_RESERVE_S = 2.0


def run(args) -> int:
    from placer.plan import record_specs
    from placer.planner.solve import solve

    called = time.perf_counter()
    if args.output is not None:
        check_output_path(args.output, "-o/--output")  # before the solve, which may take minutes
    if getattr(args, "plot", None) is not None:
        check_plot_path(args.plot, "--plot")
    # --time-limit is the whole command's: loading the specs, the solve, pricing the plan and its what-ifs; counted
    # from the process's start where it is the command (placer/process.py), else from this call: ``main(argv)``
    # from Python may come long after placer.cli was imported, and the stages' shares are clipped to what is left
    from placer import process

    started = getattr(args, "_started_s", None) if process.owned() else None
    config = dataclasses.replace(solve_config(args), started_s=started)
    if not args.quiet:
        print(_limit_text(config, started, limit_given(args)), file=sys.stderr, flush=True)
    topo, wl = load_pair(args)
    check_forced_method(wl, config.method)
    if not args.quiet:
        for note in wl.options_not_planned():
            print(f"note: {note}", file=sys.stderr, flush=True)
    limit = config.time_limit_s if config.work_limit is None else None
    with progress_reporter(args.quiet, limit) as reporter:
        plan = solve(topo, wl, dataclasses.replace(config, progress=reporter))
    left = None if config.work_limit is not None else \
        config.time_limit_s - (time.perf_counter() - (started if started is not None else called))
    _report(args, record_specs(plan, topo.spec, wl), wl, topo,  # record_specs: what-ifs name what changed
            reprice=left is None or left >= REPRICE_RESERVE_S)
    return 0


def _limit_text(config, started: float | None, given: bool) -> str:
    """The solve's limit for stderr: the work budget (--work-limit) or the time limit (``given``: on the command
    line), and when it ends."""
    if config.work_limit is not None:
        return (f"solving {config.method}: work limit {config.work_limit:,.0f} units (--work-limit; deterministic, "
                "no wall-clock end)")
    elapsed = time.perf_counter() - started if started is not None else 0.0
    return f"solving {config.method}: " + limit_line(config.time_limit_s, config.time_limit_s - elapsed, given=given) \
        + " (the whole command)"


def add_plot_argument(p: argparse.ArgumentParser) -> None:
    """``--plot PNG`` of solve and simulate (placer/report_plot.py)."""
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="also draw the plan to this PNG: per device, memory used against what is usable (capacity less "
                        "the spec's reserve) and busy time by phase against the step, the bottleneck marked (many "
                        "GPUs: the busiest and emptiest)")


def write_plot(args, plan, notes: list[str] = ()) -> None:
    """``--plot``: draw the plan (``notes``: the summary's insight lines); say so on stderr (stdout may be JSON)."""
    if getattr(args, "plot", None) is None:
        return
    from placer.report_plot import plot_plan

    save_figure(lambda: plot_plan(plan, args.plot, notes=notes), args.plot, "--plot")
    print(f"plot written to {args.plot}", file=sys.stderr)


def _report(args, plan, wl, topo, reprice: bool = True) -> None:
    """The plan written (-o), drawn (--plot), printed as JSON (--json) or summed up on the terminal (``reprice``:
    whether the time limit leaves room to re-price the plan at another dense dtype)."""
    from placer.report import plan_summary
    from placer.report_insight import step_insights

    if args.output is not None:
        write_text(args.output, plan.to_json() + "\n", "-o/--output")
    insights = step_insights(plan, topo, wl, reprice)["lines"] if getattr(args, "plot", None) or not args.json \
        else []
    write_plot(args, plan, insights)
    if args.json:
        sys.stdout.write(plan.to_json() + "\n")
        return
    console = make_console()
    plan_summary(plan, wl, console, show_all=getattr(args, "all", False), tables=getattr(args, "tables", None),
                 insights=insights)
    if plan.robustness and "step_time_s" in plan.robustness:
        from placer.skew import robustness_line

        console.print(robustness_line(plan.robustness), markup=False)
    if args.output:
        console.print(f"plan written to {args.output}")
