"""A workload's constraints (specs/constraints.py) <-> TorchRec's ParameterConstraints, both ways, and what neither
side can say.

TorchRec's ``ParameterConstraints`` is per table; placer's entries name tables by names or globs, and a table under
several entries meets all of them, so the export first intersects every entry that names a table. Each field's fate:

placer -> TorchRec (``to_torchrec``):

- ``shardings`` -> ``sharding_types``: table_wise -> table_wise, row_wise -> row_wise and table_row_wise,
  column_wise -> column_wise and table_column_wise, data_parallel -> data_parallel. ``host`` (a CPU lookup in a
  host's memory) has no TorchRec sharding: not carried; a table allowed host alone gets the nearest, table_wise (as
  ``export`` maps a host table's placement).
- ``memory`` -> ``compute_kernels``: hbm -> fused, and dense where data_parallel is allowed (TorchRec runs
  data_parallel on dense only); cached -> fused_uvm_caching; uvm -> fused_uvm; ``host``: not carried (a table
  allowed host alone gets the nearest, fused_uvm). data_parallel allowed with memory that excludes hbm (placer's
  replicas with rows off the GPU): TorchRec's data_parallel keeps every row in HBM, so it is left out (not carried).
- ``devices``, ``min_shards`` / ``max_shards``, ``precisions``, ``colocate``: not carried. ParameterConstraints has
  no ranks (TorchRec pins a table only in a hand-written ShardingPlan), no shard count (its sharding type fixes it:
  table_wise 1, row_wise every rank, table_row_wise a node's ranks, column_wise embedding_dim / min_partition
  pieces), no storage type (EmbeddingBagConfig.data_type is the table's, not a constraint) and no groups.
- ``hbm_headroom_GiB`` -> TorchRec's ``Topology(hbm_cap=...)``: HBM per rank less placer's reserve and the
  headroom (bytes; the least of the machine's GPUs), as the torchrec method tells TorchRec's planner the machine.
- ``pooling_factors`` (one per feature reading the table, lookups per sample) are written too: TorchRec's planner
  needs them (its default is 1.0); they are the workload's facts, not constraints.

TorchRec -> placer (``from_torchrec``):

- ``sharding_types``: the placer shardings of those types (table_row_wise -> row_wise, table_column_wise ->
  column_wise; where only the ``table_`` form is given, placer's row_wise/column_wise is wider: said);
  ``grid_shard``: not carried (placer has no grid sharding).
- ``compute_kernels``: dense and fused -> hbm, fused_uvm -> uvm, fused_uvm_caching -> cached; quant, key_value,
  the virtual-table kernels, customized and triton ones: not carried (placer prices none of them). TorchRec pairs
  data_parallel with dense only: kernels without dense leave data_parallel out; dense alone allows data_parallel
  alone. A pair placer cannot say as "shardings AND memory" (dense with fused_uvm but not fused) is said.
- ``enforce_hbm`` true: memory hbm (FBGEMM then keeps every row of a UVM or caching table in HBM).
- ``device_group``: cuda leaves out placer's host sharding; cpu (TorchRec's heterogeneous CPU planning): not
  carried.
- ``cache_params`` (``load_factor``, algorithm, ...): not carried: placer's hot-row fraction is its own choice
  per placement (a plan's import reads it), not a constraint.
- ``min_partition`` (a column-wise piece's least width, columns): not carried; placer bounds the number of shards
  (min/max_shards), not a piece's width.
- ``pooling_factors``, ``feature_names``: the workload's facts; said where they differ from the workload's (which
  are kept). ``num_poolings``, ``batch_sizes``, ``is_weighted``, ``stochastic_rounding``, ``bounds_check_mode``,
  ``output_dtype``, ``key_value_params``, ``use_virtual_table``: not carried (placer prices one batch for every
  feature, unweighted SUM pooling, its own rounding and outputs, no key-value store).
- ``Topology(hbm_cap=...)`` -> ``hbm_headroom_GiB`` = (HBM per rank less placer's reserve, the least over the GPUs)
  - hbm_cap, GiB, where positive; the Topology's other fields describe the machine, which is the hardware spec's.

A field left at TorchRec's default (None, False, pooling_factors [1.0]) says nothing and is not reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from placer.errors import InfeasibleError, SpecError
from placer.forms.names import DATA_PARALLEL, TABLE_WISE
from placer.forms.shardings import NARROWER_TORCHREC_TYPES, SHARDINGS
from placer.forms.shardings import TORCHREC_SHARDING_TYPES as TORCHREC_TYPES
from placer.specs.constraints import PRECISIONS, Constraints, TableConstraint
from placer.units import GiB

#: TorchRec 1.8's ShardingType values and EmbeddingComputeKernel values (checked against torchrec by the tests)
TORCHREC_SHARDING_TYPES = tuple(TORCHREC_TYPES.values())
TORCHREC_KERNELS = ("dense", "fused", "fused_uvm", "fused_uvm_caching", "quant", "quant_uvm", "quant_uvm_caching",
                    "key_value", "customized_kernel", "ssd_virtual_table", "dram_virtual_table",
                    "dram_ssd_virtual_table", "fused_triton")
#: ParameterConstraints' fields (TorchRec 1.8), in its order
FIELDS = ("sharding_types", "compute_kernels", "min_partition", "pooling_factors", "num_poolings", "batch_sizes",
          "is_weighted", "cache_params", "enforce_hbm", "stochastic_rounding", "bounds_check_mode", "feature_names",
          "output_dtype", "device_group", "key_value_params", "use_virtual_table")
#: placer's memory class -> the TorchRec kernels that keep rows so (host: none); dense is added for data_parallel
KERNELS_OF_MEMORY = {"hbm": ("fused",), "cached": ("fused_uvm_caching",), "uvm": ("fused_uvm",), "host": ()}
#: TorchRec kernel -> placer's memory class (the kernels placer prices)
MEMORY_OF_KERNEL = {"dense": "hbm", "fused": "hbm", "fused_uvm": "uvm", "fused_uvm_caching": "cached"}
_DP = DATA_PARALLEL
_GPU_SHARDINGS = tuple(n for n, f in SHARDINGS.items() if f.on_gpus)
#: why each placer-only field is not carried to TorchRec
_PLACER_ONLY = {
    "devices": "ParameterConstraints has no ranks (TorchRec pins a table only in a hand-written ShardingPlan)",
    "min_shards": "TorchRec's sharding type fixes the shard count (table_wise 1, row_wise every rank, "
                  "table_row_wise a node's ranks, column_wise embedding_dim / min_partition pieces)",
    "max_shards": "TorchRec's sharding type fixes the shard count (table_wise 1, row_wise every rank, "
                  "table_row_wise a node's ranks, column_wise embedding_dim / min_partition pieces)",
    "precisions": "ParameterConstraints has no storage type (EmbeddingBagConfig.data_type sets the table's)",
    "colocate": "ParameterConstraints has no groups of tables"}
#: why each TorchRec-only field is not carried to placer
_TORCHREC_ONLY = {
    "min_partition": "a column-wise piece's least width (columns); placer bounds the number of shards "
                     "(min_shards/max_shards), not a piece's width",
    "num_poolings": "placer prices one pooling per feature and sample",
    "batch_sizes": "placer prices the workload's one batch for every feature",
    "is_weighted": "placer prices unweighted SUM pooling",
    "cache_params": "placer's hot-row fraction is its own choice per placement (a plan's import reads it), "
                    "not a constraint",
    "stochastic_rounding": "placer prices its own rounding; FBGEMM's setting is not a placement constraint",
    "bounds_check_mode": "not a placement constraint (FBGEMM's index check)",
    "output_dtype": "placer prices the dense dtype's outputs; not a placement constraint",
    "key_value_params": "placer prices no key-value (SSD) store",
    "use_virtual_table": "placer prices no virtual-table kernel"}


@dataclass(frozen=True)
class NotCarried:
    """A constraint one side could not carry to the other: the table (placer's name; ``*`` for the whole
    machine), the field (placer's on export, TorchRec's on import) and why."""

    table: str
    field: str
    why: str

    def text(self) -> str:
        return f"{self.table}: {self.field}: {self.why}"

    def as_json(self) -> dict:
        return {"table": self.table, "field": self.field, "why": self.why}


@dataclass
class TableRule:
    """One table's placer constraints, every entry naming it intersected (None: unconstrained). ``devices``,
    ``colocate``: the entries ("constraints.tables[i]") that pin or group it."""

    shardings: set[str] | None = None
    memory: set[str] | None = None
    min_shards: int | None = None
    max_shards: int | None = None
    precisions: set[str] | None = None
    devices: list[str] = field(default_factory=list)
    colocate: list[str] = field(default_factory=list)


def _meet(a: set | None, b: list | None) -> set | None:
    return a if b is None else (set(b) if a is None else a & set(b))


def table_rules(wl) -> dict[str, TableRule]:
    """Per constrained table (workload order), its entries intersected."""
    out: dict[str, TableRule] = {}
    for i, c in enumerate(wl.constraints.tables):
        where = f"constraints.tables[{i}]" + (f" ({c.name})" if c.name else "")
        for name in wl.constrained_tables(i):
            r = out.setdefault(name, TableRule())
            r.shardings, r.memory = _meet(r.shardings, c.shardings), _meet(r.memory, c.memory)
            r.precisions = _meet(r.precisions, c.precisions)
            if c.min_shards is not None:
                r.min_shards = max(r.min_shards or 0, c.min_shards)
            if c.max_shards is not None:
                r.max_shards = c.max_shards if r.max_shards is None else min(r.max_shards, c.max_shards)
            if c.devices is not None:
                r.devices.append(f"{where}: {', '.join(c.devices)}")
            if c.colocate:
                r.colocate.append(f"{where} with {', '.join(n for n in wl.constrained_tables(i) if n != name)}")
    order = [t.name for t in wl.tables]
    return {n: out[n] for n in order if n in out}


def _ordered(names, order) -> list[str]:
    return [n for n in order if n in names]


def table_to_torchrec(name: str, r: TableRule) -> tuple[dict, list[NotCarried]]:
    """(sharding_types and compute_kernels of one table's rule, the ones left unset omitted; what was not
    carried). InfeasibleError where the entries together allow no sharding or memory."""
    lost: list[NotCarried] = []
    for what, value in (("shardings", r.shardings), ("memory", r.memory)):
        if value is not None and not value:
            raise InfeasibleError(f"table {name!r}: its constraints together allow no {what}")
    for key, value in (("devices", r.devices), ("min_shards", r.min_shards), ("max_shards", r.max_shards),
                       ("colocate", r.colocate)):
        if value:
            shown = "; ".join(value) if isinstance(value, list) else value
            lost.append(NotCarried(name, key, f"{shown}: {_PLACER_ONLY[key]}"))
    if r.precisions is not None and r.precisions != set(PRECISIONS):
        one = next(iter(r.precisions)) if len(r.precisions) == 1 else None
        hint = f"; set EmbeddingBagConfig(data_type=DataType.{one.upper()})" if one in ("fp16", "bf16") else ""
        lost.append(NotCarried(name, "precisions", f"{', '.join(sorted(r.precisions))}: "
                                                   f"{_PLACER_ONLY['precisions']}{hint}"))
    out: dict = {}
    gpu = None if r.shardings is None else r.shardings - {"host"}
    if r.shardings is not None and "host" in r.shardings:
        lost.append(NotCarried(name, "shardings", "host (a CPU lookup in a host's memory) has no TorchRec sharding"
                               + ("; nearest: table_wise" if not gpu else "")))
        gpu = gpu or {TABLE_WISE}
    mem = None if r.memory is None else r.memory - {"host"}
    if r.memory is not None and "host" in r.memory:
        lost.append(NotCarried(name, "memory", "host (rows looked up by the host CPU) has no TorchRec kernel"
                               + ("; nearest: fused_uvm" if not mem else "")))
        mem = mem or {"uvm"}
    if mem is not None and "hbm" not in mem and gpu is not None and _DP in gpu:
        shown = ", ".join(_ordered(mem, KERNELS_OF_MEMORY))
        lost.append(NotCarried(name, "shardings", f"data_parallel with memory {shown}: TorchRec's data_parallel "
                                                  "keeps every row in HBM (dense)"
                               + ("; nearest: data_parallel on dense" if gpu == {_DP} else "; left out")))
        if gpu == {_DP}:
            mem = {"hbm"}
        else:
            gpu = gpu - {_DP}
    if gpu is not None:
        out["sharding_types"] = [st for s in _ordered(gpu, SHARDINGS) for st in SHARDINGS[s].torchrec_types]
    if mem is not None:
        kernels = {k for m in mem for k in KERNELS_OF_MEMORY[m]}
        if "hbm" in mem and (gpu is None or _DP in gpu):
            kernels.add("dense")
        out["compute_kernels"] = _ordered(kernels, MEMORY_OF_KERNEL)
    return out, lost


@dataclass
class Exported:
    """The workload's constraints in TorchRec's terms: ParameterConstraints fields per table (TorchRec's names),
    the HBM headroom (GiB) and Topology.hbm_cap (bytes per rank; None without headroom), what was not carried."""

    parameter_constraints: dict[str, dict]
    hbm_headroom_GiB: float
    hbm_cap: int | None
    not_carried: list[NotCarried]

    def as_json(self) -> dict:
        out = {"parameter_constraints": self.parameter_constraints, "hbm_headroom_GiB": self.hbm_headroom_GiB}
        if self.hbm_cap is not None:
            out["topology"] = {"hbm_cap": self.hbm_cap}
        out["not_carried"] = [n.as_json() for n in self.not_carried]
        return out


def usable_hbm_per_rank(topo) -> float | None:
    """HBM per GPU less placer's reserve, bytes, the least over the machine's GPUs (what the torchrec method
    tells TorchRec as hbm_cap); None without GPUs."""
    mems = [topo.memories.get(g) for g in topo.gpus]
    caps = [m.usable_bytes for m in mems if m is not None and m.kind == "hbm"]
    return min(caps) if caps else None


def pooling_factors(wl) -> dict[str, list[float]]:
    """Per table, the pooling factor (lookups per sample) of every feature reading it, in feature order."""
    out: dict[str, list[float]] = {t.name: [] for t in wl.tables}
    for f in wl.resolved_features:
        out[f.table].append(float(f.pooling_factor))
    return out


def to_torchrec(wl, topo=None, names=None) -> Exported:
    """The workload's constraints as ParameterConstraints fields per table (sharding_types, compute_kernels,
    pooling_factors), keyed by TorchRec's names (``names``: a NameMap, default placer's), and the headroom as
    Topology.hbm_cap on ``topo`` (module docstring)."""
    pcs, lost = {}, []
    pooling = pooling_factors(wl)
    for name, rule in table_rules(wl).items():
        fields, why = table_to_torchrec(name, rule)
        lost += why
        fields["pooling_factors"] = pooling[name] or [1.0]
        pcs[names.tables[name] if names else name] = fields
    headroom = wl.constraints.hbm_headroom_GiB
    cap = None
    if headroom:
        usable = usable_hbm_per_rank(topo) if topo is not None else None
        if usable is None:
            lost.append(NotCarried("*", "hbm_headroom_GiB", f"{headroom:g} GiB: no GPU HBM to take it from"))
        else:
            cap = int(usable - headroom * GiB)
    return Exported(pcs, headroom, cap, lost)


# ---- TorchRec -> placer ---------------------------------------------------------------------------------------


@dataclass
class Imported:
    """TorchRec's constraints as placer's: the Constraints, per entry the TorchRec fields it came from (for the
    YAML's comments), and what was not carried."""

    constraints: Constraints
    sources: list[str]
    not_carried: list[NotCarried]


def _strings(value, allowed: tuple[str, ...], file: str, fld: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) for v in value):
        raise SpecError(f"expected a non-empty list of names, got {value!r:.80}", file=file, field=fld)
    bad = [v for v in value if v not in allowed]
    if bad:
        raise SpecError(f"{bad[0]!r} is not one of TorchRec's: {', '.join(allowed)}", file=file, field=fld)
    return list(dict.fromkeys(value))


