"""Which rank of a distributed run does what, and whether each node's ranks fit in its memory.

- plan GPU i (the topology's GPU order: node0/gpu0, node0/gpu1, ..., node1/gpu0, ...) runs on rank i mod N
  (round-robin folding when the plan has more GPUs than processes; N must not exceed the plan's GPUs);
- a plan host (``nodeK/host``: sharding host) runs on the rank of nodeK's first GPU (one node: rank 0);
- samples: rank r owns the contiguous slice [B*r/N, B*(r+1)/N) of every global batch (``sample_slices``);
- data_parallel tables: a rank builds ONE replica (the first of the plan's replicas on its plan devices),
  pooling the rank's own samples; so a distributed run needs a replica on every rank (``check_distributable``).

The memory pre-flight estimates each rank from the step program's buffers of the part of the plan it builds
(``rank_subplan``; runner/memory.estimate_needs), in bytes: GPU memory per rank, host RAM per node (its ranks
together; on a CPU run their device parts too).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from placer.errors import SpecError
from placer.forms.shardings import sharding_of
from placer.plan import Placement, Plan
from placer.runner.memory import MemoryNeeds, check_memory, estimate_needs
from placer.specs.workload import Workload
from placer.topology import Topology


def sample_slices(batch: int, world: int) -> list[tuple[int, int]]:
    """[start, stop) of the samples each rank owns: contiguous, sizes differ by at most one."""
    return [(batch * r // world, batch * (r + 1) // world) for r in range(world)]


@dataclass(frozen=True)
class RankMap:
    """Plan devices -> ranks, and the samples each rank owns."""

    world: int
    gpus: tuple[str, ...]  # the plan's GPUs in topology order
    rank_of_device: dict[str, int]
    slices: tuple[tuple[int, int], ...]  # per rank: [start, stop) of its samples in the global batch

    def rank_of(self, device: str) -> int:
        return self.rank_of_device[device]

    def devices_of(self, rank: int) -> list[str]:
        """The plan devices (GPUs, then hosts) whose work ``rank`` runs."""
        return [d for d, r in self.rank_of_device.items() if r == rank]

    def first_gpu(self, rank: int) -> str:
        """The rank's first plan GPU: its own work (dense model, exchange, assembly) runs on that GPU's stream."""
        return self.gpus[rank]

    @property
    def gpus_per_rank(self) -> int:
        return math.ceil(len(self.gpus) / self.world)


def rank_map(topo: Topology, world: int, batch: int) -> RankMap:
    """GPU i -> rank i mod world; host of node K -> the rank of node K's first GPU (see module docstring)."""
    W = len(topo.gpus)
    if world < 1:
        raise SpecError(f"--nproc {world}: must be >= 1")
    if world > W:
        raise SpecError(f"--nproc {world}: the plan's hardware {topo.spec.name!r} has {W} GPU(s); run at most "
                        f"{W} processes (plan GPU i runs on rank i mod N)")
    if world > batch:
        raise SpecError(f"--nproc {world}: more processes than samples in the global batch ({batch})")
    owner = {g: i % world for i, g in enumerate(topo.gpus)}
    for node in topo.nodes:
        owner[f"{node}/host"] = owner[topo.gpus_of_node(node)[0]]
    return RankMap(world=world, gpus=tuple(topo.gpus), rank_of_device=owner,
                   slices=tuple(sample_slices(batch, world)))


def check_distributable(plan: Plan, rmap: RankMap) -> None:
    """A data_parallel table must have a replica on every rank (each rank pools its own samples from it)."""
    for p in plan.placements:
        if not sharding_of(p).whole_copies:
            continue
        ranks = {rmap.rank_of(s.device) for s in p.shards}
        if len(ranks) != rmap.world:
            missing = sorted(set(range(rmap.world)) - ranks)
            raise SpecError(f"data_parallel table {p.table!r} has no replica on rank(s) {missing} of {rmap.world} "
                            "(plan GPU i runs on rank i mod N); a distributed run needs a replica on every rank "
                            "(the planner always replicates on every GPU)", field="placements")


def one_replica_per_rank(plan: Plan, rmap: RankMap, rank: int) -> Plan:
    """The plan a rank builds its groups from: every placement as planned (shard indices kept: the exchange
    and the assembly name shards by them), except that a data_parallel table keeps only the rank's first
    replica (its shard index becomes 0)."""
    placements = []
    for p in plan.placements:
        if sharding_of(p).whole_copies:
            mine = [s for s in p.shards if rmap.rank_of(s.device) == rank][:1]
            p = Placement.model_construct(table=p.table, sharding=p.sharding, precision=p.precision, shards=mine)
        placements.append(p)
    return plan.model_copy(update={"placements": placements})


def rank_subplan(plan: Plan, rmap: RankMap, rank: int) -> Plan:
    """The shards one rank builds (one replica per data_parallel table), as a plan, for the memory estimate."""
    placements = []
    for p in plan.placements:
        mine = [s for s in p.shards if rmap.rank_of(s.device) == rank]
        if sharding_of(p).whole_copies:
            mine = mine[:1]
        if mine:
            placements.append(Placement.model_construct(table=p.table, sharding=p.sharding,
                                                        precision=p.precision, shards=mine))
    return plan.model_copy(update={"placements": placements})


def node_needs(plan: Plan, wl: Workload, topo: Topology, rmap: RankMap, ranks: list[int], device_type: str,
               pool: int) -> dict[int, MemoryNeeds]:
    """Per rank: bytes it will allocate (its shards' buffers in the step program, the dense model, its batch
    pool). Approximate on the exchange: a rank's share counts the all-to-all buffers of the shards it holds
    (for every receiver) instead of those it receives; the dense model is counted at the whole batch."""
    return {r: estimate_needs(rank_subplan(plan, rmap, r), wl, topo, device_type, pool) for r in ranks}


def check_node_memory(needs: dict[int, MemoryNeeds], device: torch.device, *, only_rank: int | None = None,
                      host_available: float | None = None, device_free: float | None = None) -> dict:
    """Host RAM: the ranks of this node together (on a CPU run their device parts too); GPU memory: each
    rank's own (``only_rank``: check just that rank's device). Raises InfeasibleError; returns the numbers
    compared (bytes)."""
    total = MemoryNeeds()
    for n in needs.values():
        for k, v in n.host.items():
            total.add("host", k, v)
        if device.type != "cuda":
            for k, v in n.device.items():
                total.add("device", k, v)
    report = {}
    if device.type == "cuda":
        for r, n in needs.items():
            if only_rank is not None and r != only_rank:
                continue
            report[f"rank{r}"] = check_memory(MemoryNeeds(device=dict(n.device)), device,
                                              host_available=float("inf"), device_free=device_free)
        report["host"] = check_memory(MemoryNeeds(host=dict(total.host)), torch.device("cpu"),
                                      host_available=host_available)
    else:
        report["host"] = check_memory(total, device, host_available=host_available)
    return report
