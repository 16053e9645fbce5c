"""Build TorchRec's ShardingPlan and ParameterConstraints from a placer export (``placer export --torchrec``).

Generated next to its JSON by placer; needs torchrec (not placer). Usage::

    from plan_builder import embedding_bag_configs, sharding_plan, parameter_constraints, workload_constraints
    ebc = EmbeddingBagCollection(tables=embedding_bag_configs(), device=torch.device("meta"))
    model = ...                            # the model holding ebc at the document's module_path
    plan = sharding_plan()                 # torchrec.distributed.types.ShardingPlan
    model = DistributedModelParallel(model, env=env, plan=plan)
    # embedding_bag_configs(): the workload's tables (rows, dims, features, fp16 storage) by TorchRec's names
    # or let TorchRec's planner choose under the same constraints:
    # EmbeddingShardingPlanner(topology, constraints=parameter_constraints())
    # or under the workload's constraints only (what each table may take): constraints=workload_constraints()

Ranks are global ranks (placer's node<i>/gpu<j> is rank i * gpus_per_node + j, on cuda:<j>, or on cpu for an
export with --device cpu); the document's "ranks" object lists them. Row-wise shards are one per rank of the
group in rank order, in TorchRec's blocks of ceil(rows / ranks) (the way it routes ids), empty ones included.
Sizes are rows and columns (elements), offsets [first row, first column].
"""
from __future__ import annotations

import json
from pathlib import Path

PLAN_JSON = Path(__file__).with_name("plan.torchrec.json")


def read_document(path=None) -> dict:
    """The export document (JSON) at ``path`` (default: the one written beside this module); a dict is taken as
    the document itself (every function's ``path`` may be one)."""
    if isinstance(path, dict):
        return path
    return json.loads(Path(path or PLAN_JSON).read_text(encoding="utf-8"))


def parameter_sharding(fields: dict):
    """A ParameterSharding from the JSON fields of one table (its "parameter_sharding" object)."""
    from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
    from torchrec.distributed.types import CacheParams, ParameterSharding

    spec = fields.get("sharding_spec")
    if spec is not None:
        spec = EnumerableShardingSpec([
            ShardMetadata(shard_offsets=list(s["shard_offsets"]), shard_sizes=list(s["shard_sizes"]),
                          placement=s["placement"]) for s in spec["shards"]])
    cache = fields.get("cache_params")
    return ParameterSharding(sharding_type=fields["sharding_type"], compute_kernel=fields["compute_kernel"],
                             ranks=list(fields["ranks"]) if fields.get("ranks") is not None else None,
                             sharding_spec=spec,
                             cache_params=CacheParams(load_factor=cache["load_factor"]) if cache else None)


def sharding_plan(path=None, module_path: str | None = None):
    """TorchRec's ShardingPlan: one EmbeddingModuleShardingPlan (table name -> ParameterSharding) at
    ``module_path`` (default: the document's "module_path", where the EmbeddingBagCollection sits)."""
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ShardingPlan

    doc = read_document(path)
    module = EmbeddingModuleShardingPlan({name: parameter_sharding(t["parameter_sharding"])
                                          for name, t in doc["tables"].items()})
    return ShardingPlan({module_path or doc["module_path"]: module})


def parameter_constraints(path=None) -> dict:
    """Table name -> TorchRec ParameterConstraints pinning the placer plan's sharding type and kernel."""
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import CacheParams

    out = {}
    for name, t in read_document(path)["tables"].items():
        c = dict(t["parameter_constraints"])
        if c.get("cache_params"):
            c["cache_params"] = CacheParams(**c["cache_params"])
        out[name] = ParameterConstraints(**c)
    return out


def workload_constraints(path=None) -> dict:
    """Table name -> TorchRec ParameterConstraints saying the workload's own constraints (what its tables may
    take, not the plan's choice; empty where the workload has none). The document's
    workload_constraints.not_carried lists what TorchRec cannot say; a headroom is its topology.hbm_cap, bytes."""
    from torchrec.distributed.planner.types import ParameterConstraints

    block = read_document(path).get("workload_constraints") or {}
    return {name: ParameterConstraints(**fields) for name, fields in (block.get("parameter_constraints") or {}).items()}


def embedding_bag_configs(path=None) -> list:
    """TorchRec EmbeddingBagConfigs of the workload's tables (num_embeddings rows, embedding_dim columns,
    feature_names, SUM pooling, FP16 / BF16 for tables placer stores at 16 bits), in the workload's order."""
    from torchrec import EmbeddingBagConfig, PoolingType
    from torchrec.types import DataType

    doc = read_document(path)
    if "embedding_bag_configs" not in doc:
        raise KeyError("this export has no embedding_bag_configs (written by placer export since issue 40)")
    return [EmbeddingBagConfig(name=c["name"], num_embeddings=c["num_embeddings"], embedding_dim=c["embedding_dim"],
                               feature_names=list(c["feature_names"]), pooling=PoolingType[c["pooling"]],
                               data_type=DataType[c["data_type"]]) for c in doc["embedding_bag_configs"]]


def fp16_tables(path=None) -> list:
    """Names of the tables placer stores at fp16 (EmbeddingBagConfig data_type=DataType.FP16)."""
    return [name for name, t in read_document(path)["tables"].items() if t.get("data_type") == "FP16"]


def bf16_tables(path=None) -> list:
    """Names of the tables placer stores at bf16 (EmbeddingBagConfig data_type=DataType.BF16)."""
    return [name for name, t in read_document(path)["tables"].items() if t.get("data_type") == "BF16"]


if __name__ == "__main__":
    print(sharding_plan())
