"""A placer plan -> the TorchRec export document (JSON) and the module that builds TorchRec's objects from it.

The document (format ``placer-torchrec-plan`` version 1)::

    {"format": "placer-torchrec-plan", "format_version": 1,
     "source": {"method", "hardware": {name, sha256}, "workload": {name, sha256}},
     "world_size": 16, "local_world_size": 8,              # GPUs; ranks per node
     "device": "cuda",                                      # placements rank:R/cuda:D, or "cpu": rank:R/cpu
     "ranks": {"0": "node0/gpu0", ...},                     # global rank -> placer GPU (hardware spec order)
     "module_path": "sparse_arch.embedding_bag_collection", # where the EmbeddingBagCollection sits in the model
     "names": {"source", "tables": {placer: torchrec}, "features": {placer: torchrec}},   # names.py
     "embedding_bag_configs": [{name, num_embeddings, embedding_dim, feature_names, pooling, data_type}],
     "predicted": {"plan_step_time_s", "mapped_step_time_s", "exact"},
     "tables": {name: {"parameter_sharding": {...},      # ParameterSharding fields (mapping.parameter_sharding)
                       "parameter_constraints": {...},   # ParameterConstraints fields
                       "data_type": "FP16",              # 16-bit rows only (FP16, BF16): EmbeddingBagConfig.data_type
                       "placer": "table_wise node0/gpu1 hot 10%",   # the placement as placer prints it
                       "mapping_note": "...",            # only where TorchRec runs something else
                       "mapped_step_time_s": ...}},      # with the note: the plan's step time with only this
                                                         # table mapped (seconds)
     "workload_constraints": {                           # only where the workload has constraints (constraints.py)
         "parameter_constraints": {name: {sharding_types, compute_kernels, pooling_factors}},
         "hbm_headroom_GiB": 4, "topology": {"hbm_cap": ...},   # Topology.hbm_cap, bytes (with a headroom)
         "not_carried": [{"table", "field", "why"}]}}    # what TorchRec cannot say

Table names in "tables" and "embedding_bag_configs" are TorchRec's (the "names" map; placer's by default).
Step times are placer's cost model (seconds per training step): ``plan_step_time_s`` for the plan as placer
made it, ``mapped_step_time_s`` for what TorchRec will run (every table mapped); equal when ``exact``.
"""
from __future__ import annotations

from pathlib import Path

from placer.errors import SpecError
from placer.forms.shardings import sharding_of
from placer.forms.storage import COMPRESSED, NODE_LOCAL
from placer.forms.tiers import refuse_tiers
from placer.node_local import refuse_node_local
from placer.plan import Plan
from placer.plan_price import priced_plan
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.torchrec_io import FORMAT, FORMAT_VERSION
from placer.torchrec_io import mapping
from placer.torchrec_io.constraints import to_torchrec
from placer.torchrec_io.names import DATA_TYPES, NameMap, embedding_bag_configs, identity

DEFAULT_MODULE_PATH = "sparse_arch.embedding_bag_collection"
_BUILDER = Path(__file__).with_name("plan_builder.py")
_JSON_LINE = 'PLAN_JSON = Path(__file__).with_name("plan.torchrec.json")'
_IMPORT_LINE = "    from plan_builder import "


def mapped_plan(plan: Plan, topo: Topology, wl: Workload) -> tuple[Plan, dict[str, list[str]]]:
    """The plan TorchRec will run (every placement at its nearest TorchRec equivalent) and the notes per
    table that changed. SpecError for a table TorchRec cannot run (compressed or frozen tables too). Host tables
    go table-wise UVM on a GPU of their node: the one with the most HBM left after the plan's own tables and the
    host tables placed before
    (placer's memory model: a UVM table keeps its rows in host DRAM but its lookup buffers in HBM), so the
    mapping fits wherever some order of them does."""
    tables = {t.name: t for t in wl.tables}
    refuse_node_local(plan, "export --torchrec", f"TorchRec has no {NODE_LOCAL.torchrec_lacks} (its data_parallel "
                      "all-reduces every replica's gradient)")
    refuse_tiers(plan, "export --torchrec", "TorchRec's kernels read rows in HBM or host memory only (fused, "
                 "fused_uvm, fused_uvm_caching)")
    for i, p in enumerate(plan.placements):
        if p.compression is not None:
            raise SpecError(f"table {p.table!r} is stored {p.compression.form}-compressed, and TorchRec has no "
                            f"{COMPRESSED[p.compression.form].torchrec_lacks} to run it as planned",
                            field=f"placements[{i}].compression")
        if p.table in tables and tables[p.table].frozen:
            raise SpecError(f"table {p.table!r} is frozen, and TorchRec's sharded tables have no frozen form (every "
                            "table gets the fused optimizer); drop frozen: true from the workload to export it "
                            "trained", field=f"placements[{i}].table")
    free, model = None, None
    if any(not sharding_of(p).on_gpus for p in plan.placements):
        from placer.cost import CostModel

        model = CostModel(topo, wl)
        free = dict(model.usable_memory)
        for p in plan.placements:
            if sharding_of(p).on_gpus:
                for mem, b in model.placement_cost(p).memory.items():
                    free[mem] = free.get(mem, 0.0) - b
    placements, notes = [], {}
    for p in plan.placements:
        gpu, cost = None, None
        if not sharding_of(p).on_gpus:
            node = topo.node_of[p.shards[0].device]
            best = None
            for g in topo.gpus_of_node(node) or topo.gpus:
                c = model.placement_cost(mapping.nearest_mappable(p, tables[p.table], topo, g)[0]).memory
                left = min(free.get(m, 0.0) - b for m, b in c.items()) if c else free.get(g, 0.0)
                if best is None or left > best[0]:
                    best = (left, g, c)
            _, gpu, cost = best
        q, why = mapping.nearest_mappable(p, tables[p.table], topo, gpu)
        if cost is not None:
            for mem, b in cost.items():
                free[mem] = free.get(mem, 0.0) - b
        placements.append(q)
        if why:
            notes[p.table] = why
    return plan.model_copy(update={"placements": placements, "predicted": None, "solver": None,
                                   "robustness": None}), notes


