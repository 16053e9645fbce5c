"""``placer export --torchrec HW WL PLAN -o OUT``: a placer plan as TorchRec's ParameterSharding plan and
ParameterConstraints (JSON), plus a Python module that builds the ShardingPlan from it (docs/torchrec.md).
Where the workload has constraints, the document carries them as ParameterConstraints too
(``workload_constraints``), and a Python snippet beside the module says them as a TorchRec user writes them
(``<module>_constraints.py``: ``constraints = {...}``, ``topology = Topology(hbm_cap=...)`` for a headroom); what
TorchRec cannot say is printed on stderr, naming the table and the field, and listed in both.

HW and WL are the plan's hardware spec and workload: the hardware gives the global ranks (node<i>/gpu<j> ->
i * gpus_per_node + j), the workload the tables; both price the plan and its TorchRec mapping."""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

from placer.commands._common import add_hw_wl, add_trainer, load_pair
from placer.commands._output import check_output_path, write_text
from placer.errors import SpecError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--torchrec", action="store_true", required=True,
                   help="write TorchRec's plan (the only format for now; required so that others can come)")
    add_hw_wl(p)
    add_trainer(p)
    p.add_argument("plan", metavar="PLAN", help="plan JSON (from placer solve)")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="the TorchRec plan JSON to write (ParameterSharding + ParameterConstraints per table)")
    p.add_argument("--python", metavar="PY", default=None,
                   help="the module that builds TorchRec's ShardingPlan from OUT (default: OUT's name with "
                        "non-identifier characters as '_' and .py, next to OUT); where the workload has constraints, "
                        "PY's name with _constraints.py holds them as TorchRec ParameterConstraints")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="the devices TorchRec runs on: cuda (placements rank:R/cuda:D, the default) or cpu "
                        "(rank:R/cpu, DistributedModelParallel over gloo; fused_uvm and fused_uvm_caching are "
                        "exported as fused, TorchRec's host kernel there)")
    p.add_argument("--module-path", default=None, metavar="FQN",
                   help="where the EmbeddingBagCollection sits in the model: a dotted path, or the preset dlrm "
                        "(sparse_arch.embedding_bag_collection, TorchRec's DLRM; the default) or dlrm-train "
                        "(model.sparse_arch.embedding_bag_collection, DLRMTrain around it)")
    p.add_argument("--names", default=None, metavar="MAP",
                   help="TorchRec names for the workload's tables and features: a YAML/JSON file {tables: "
                        "{placer: torchrec}, features: {placer: torchrec}}, or the preset dlrm (TorchRec's DLRM "
                        "example: tables t_cat_0.., features cat_0.., in workload order); default placer's names")


def default_python_path(out: str) -> Path:
    p = Path(out)
    stem = re.sub(r"\W", "_", p.name[:-len(p.suffix)] if p.suffix else p.name) or "plan"
    if stem[0].isdigit():
        stem = "_" + stem
    return p.with_name(stem + ".py")


def mapping_summary(pred: dict, noted: int) -> str:
    """One line on how TorchRec's run relates to the plan: exact only when the placements are the same and no
    table has a note (hot/cold splits run as a dynamic cache, fp16 needs the config's data_type, ...)."""
    ms = f"{pred['plan_step_time_s'] * 1e3:.3f} ms"
    if pred["exact"] and not noted:
        return f"TorchRec expresses the plan exactly: predicted step {ms}"
    if pred["exact"]:
        return (f"TorchRec runs the plan's placements (predicted step {ms}); {noted} table(s) run differently "
                "from placer's model or need a setting, as noted:")
    return (f"TorchRec runs a nearest mapping: predicted step {ms} as planned, "
            f"{pred['mapped_step_time_s'] * 1e3:.3f} ms as mapped; {noted} table(s) noted:")


def _snippet_path(args, py: Path, out: Path) -> Path:
    """Where the constraints snippet goes: PY's name with _constraints.py; refused where it is one of the
    command's other files (checked before the work)."""
    import os

    path = check_output_path(py.with_name(py.stem + "_constraints.py"), "--python")
    for other in (out, py, args.hardware, args.workload, args.plan):
        same = Path(other).resolve() == path.resolve() or (
            Path(other).exists() and path.exists() and os.path.samefile(other, path))
        if same:
            raise SpecError(f"the constraints snippet {path} would replace {other}; give --python another name",
                            field="--python")
    return path


def _snippet(doc: dict, wl) -> str:
    """The constraints snippet of an export document with workload_constraints (constraints_file.py)."""
    from placer.torchrec_io.constraints import Exported, NotCarried
    from placer.torchrec_io.constraints_file import python_snippet

    block = doc["workload_constraints"]
    exported = Exported(block["parameter_constraints"], block["hbm_headroom_GiB"],
                        (block.get("topology") or {}).get("hbm_cap"), [NotCarried(**n) for n in block["not_carried"]])
    local = doc["local_world_size"]
    return python_snippet(exported, workload=wl.name, world_size=doc["world_size"],
                          local_world_size=local if isinstance(local, int) else local[0])


def run(args) -> int:
    from placer.plan import load_plan
    from placer.report import make_console
    from placer.torchrec_io import INSTALL_HINT
    from placer.torchrec_io.exporter import builder_module, export_document
    from placer.torchrec_io.names import load_name_map, module_path

    out = check_output_path(args.output, "-o")
    py = check_output_path(args.python or default_python_path(args.output), "--python")
    if py.resolve() == out.resolve():
        raise SpecError(f"--python {py}: the same file as -o; give another name", field="--python")
    path = module_path(args.module_path)
    topo, wl = load_pair(args)
    snippet = None if wl.constraints.empty else _snippet_path(args, py, out)
    names = load_name_map(args.names, wl)
    plan = load_plan(args.plan)
    doc = export_document(plan, topo, wl, file=args.plan, module_path=path, device=args.device, names=names)
    write_text(out, json.dumps(doc, indent=1) + "\n", "-o")
    write_text(py, builder_module(out.name, py.stem), "--python")
    if snippet:
        write_text(snippet, _snippet(doc, wl), "--python")
    console = make_console()
    noted = {n: t["mapping_note"] for n, t in doc["tables"].items() if "mapping_note" in t}
    console.print(f"{len(doc['tables'])} tables over {doc['world_size']} ranks written to {out} (EmbeddingBagConfigs "
                  f"and ShardingPlan at {path}, names: {names.source}); builder module {py}")
    console.print(mapping_summary(doc["predicted"], len(noted)), markup=False)
    placer_name = {v: k for k, v in names.tables.items()}
    for name, note in list(noted.items())[:10]:
        shown = name if placer_name[name] == name else f"{name} ({placer_name[name]})"
        console.print(f"  {shown}: {note}", markup=False)
    if len(noted) > 10:
        console.print(f"  ... {len(noted) - 10} more tables with a mapping_note in {out}")
    if snippet:
        lost = doc["workload_constraints"]["not_carried"]
        console.print(f"the workload's constraints as TorchRec ParameterConstraints for "
                      f"{len(doc['workload_constraints']['parameter_constraints'])} tables: {snippet}"
                      + (f"; {len(lost)} not carried (stderr)" if lost else ""), markup=False)
        for n in lost:
            print(f"not carried: {n['table']}: {n['field']}: {n['why']}", file=sys.stderr)
    if importlib.util.find_spec("torchrec") is None:
        console.print(f"{py.name} needs torchrec; on a CPU-only machine install it with: {INSTALL_HINT}",
                      markup=False)
    return 0