def _is_default(key: str, value) -> bool:
    return value is None or (key in ("is_weighted", "use_virtual_table") and value is False) or (
        key == "pooling_factors" and value in ([1.0], [1]))


def _memory_and_shardings(name: str, fields: dict, file: str, fld: str) -> tuple[set | None, set | None, list]:
    """(shardings, memory, not carried) of one table's sharding_types, compute_kernels, enforce_hbm and
    device_group."""
    lost = []
    types = fields.get("sharding_types")
    kernels = fields.get("compute_kernels")
    shardings = memory = None
    if types is not None:
        types = _strings(types, TORCHREC_SHARDING_TYPES, file, f"{fld}.sharding_types")
        if "grid_shard" in types:
            lost.append(NotCarried(name, "sharding_types", "grid_shard: placer has no grid sharding"))
        shardings = {SHARDINGS_OF_TYPE[t] for t in types if t in SHARDINGS_OF_TYPE}
        for wide, narrow in NARROWER_TORCHREC_TYPES:
            if narrow in types and wide not in types:
                lost.append(NotCarried(name, "sharding_types", f"{narrow} alone: read as placer's {wide}, which may "
                                                               "also span nodes"))
        if not shardings:
            raise SpecError(f"sharding_types {types}: placer has none of them (it reads "
                            f"{', '.join(SHARDINGS_OF_TYPE)})", file=file, field=f"{fld}.sharding_types")
    if kernels is not None:
        kernels = _strings(kernels, TORCHREC_KERNELS, file, f"{fld}.compute_kernels")
        other = [k for k in kernels if k not in MEMORY_OF_KERNEL]
        if other:
            lost.append(NotCarried(name, "compute_kernels", f"{', '.join(other)}: placer prices none of them"))
        priced = [k for k in kernels if k in MEMORY_OF_KERNEL]
        if not priced:
            raise SpecError(f"compute_kernels {kernels}: placer prices none of them (it prices "
                            f"{', '.join(MEMORY_OF_KERNEL)})", file=file, field=f"{fld}.compute_kernels")
        memory = {MEMORY_OF_KERNEL[k] for k in priced}
        if fields.get("enforce_hbm") is True:  # FBGEMM keeps every row in HBM whatever the kernel
            memory = {"hbm"}
        dp_ok, rest_ok = "dense" in priced, any(k != "dense" for k in priced)
        if not dp_ok:  # TorchRec runs data_parallel on dense only
            if shardings is not None:
                shardings = shardings - {_DP}
            elif "hbm" in memory:
                shardings = set(_GPU_SHARDINGS) - {_DP}
        if not rest_ok:
            shardings = {_DP} & (shardings if shardings is not None else {_DP})
        elif dp_ok and "fused" not in priced and (shardings is None or shardings - {_DP}):
            lost.append(NotCarried(name, "compute_kernels", "dense with " + ", ".join(k for k in priced if k != "dense")
                                   + " but not fused: placer's memory hbm also lets the sharded forms keep every row "
                                     "in HBM (it cannot say 'hbm for data_parallel only')"))
        if shardings is not None and not shardings:
            raise SpecError(f"sharding_types {types} and compute_kernels {kernels} allow no pair TorchRec runs "
                            "(data_parallel runs on dense only, the other types on fused kernels)",
                            file=file, field=fld)
    if fields.get("enforce_hbm") is True and kernels is None:
        memory = {"hbm"}
    group = fields.get("device_group")
    if group is not None:
        if group not in ("cuda", "cpu"):
            raise SpecError(f"device_group {group!r}: expected cuda or cpu", file=file, field=f"{fld}.device_group")
        if group == "cpu":
            lost.append(NotCarried(name, "device_group", "cpu (TorchRec's planning on CPU ranks): placer's nearest, "
                                                         "host sharding, is a CPU lookup of a GPU job's rows"))
        elif memory is None and shardings is None:
            shardings = set(_GPU_SHARDINGS)
    return shardings, memory, lost


