"""``placer import --torchrec FILE HW WL -o PLAN``: a TorchRec sharding plan as a placer plan, checked against
the hardware spec and workload and priced, so that ``simulate``, ``explain`` and ``run`` work on it.

FILE is the JSON that ``placer export --torchrec`` writes (ParameterSharding fields per table), or, with
--allow-pickle, a pickled or torch.save'd ShardingPlan (unpickling runs code from the file). The command is
``import``; the module is import_plan because ``import`` is a Python keyword."""
from __future__ import annotations

import argparse

from placer.commands._common import add_hw_wl, load_pair
from placer.commands._output import check_output_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--torchrec", action="store_true", required=True,
                   help="read a TorchRec plan (the only format for now)")
    p.add_argument("source", metavar="FILE", help="TorchRec plan: placer's JSON export, or a pickled ShardingPlan")
    add_hw_wl(p)
    p.add_argument("-o", "--output", required=True, metavar="PLAN", help="placer plan JSON to write")
    p.add_argument("--allow-pickle", action="store_true",
                   help="read a pickled / torch.save'd ShardingPlan (runs code from FILE: only for files you trust)")
    p.add_argument("--method", default=None, help="method name recorded in the plan (default: the export's "
                                                   "method + ' via torchrec', or 'torchrec')")


def run(args) -> int:
    from placer.plan_price import priced_plan
    from placer.report import make_console, plan_summary
    from placer.torchrec_io.importer import plan_from_document, read_source

    out = check_output_path(args.output, "-o")
    topo, wl = load_pair(args)
    doc = read_source(args.source, allow_pickle=args.allow_pickle)
    plan = plan_from_document(doc, topo, wl, file=args.source, method=args.method)
    plan = plan.model_copy(update={"predicted": priced_plan(plan, topo, wl, file=args.source)})
    plan.write(out)
    console = make_console()
    plan_summary(plan, wl, console)
    console.print(f"plan written to {out}")
    return 0
