"""``placer simulate HW WL PLAN``: evaluate any plan with the cost model."""
from __future__ import annotations

import argparse
import json
import sys

from placer.report import add_listing_arguments, make_console

from placer.commands._common import add_dense_dtype, add_hw_wl, add_trainer, add_what_if, check_devices_exist, load_pair
from placer.commands._output import check_plot_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hw_wl(p)
    add_trainer(p)
    p.add_argument("plan", metavar="PLAN", help="plan JSON (from placer solve, or written by hand)")
    add_listing_arguments(p)
    from placer.commands.solve import add_plot_argument

    add_plot_argument(p)
    p.add_argument("--json", action="store_true", help="print the prediction as JSON")
    p.add_argument("--skew", type=float, metavar="SCALE", default=None,
                   help="price the plan with every table's skew scaled: zipf alpha x SCALE, cdf/histogram curves "
                        "flatter (<1) or steeper (>1), uniform unchanged (placer/skew.py), e.g. 0.8 or 1.2")
    add_what_if(p)
    add_dense_dtype(p)


def run(args) -> int:
    from placer.plan import load_plan
    from placer.plan_price import priced_plan
    from placer.report import plan_summary

    from placer.commands.solve import write_plot

    if getattr(args, "plot", None) is not None:
        check_plot_path(args.plot, "--plot")
    topo, wl = load_pair(args)
    if getattr(args, "skew", None) is not None:
        from placer.skew import workload_with_skew

        wl = workload_with_skew(wl, args.skew)
    plan = load_plan(args.plan)
    check_devices_exist(plan, topo, getattr(args, "gpus", None), file=args.plan)
    predicted = priced_plan(plan, topo, wl, file=args.plan)
    from placer.report_insight import step_insights

    priced = plan.model_copy(update={"predicted": predicted})
    facts = step_insights(priced, topo, wl)
    insights = facts["lines"]
    write_plot(args, priced, insights)
    if args.json:
        sys.stdout.write(json.dumps({"method": plan.method, "predicted": predicted, "insights": facts}, indent=1)
                         + "\n")
    else:
        plan_summary(priced, wl, make_console(), show_all=getattr(args, "all", False),
                     tables=getattr(args, "tables", None), insights=insights)
    return 0