def _pooling_factors(wl: Workload) -> dict[str, list[float]]:
    """Per table, the pooling factor (lookups per sample) of every feature that reads it."""
    out: dict[str, list[float]] = {}
    tables = {t.name: t for t in wl.tables}
    for f in wl.features or ():
        t = tables.get(f.table)
        if t is not None:
            out.setdefault(f.table, []).append(f.pooling_factor if f.pooling_factor is not None else t.pooling_factor)
    return out


def export_document(plan: Plan, topo: Topology, wl: Workload, *, file: str | None = None,
                    module_path: str = DEFAULT_MODULE_PATH, price_each: bool = True, device: str = "cuda",
                    names: NameMap | None = None) -> dict:
    """The export document of ``plan`` (see the module docstring). Checks and prices the plan first
    (SpecError naming ``file``); ``price_each``: price the plan with each noted table alone mapped; ``device``:
    the placements' device, cuda or cpu (DistributedModelParallel over gloo); ``names``: the TorchRec names of
    the workload's tables and features (names.py; default placer's own)."""
    names = names or identity(wl)
    ranks = mapping.Ranks(topo, device)
    plan_step = priced_plan(plan, topo, wl, file=file, check_hashes=False)["step_time_s"]
    try:
        mapped, notes = mapped_plan(plan, topo, wl)
    except SpecError as exc:
        raise SpecError(f"TorchRec cannot run this plan: {exc.detail}", file=file, field=exc.field) from None
    try:
        mapped_step = priced_plan(mapped, topo, wl, file=file, check_hashes=False)["step_time_s"]
    except SpecError as exc:  # the plan fits; what TorchRec would run instead does not
        host = sum(not sharding_of(p).on_gpus for p in plan.placements)
        raise SpecError(f"TorchRec cannot run this plan: its nearest TorchRec equivalent does not fit placer's "
                        f"model of this machine ({exc.detail})"
                        + (f"; {host} host CPU lookup tables map to fused_uvm table-wise on their node's GPUs, whose "
                           "lookup buffers need HBM" if host else ""), file=file, field=exc.field) from None
    tables = {t.name: t for t in wl.tables}
    pooling = _pooling_factors(wl)
    entries = {}
    for i, (p, q) in enumerate(zip(plan.placements, mapped.placements)):
        t = tables[p.table]
        ps = mapping.parameter_sharding(q, ranks)
        entry = {"parameter_sharding": ps,
                 "parameter_constraints": mapping.parameter_constraints(q, ps, t, pooling.get(t.name, [])),
                 "placer": p.label()}
        if device == "cpu" and not sharding_of(q).whole_copies and any(s.host_rows for s in q.shards):
            notes.setdefault(p.table, []).append(
                "cpu: TorchRec runs fused_uvm and fused_uvm_caching as its plain host kernel there, so the kernel is "
                "written as fused (priced as placer's split; an import reads fused as every row in device memory)")
        if q.precision != "fp32":
            entry["data_type"] = DATA_TYPES[q.precision]
            notes.setdefault(p.table, []).append(
                f"{q.precision} storage: set EmbeddingBagConfig(data_type=DataType.{DATA_TYPES[q.precision]}) for "
                "this table (ParameterConstraints has no storage type)")
        if p.table in notes:
            entry["mapping_note"] = "; ".join(notes[p.table])
            if price_each and q != p:
                alone = plan.model_copy(update={"placements": [q if j == i else o
                                                               for j, o in enumerate(plan.placements)]})
                entry["mapped_step_time_s"] = priced_plan(alone, topo, wl, file=file, check_hashes=False)["step_time_s"]
        entries[names.tables[p.table]] = entry
    local = sorted({len(topo.gpus_of_node(n)) for n in topo.nodes})
    extra = {}
    if not wl.constraints.empty:  # the workload's constraints as ParameterConstraints (constraints.py)
        extra["workload_constraints"] = to_torchrec(wl, topo, names).as_json()
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "source": {"method": plan.method, "hardware": plan.hardware.model_dump(exclude_none=True),
                   "workload": plan.workload.model_dump(exclude_none=True)},
        "world_size": ranks.world_size,
        "local_world_size": local[0] if len(local) == 1 else local,
        "device": device,
        "ranks": {str(r): g for r, g in enumerate(ranks.gpus)},
        "module_path": module_path,
        "names": names.as_json(),
        "embedding_bag_configs": embedding_bag_configs(wl, names, {q.table: q.precision for q in mapped.placements}),
        "predicted": {"plan_step_time_s": plan_step, "mapped_step_time_s": mapped_step,
                      "exact": mapped.placements == plan.placements},
        "tables": entries,
        **extra,
    }


def builder_module(json_name: str, module_name: str = "plan_builder") -> str:
    """Source of the generated module: plan_builder.py, reading ``json_name`` next to itself by default, its
    usage importing it as ``module_name`` (the generated file's stem)."""
    text = _BUILDER.read_text(encoding="utf-8")
    assert _JSON_LINE in text and _IMPORT_LINE in text, "plan_builder.py lost its PLAN_JSON or usage line"
    text = text.replace(_IMPORT_LINE, f"    from {module_name} import ")
    return text.replace(_JSON_LINE, f"PLAN_JSON = Path(__file__).with_name({json_name!r})")
