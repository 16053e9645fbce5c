"""TorchRec's own objects -> the export document (needs torchrec; the import raises ImportError without it).

``document_from_plan`` reads a ShardingPlan (or one module's EmbeddingModuleShardingPlan, or a plain
{table: ParameterSharding} dict): every ParameterSharding's sharding_type, compute_kernel, ranks, sharding_spec
shards (shard_offsets, shard_sizes in rows and columns, placement 'rank:R/cuda:D' or
'rank:R/cpu') and cache load factor.
"""
from __future__ import annotations

from torchrec.distributed.types import ParameterSharding, ShardingPlan  # noqa: F401 -- fails without torchrec

from placer.errors import SpecError
from placer.torchrec_io import FORMAT, FORMAT_VERSION


def _placement_text(placement) -> str:
    """'rank:R/cuda:D' or 'rank:R/cpu' of a ShardMetadata placement (a _remote_device or a string)."""
    return str(placement)


def sharding_fields(ps: ParameterSharding) -> dict:
    """The JSON fields of one ParameterSharding (the inverse of plan_builder.parameter_sharding)."""
    spec = None
    if ps.sharding_spec is not None:
        shards = getattr(ps.sharding_spec, "shards", None)
        if shards is None:
            raise ValueError(f"sharding_spec {type(ps.sharding_spec).__name__}: placer reads EnumerableShardingSpec")
        spec = {"shards": [{"shard_offsets": list(s.shard_offsets), "shard_sizes": list(s.shard_sizes),
                            "placement": _placement_text(s.placement)} for s in shards]}
    cache = None
    if ps.cache_params is not None and ps.cache_params.load_factor is not None:
        cache = {"load_factor": ps.cache_params.load_factor}
    return {"sharding_type": str(getattr(ps.sharding_type, "value", ps.sharding_type)),
            "compute_kernel": str(getattr(ps.compute_kernel, "value", ps.compute_kernel)),
            "ranks": list(ps.ranks) if ps.ranks is not None else None,
            "sharding_spec": spec, "cache_params": cache}


def document_from_plan(obj, *, file: str = "<ShardingPlan>", data_types: dict | None = None) -> dict:
    """An export document (tables only: no source, ranks or prediction) from a TorchRec plan object.
    ``data_types``: table -> 'FP16'/'FP32' where known (a ShardingPlan does not carry it)."""
    if isinstance(obj, ShardingPlan):
        modules = obj.plan
    elif isinstance(obj, dict) and obj and all(isinstance(v, ParameterSharding) for v in obj.values()):
        modules = {"": obj}
    else:
        raise SpecError(f"expected a torchrec ShardingPlan, found {type(obj).__name__}", file=file)
    tables, module_path = {}, None
    for path, module in modules.items():
        for name, ps in module.items():
            if not isinstance(ps, ParameterSharding):
                raise SpecError(f"expected a ParameterSharding, found {type(ps).__name__}", file=file,
                                field=f"{path}.{name}")
            if name in tables:
                raise SpecError(f"table {name!r} is sharded by two modules", file=file, field=f"{path}.{name}")
            try:
                entry = {"parameter_sharding": sharding_fields(ps)}
            except ValueError as exc:
                raise SpecError(str(exc), file=file, field=f"{path}.{name}") from None
            if data_types and name in data_types:
                entry["data_type"] = data_types[name]
            tables[name] = entry
        module_path = module_path or path
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "module_path": module_path, "tables": tables}