#: TorchRec sharding type -> placer's sharding
SHARDINGS_OF_TYPE = {st: n for n, f in SHARDINGS.items() for st in f.torchrec_types}


def _facts(name: str, fields: dict, wl, names, feats: list[str]) -> list[NotCarried]:
    """The workload facts a ParameterConstraints repeats (pooling_factors, feature_names): said where they differ
    from the workload's, which are kept."""
    lost = []
    pooling = pooling_factors(wl)[name]
    pf = fields.get("pooling_factors")
    if pf is not None and not _is_default("pooling_factors", pf) and [float(v) for v in pf] != pooling:
        lost.append(NotCarried(name, "pooling_factors", f"{pf} differ from the workload's {pooling} "
                                                        "(features[].pooling_factor; the workload's kept)"))
    fn = fields.get("feature_names")
    if fn is not None and list(fn) != feats:
        lost.append(NotCarried(name, "feature_names", f"{fn} differ from the workload's features reading the table "
                                                      f"{feats} (the workload's kept)"))
    return lost


def _check_types(fields: dict, file: str, fld: str) -> None:
    for key in ("pooling_factors", "num_poolings", "batch_sizes"):
        v = fields.get(key)
        if v is not None and (not isinstance(v, (list, tuple)) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in v)):
            raise SpecError(f"expected a list of non-negative numbers, got {v!r:.80}", file=file, field=f"{fld}.{key}")
    for key in ("is_weighted", "enforce_hbm", "stochastic_rounding", "use_virtual_table"):
        v = fields.get(key)
        if v is not None and not isinstance(v, bool):
            raise SpecError(f"expected true or false, got {v!r:.80}", file=file, field=f"{fld}.{key}")
    v = fields.get("min_partition")
    if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise SpecError(f"expected a positive number of columns, got {v!r:.80}", file=file,
                        field=f"{fld}.min_partition")
    fn = fields.get("feature_names")
    if fn is not None and (not isinstance(fn, (list, tuple)) or not all(isinstance(x, str) for x in fn)):
        raise SpecError(f"expected a list of feature names, got {fn!r:.80}", file=file, field=f"{fld}.feature_names")


