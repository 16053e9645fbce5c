"""``placer import --torchrec FILE HW WL -o PLAN``: a TorchRec sharding plan as a placer plan, checked against
the hardware spec and workload and priced, so that ``simulate``, ``explain`` and ``run`` work on it.

FILE is the JSON that ``placer export --torchrec`` writes (ParameterSharding fields per table), or, with
--allow-pickle, a pickled or torch.save'd ShardingPlan (unpickling runs code from the file).

``placer import --torchrec --constraints FILE HW WL -o NEW_WL``: TorchRec's ParameterConstraints (a JSON
``{table: {field: value}}``, placer's export, or a Python file read without running it:
torchrec_io/constraints_file.py) as the workload's ``constraints`` block: NEW_WL is WL with that block replaced
(added where it has none); every field placer cannot carry is printed on stderr, naming the table and the field
(and listed as comments above the block). HW gives the usable HBM a Topology's hbm_cap is read against.

The command is ``import``; the module is import_plan because ``import`` is a Python keyword."""
from __future__ import annotations

import argparse
import sys

from placer.commands._common import add_hw_wl, load_pair
from placer.commands._output import check_output_path
from placer.errors import SpecError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--torchrec", action="store_true", required=True,
                   help="read a TorchRec plan (the only format for now)")
    p.add_argument("source", metavar="FILE", help="TorchRec plan: placer's JSON export, or a pickled ShardingPlan; "
                                                  "with --constraints, TorchRec's ParameterConstraints (.py or JSON)")
    add_hw_wl(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="placer plan JSON to write; with --constraints, the workload (WL with FILE's constraints)")
    p.add_argument("--constraints", action="store_true",
                   help="FILE is TorchRec's ParameterConstraints (a Python file defining constraints = {\"t\": "
                        "ParameterConstraints(...)}, read without running it; JSON {table: {field: value}}; or an "
                        "export's workload_constraints): write WL with them as its constraints block")
    p.add_argument("--names", default=None, metavar="MAP",
                   help="with --constraints: the TorchRec names of the workload's tables and features, as export "
                        "--names takes them (a YAML/JSON file or the preset dlrm); an export's own map is read")
    p.add_argument("--allow-pickle", action="store_true",
                   help="read a pickled / torch.save'd ShardingPlan (runs code from FILE: only for files you trust)")
    p.add_argument("--method", default=None, help="method name recorded in the plan (default: the export's "
                                                   "method + ' via torchrec', or 'torchrec')")


def run(args) -> int:
    if args.constraints:
        return _run_constraints(args)
    if args.names is not None:
        raise SpecError("--names goes with --constraints (a plan's export carries its own names map)", field="--names")
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


def _names(src, args, wl):
    """The TorchRec names of the workload's tables and features: the export's map, --names, or placer's own."""
    from placer.torchrec_io.names import NameMap, identity, load_name_map

    if src.names is None:
        return load_name_map(args.names, wl)
    if args.names is not None:
        raise SpecError(f"{args.source} is an export with its own names map; leave --names out", field="--names")
    base = identity(wl)
    tables, feats = (src.names.get(k) if isinstance(src.names, dict) else None for k in ("tables", "features"))
    if not isinstance(tables, dict) or not isinstance(feats or {}, dict):
        raise SpecError("expected names.tables and names.features: objects of placer name -> TorchRec name",
                        file=args.source, field="names")
    return NameMap({n: tables.get(n, n) for n in base.tables}, {n: (feats or {}).get(n, n) for n in base.features},
                   f"{args.source} names")


def _run_constraints(args) -> int:
    from pathlib import Path

    from placer.commands._output import write_text
    from placer.report import make_console
    from placer.specs import load_workload
    from placer.specs.files import read_text_guarded
    from placer.torchrec_io.constraints import (NotCarried, from_torchrec, headroom_from_hbm_cap,
                                                 topology_differences)
    from placer.torchrec_io.constraints_file import read_constraints_file, workload_with

    if args.allow_pickle or args.method is not None:
        raise SpecError("--allow-pickle and --method are for importing a plan, not --constraints",
                        field="--allow-pickle" if args.allow_pickle else "--method")
    out = check_output_path(args.output, "-o")
    topo, wl = load_pair(args)
    src = read_constraints_file(args.source)
    lost = []
    headroom = 0.0
    if src.hbm_cap is not None:
        headroom, lost = headroom_from_hbm_cap(src.hbm_cap, topo, file=args.source, fld=src.hbm_cap_field)
    lost += topology_differences(src.topology, topo)
    lost += [NotCarried(n["table"], n["field"], f"not in the export: {n['why']}") for n in src.export_not_carried]
    imported = from_torchrec(src.pcs, wl, file=args.source, names=_names(src, args, wl), headroom_GiB=headroom,
                             field_of=src.field_of)
    imported.not_carried[:0] = lost
    text = read_text_guarded(args.workload, what="workload")
    write_text(out, workload_with(text, imported, source=Path(args.source).name,
                                  json_syntax=Path(args.workload).suffix.lower() == ".json"), "-o")
    load_workload(out)  # what was written reads back as a workload (SpecError naming it otherwise)
    c = imported.constraints
    console = make_console()
    console.print(f"{len(src.pcs)} TorchRec ParameterConstraints from {args.source} ({src.kind}): "
                  f"{len(c.tables)} constraint entries over {sum(len(e.tables) for e in c.tables)} tables"
                  + (f", hbm_headroom_GiB {c.hbm_headroom_GiB:g}" if c.hbm_headroom_GiB else "")
                  + f"; workload written to {out}")
    for n in imported.not_carried:
        print(f"not carried: {n.text()}", file=sys.stderr)
    if imported.not_carried:
        console.print(f"{len(imported.not_carried)} field(s) not carried (stderr; comments above the block)")
    return 0
