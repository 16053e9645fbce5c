"""``placer solve HW WL``: choose the placement, print the summary, write the plan JSON."""
from __future__ import annotations

import argparse
import sys

from placer.report import make_console

from placer.commands._common import add_hw_wl, add_solver_options, load_pair, solve_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hw_wl(p)
    p.add_argument("-o", "--output", metavar="PLAN", help="write the plan JSON here")
    p.add_argument("--json", action="store_true", help="print the plan JSON on stdout instead of the summary")
    add_solver_options(p)


def run(args) -> int:
    from placer.planner.solve import solve
    from placer.report import plan_summary

    topo, wl = load_pair(args)
    plan = solve(topo, wl, solve_config(args))
    if args.output:
        plan.write(args.output)
    if args.json:
        sys.stdout.write(plan.to_json() + "\n")
    else:
        console = make_console()
        plan_summary(plan, wl, console)
        if args.output:
            console.print(f"plan written to {args.output}")
    return 0