def from_torchrec(pcs: dict, wl, *, file: str, names=None, headroom_GiB: float = 0.0,
                  field_of=lambda name: name) -> Imported:
    """Placer's Constraints from ParameterConstraints fields per TorchRec table name (``names``: a NameMap, the
    TorchRec names of the workload's tables and features; default placer's). Tables with the same shardings and
    memory share one entry. ``field_of(table)``: how messages name a table's entry in the file. SpecError naming
    the file and field for an unknown table, field or value, or a table whose fields allow nothing placer prices."""
    placer_of = {v: k for k, v in names.tables.items()} if names else {t.name: t.name for t in wl.tables}
    feature_names = {t.name: [] for t in wl.tables}
    for f in wl.resolved_features:
        feature_names[f.table].append(names.features[f.name] if names else f.name)
    grouped: dict[tuple, list[str]] = {}
    sources: dict[tuple, list[str]] = {}
    lost: list[NotCarried] = []
    for trec, fields in pcs.items():
        fld = field_of(trec)
        if trec not in placer_of:
            raise SpecError(f"table {trec!r} is not in workload {wl.name!r} (its tables: "
                            f"{', '.join(list(placer_of)[:8])}{', ...' if len(placer_of) > 8 else ''}; where the "
                            "file uses other names, give --names as export --names takes it)", file=file, field=fld)
        name = placer_of[trec]
        if not isinstance(fields, dict):
            raise SpecError(f"expected ParameterConstraints fields, got {type(fields).__name__}", file=file, field=fld)
        unknown = [k for k in fields if k not in FIELDS]
        if unknown:
            raise SpecError(f"{unknown[0]!r} is not a ParameterConstraints field (TorchRec's: {', '.join(FIELDS)})",
                            file=file, field=f"{fld}.{unknown[0]}")
        _check_types(fields, file, fld)
        shardings, memory, why = _memory_and_shardings(name, fields, file, fld)
        lost += why + _facts(name, fields, wl, names, feature_names[name])
        for key, reason in _TORCHREC_ONLY.items():
            if key in fields and not _is_default(key, fields[key]):
                lost.append(NotCarried(name, key, f"{_shown(fields[key])}: {reason}"))
        if shardings is None and memory is None:
            continue
        key = (tuple(_ordered(shardings, SHARDINGS)) if shardings is not None else None,
               tuple(_ordered(memory, KERNELS_OF_MEMORY)) if memory is not None else None)
        grouped.setdefault(key, []).append(name)
        sources.setdefault(key, []).append(_source(trec, fields))
    order = {t.name: i for i, t in enumerate(wl.tables)}
    entries = []
    for (sh, mem), tables in sorted(grouped.items(), key=lambda kv: min(order[n] for n in kv[1])):
        entries.append(TableConstraint(tables=sorted(tables, key=order.get), shardings=list(sh) if sh else None,
                                       memory=list(mem) if mem else None))
    srcs = ["; ".join(sources[k]) for k in sorted(grouped, key=lambda k: min(order[n] for n in grouped[k]))]
    return Imported(Constraints(hbm_headroom_GiB=headroom_GiB, tables=entries), srcs, lost)


