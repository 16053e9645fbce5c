"""TorchRec's own estimate of a plan: what its planner's perf model says of the plan placer exports.

TorchRec's EmbeddingShardingPlanner rates a proposal with its perf model (``NoopPerfModel.rate``): every shard's
``Perf`` (forward and backward compute and communication, the input distribution, in ms, from
``EmbeddingPerfEstimator``'s bandwidth constants) summed per rank, the largest rank's sum; its stats print a
critical path as well (a synchronization after each of forward/backward x compute/communication, communication
serialized per module and sharding type). Neither covers the dense model or DMP's own work: they are what the
planner minimizes, not a step time.

``torchrec_estimate`` rates ANY exported plan that way: the export document's ``parameter_constraints`` pin each
table to its sharding type and kernel, TorchRec's EmbeddingEnumerator proposes that one option per table, its
shards are replaced by the document's (sizes, offsets, ranks; a data-parallel table on every rank it lists), and
TorchRec's estimators price them again. Row-wise types are priced on CPU ranks too (DMP runs them there; TorchRec's
sharder offers them to its planner on GPUs only). ``topology``: the TorchRec Topology arguments; placer's
``planner_inputs`` (the machine as placer tells TorchRec's planner in the ``torchrec`` method) or
planner.``default_topology`` (what a TorchRec user writes: world size, ranks per host and compute device, TorchRec's
constants for the rest).
"""
from __future__ import annotations

from dataclasses import dataclass

from placer.torchrec_io.planner import PlannerInputs, meta_model, quietly


@dataclass
class TorchRecEstimate:
    """TorchRec's figures for one plan, milliseconds (TorchRec's unit)."""

    rating_ms: float                 # its perf model's rating: the largest rank's sum of shard perfs
    critical_path_ms: float | None   # its stats' critical path (None where this TorchRec has no such function)
    per_rank_ms: list[float]
    parts_ms: dict[str, float]       # fwd_compute, fwd_comms, bwd_compute, bwd_comms, input_dist_comms: all ranks

    def as_json(self) -> dict:
        return {"rating_ms": self.rating_ms, "critical_path_ms": self.critical_path_ms,
                "per_rank_ms": self.per_rank_ms, "parts_ms": self.parts_ms}


def _shards(entry: dict, option, name: str):
    """The document's shards of one table as TorchRec Shard objects (the enumerator's, ranks set, for a
    data-parallel table)."""
    from torchrec.distributed.planner.types import Shard

    ps = entry["parameter_sharding"]
    ranks = [int(r) for r in ps["ranks"]]
    spec = ps.get("sharding_spec")
    if not spec:  # data_parallel: a whole copy per rank
        base = option.shards[0]
        return [Shard(size=list(base.size), offset=list(base.offset), rank=r) for r in ranks]
    shards = spec["shards"]
    if len(shards) != len(ranks):
        raise ValueError(f"table {name}: {len(shards)} shards but {len(ranks)} ranks")
    return [Shard(size=list(s["shard_sizes"]), offset=list(s["shard_offsets"]), rank=r) for s, r in zip(shards, ranks)]


def _estimate(doc: dict, inputs: PlannerInputs, topology: dict) -> TorchRecEstimate:
    from torchrec.distributed.planner import ParameterConstraints
    from torchrec.distributed.planner import Topology as TrecTopology
    from torchrec.distributed.planner.enumerators import EmbeddingEnumerator
    from torchrec.distributed.planner.perf_models import NoopPerfModel
    from torchrec.distributed.planner.shard_estimators import EmbeddingPerfEstimator, EmbeddingStorageEstimator

    known = {t for t, _, _ in inputs.tables}
    unknown = sorted(set(doc["tables"]) - known)
    if unknown:
        raise ValueError(f"the document names tables the workload lacks: {', '.join(unknown[:5])} (TorchRec names "
                         "other than placer's are not read here)")
    constraints = {t: ParameterConstraints(**{k: v for k, v in e["parameter_constraints"].items()
                                              if k in ("sharding_types", "compute_kernels", "pooling_factors")})
                   for t, e in doc["tables"].items()}
    topo = TrecTopology(**topology)
    enumerator = EmbeddingEnumerator(topo, inputs.batch_size, constraints,
                                     estimator=[EmbeddingPerfEstimator(topo, constraints),
                                                EmbeddingStorageEstimator(topo, constraints)])
    ebc, sharder = meta_model(inputs)
    # DMP runs row-wise shards on CPU ranks, which TorchRec's sharder does not offer its planner there: the
    # document's types are taken as given (each pinned by its constraints), whatever the compute device
    every_type = sharder.sharding_types
    sharder.sharding_types = lambda _device: every_type("cuda")
    options = {}
    for o in enumerator.enumerate(ebc, [sharder]):
        options.setdefault(o.name, o)  # one option per table: its type and kernel are pinned
    missing = sorted(known - set(options))
    if missing:
        raise ValueError(f"TorchRec proposed no option for {', '.join(missing[:5])}")
    for name, option in options.items():
        option.shards = _shards(doc["tables"][name], option, name)
    chosen = list(options.values())
    enumerator.populate_estimates(chosen)
    per_rank = [0.0] * topo.world_size
    parts = dict.fromkeys(("fwd_compute", "fwd_comms", "bwd_compute", "bwd_comms", "input_dist_comms"), 0.0)
    for o in chosen:
        for s in o.shards:
            per_rank[s.rank] += s.perf.total
            for k in parts:
                parts[k] += float(getattr(s.perf, k, 0.0) or 0.0)
    try:
        from torchrec.distributed.planner.stats import _calculate_critical_path

        critical = float(_calculate_critical_path(chosen).total())
    except (ImportError, AttributeError):
        critical = None
    return TorchRecEstimate(rating_ms=float(NoopPerfModel(topo).rate(chosen)), critical_path_ms=critical,
                            per_rank_ms=per_rank, parts_ms=parts)


def torchrec_estimate(doc: dict, inputs: PlannerInputs, topology: dict | None = None) -> TorchRecEstimate:
    """TorchRec's perf model's figures for the plan in export document ``doc`` (module docstring; needs torchrec);
    ``topology``: TorchRec Topology arguments (default ``inputs.topology``, the machine as placer describes it).
    ValueError where the document cannot be read that way."""
    return quietly(_estimate, doc, inputs, topology or inputs.topology)
