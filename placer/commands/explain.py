"""``placer explain HW WL PLAN [TABLE...]``: per table, where it is, what binds it there, and the step time of
its next-best option (the logic is placer/explain.py)."""
from __future__ import annotations

import argparse
import json
import sys

from placer import argtypes as _args
from placer.commands._common import add_dense_dtype, add_hw_wl, add_trainer, add_what_if, check_devices_exist, load_pair
from placer.explain import DEFAULT_TOP

top_count = _args.int_range(1, 1_000_000, "a table count")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hw_wl(p)
    add_trainer(p)
    p.add_argument("plan", metavar="PLAN", help="plan JSON (from placer solve, or written by hand)")
    p.add_argument("tables", metavar="TABLE", nargs="*",
                   help="tables to explain (default: the --top N whose placement matters most)")
    p.add_argument("--top", type=top_count, default=DEFAULT_TOP, metavar="N",
                   help=f"without TABLE: how many tables, those whose next-best option changes the step most "
                        f"(default {DEFAULT_TOP})")
    p.add_argument("--all", action="store_true", help="explain every table of the plan")
    p.add_argument("--no-fp16", action="store_true", help="do not offer fp16 storage as an alternative")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    add_what_if(p)
    add_dense_dtype(p)


def run(args) -> int:
    from placer.cost import CostModel
    from placer.explain import explain_plan, resolve_tables
    from placer.options import OptionConfig
    from placer.plan import load_plan
    from placer.plan_price import priced_plan
    from placer.report import explain_report, make_console

    topo, wl = load_pair(args)
    plan = load_plan(args.plan)
    check_devices_exist(plan, topo, getattr(args, "gpus", None), file=args.plan)
    priced_plan(plan, topo, wl, file=args.plan)  # checks structure, devices, coverage, memory: exit 2 naming the file
    tables = resolve_tables(plan, args.tables, file=args.plan)
    if args.all:
        tables = [p.table for p in plan.placements]
    result = explain_plan(CostModel(topo, wl), plan, tables or None, args.top, OptionConfig(fp16=not args.no_fp16))
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1) + "\n")
    else:
        explain_report(result, make_console())
    return 0