def _shown(value) -> str:
    text = value if isinstance(value, str) and value.isidentifier() else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _source(trec: str, fields: dict) -> str:
    said = [f"{k} {', '.join(map(str, fields[k]))}" if isinstance(fields[k], list) else f"{k} {fields[k]}"
            for k in ("sharding_types", "compute_kernels", "enforce_hbm", "device_group") if fields.get(k) is not None]
    return f"{trec}: {'; '.join(said)}"


def topology_differences(args: dict, topo) -> list[NotCarried]:
    """What a TorchRec Topology's arguments other than hbm_cap say that the hardware spec does not: a world_size,
    local_world_size or compute_device other than the spec's, and any other argument (bandwidths, ddr_cap, ...):
    the machine is the hardware spec's."""
    gpus = list(topo.gpus)
    per_node = sorted({len(topo.gpus_of_node(n)) for n in topo.nodes if topo.gpus_of_node(n)})
    device = "cpu" if any(topo.is_unified(g) for g in gpus) else "cuda"
    expected = {"world_size": len(gpus), "local_world_size": per_node[0] if len(per_node) == 1 else None,
                "compute_device": device}
    out = [NotCarried("*", f"topology.{k}", f"{v!r}, but {topo.spec.name} has {expected[k]!r}: the machine is the "
                                            "hardware spec's") for k, v in args.items()
           if k in expected and v != expected[k]]
    other = sorted(k for k in args if k not in expected)
    if other:
        out.append(NotCarried("*", "topology", f"{', '.join(other)}: the machine is the hardware spec's (placer "
                                               "reads a Topology's hbm_cap only, as the headroom)"))
    return out


def headroom_from_hbm_cap(hbm_cap, topo, *, file: str, fld: str) -> tuple[float, list[NotCarried]]:
    """hbm_headroom_GiB from a TorchRec Topology's hbm_cap (bytes per rank): placer's usable HBM per GPU (the
    least) less hbm_cap, GiB, rounded to 1e-6 GiB; 0 where hbm_cap is at or above it (said)."""
    if isinstance(hbm_cap, bool) or not isinstance(hbm_cap, (int, float)) or hbm_cap <= 0:
        raise SpecError(f"expected a positive number of bytes, got {hbm_cap!r:.80}", file=file, field=fld)
    usable = usable_hbm_per_rank(topo)
    if usable is None:
        return 0.0, [NotCarried("*", "hbm_cap", f"{topo.spec.name} has no GPU HBM")]
    if hbm_cap >= usable:
        return 0.0, [NotCarried("*", "hbm_cap", f"{hbm_cap / GiB:.3f} GiB is at or above placer's usable HBM per "
                                                f"GPU ({usable / GiB:.3f} GiB: HBM less the reserve): no headroom")]
    return round((usable - hbm_cap) / GiB, 6), []
