"""A TorchRec sharding plan -> a placer Plan: the export document (JSON, exporter.py), or a pickled /
torch.save'd ShardingPlan (loading a pickle runs code from the file: the caller must allow it).

Kernels back (mapping.py): dense and fused -> every row in HBM; fused_uvm -> none (UVM); fused_uvm_caching
-> each shard's round(load_factor x rows) hottest rows in HBM. Precision: the table's "data_type" in the
document, else the workload's dtype (a pickled ShardingPlan does not carry the storage type).
"""
from __future__ import annotations

import pickle
import zipfile

from placer.errors import SpecError
from placer.plan import Plan, SpecRef, spec_fields
from placer.specs.documents import parse_json
from placer.specs.files import read_bytes_guarded
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.torchrec_io import FORMAT, FORMAT_VERSION, INSTALL_HINT, mapping


def read_source(path: str, *, allow_pickle: bool = False) -> dict:
    """The export document of ``path``: JSON as written by ``placer export --torchrec``, or (with
    ``allow_pickle``) a pickled ShardingPlan turned into one. SpecError names the file."""
    raw = read_bytes_guarded(path, what="TorchRec plan")  # regular files only, size-capped: never /dev/zero
    if raw[:1] in (b"{", b"[") or raw.lstrip()[:1] == b"{":
        doc = parse_json(raw.decode("utf-8", errors="replace"), str(path))
        if not isinstance(doc, dict):
            raise SpecError(f"expected a JSON object, found {type(doc).__name__}", file=str(path))
        return doc
    if not allow_pickle:
        raise SpecError("not JSON: a pickled or torch.save'd ShardingPlan? Loading a pickle runs code from the "
                        "file; pass --allow-pickle only for a file you trust (or export the plan as JSON)",
                        file=str(path))
    try:
        from placer.torchrec_io.torchrec_types import document_from_plan
    except ImportError as exc:
        raise SpecError(f"reading a pickled ShardingPlan needs torchrec ({exc}); install it with: {INSTALL_HINT}",
                        file=str(path)) from None
    import torch

    try:
        if zipfile.is_zipfile(path):
            obj = torch.load(path, map_location="cpu", weights_only=False)
        else:
            obj = pickle.loads(raw)
    except Exception as exc:  # noqa: BLE001 -- any unpickling failure is a bad file
        raise SpecError(f"cannot unpickle a ShardingPlan ({type(exc).__name__}: {exc})", file=str(path)) from None
    return document_from_plan(obj, file=str(path))


def _reverse_table_names(doc: dict, file: str) -> dict[str, str]:
    """TorchRec table name -> placer's, from the document's "names" map (export --names); empty without one."""
    names = doc.get("names")
    if names is None:
        return {}
    tables = names.get("tables") if isinstance(names, dict) else None
    if not isinstance(tables, dict) or not all(isinstance(v, str) for v in tables.values()):
        raise SpecError("expected names.tables: an object of placer name -> TorchRec name", file=file,
                        field="names.tables")
    out = {v: k for k, v in tables.items()}
    if len(out) != len(tables):
        raise SpecError("two placer tables share one TorchRec name", file=file, field="names.tables")
    return out


def plan_from_document(doc: dict, topo: Topology, wl: Workload, *, file: str, method: str | None = None) -> Plan:
    """A placer Plan (not yet checked or priced: plan_price.priced_plan does both) from an export document.
    SpecError names ``file`` and the field for anything placer cannot read."""
    if doc.get("format", FORMAT) != FORMAT:
        raise SpecError(f"format {doc.get('format')!r}: expected {FORMAT!r}", file=file, field="format")
    if doc.get("format_version", FORMAT_VERSION) != FORMAT_VERSION:
        raise SpecError(f"format_version {doc.get('format_version')!r}: this placer reads {FORMAT_VERSION}",
                        file=file, field="format_version")
    ranks = mapping.Ranks(topo)
    world = doc.get("world_size")
    if world is not None and world != ranks.world_size:
        raise SpecError(f"the plan is for {world} ranks, the hardware spec has {ranks.world_size} GPUs",
                        file=file, field="world_size")
    for r, g in (doc.get("ranks") or {}).items():
        if not str(r).isdigit() or int(r) >= ranks.world_size or ranks.gpus[int(r)] != g:
            have = ranks.gpus[int(r)] if str(r).isdigit() and int(r) < ranks.world_size else "no GPU"
            raise SpecError(f"rank {r} is {g!r} in the plan but {have} in the hardware spec", file=file,
                            field=f"ranks.{r}")
    tables = doc.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise SpecError("expected an object of tables (name -> parameter_sharding)", file=file, field="tables")
    specs = {t.name: t for t in wl.tables}
    placer_name = _reverse_table_names(doc, file)
    placements = []
    for torchrec_name, entry in tables.items():
        field = f"tables.{torchrec_name}"
        name = placer_name.get(torchrec_name, torchrec_name)
        if name not in specs:
            raise SpecError(f"table {name!r} is not in workload {wl.name!r}", file=file, field=field)
        if not isinstance(entry, dict):
            raise SpecError("expected an object with parameter_sharding", file=file, field=field)
        dtype = entry.get("data_type")
        if dtype not in (None, "FP32", "FP16", "BF16"):
            raise SpecError(f"data_type {dtype!r}: placer stores FP32, FP16 or BF16", file=file,
                            field=f"{field}.data_type")
        precision = {"FP16": "fp16", "BF16": "bf16", "FP32": "fp32"}.get(dtype, specs[name].dtype)
        placements.append(mapping.placement_from_sharding(name, entry.get("parameter_sharding"), specs[name],
                                                           ranks, precision, file=file,
                                                           field=f"{field}.parameter_sharding"))
    source = doc.get("source") or {}
    hw, wref = source.get("hardware") or {}, source.get("workload") or {}
    # the specs' fields too (as placer solve records them): a what-if on the imported plan names what changed
    return Plan(hardware=SpecRef(name=topo.spec.name, sha256=topo.spec.sha256 or hw.get("sha256"),
                                 fields=spec_fields(topo.spec)),
                workload=SpecRef(name=wl.name, sha256=wl.sha256 or wref.get("sha256"), fields=spec_fields(wl)),
                method=method or (f"{source['method']} via torchrec" if source.get("method") else "torchrec"),
                placements=placements)
