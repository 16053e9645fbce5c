"""The cost model: a placement's ops (placer/program), priced and summed per stream and shared resource.

A synchronous step is a sequence of PHASES; within a phase each device's stream runs its ops one after another
and the streams overlap, so a phase lasts as long as its busiest stream or shared resource (links, host DRAM);
the step is the sum of the phases plus latencies no bandwidth hides:

    step_time = sum_p max_r (base[p][r] + sum_tables load[p][r] + sum_groups used fixed[g][p][r]) + latency

``load`` is seconds: the variable part of every op a table's placement adds on a stream (its rows, lookups,
bags priced by the op costs of that device), or bytes / rate on a shared resource. ``fixed`` is the fixed
cost of a fused group's ops, paid once by a plan that puts any member in the group (``Cost.once``). Loads are
linear in the choice of placements, and the fixed costs linear in one indicator per group, which keeps the
ILP exact (planner/ilp.py); the simulator, the planner, the baselines and the runner's report read the same
ops (program/build.py says what each placement does).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

from placer.constraints import Rules
from placer.plan import Placement
from placer.program.build import Buffer, ProgramBuilder
from placer.program.torchrec_build import TorchRecProgramBuilder
from placer.program.ops import AR, BWD, BX, DENSE, EVERY_GPU, FWD, FX, PHASES, GroupKey, Op
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.units import GiB

__all__ = ["PHASES", "FWD", "FX", "DENSE", "BX", "BWD", "AR", "Cost", "CostModel", "cost_of"]


@dataclass
class Cost:
    """Loads in seconds keyed by (phase index, resource name), the fixed costs of the fused groups used
    (group -> {(phase, resource): seconds}, each charged once however many placements use the group), and
    memory in bytes keyed by memory name.

    ``indexed_as``: this cost's own cache of its loads and memory as arrays numbered by one LoadIndex
    (planner/accumulator.py), ``(index, arrays)``; filled by ``indexed``, dropped by ``+=``; not compared."""

    loads: dict[tuple[int, str], float] = field(default_factory=lambda: defaultdict(float))
    memory: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    once: dict[GroupKey, dict[tuple[int, str], float]] = field(default_factory=dict)
    indexed_as: tuple | None = field(default=None, repr=False, compare=False)

    def indexed(self, index) -> tuple:
        """``index.arrays_of(self)`` (accumulator.LoadIndex: (load indices, loads in s, memory indices, bytes,
        {phase: positions in the loads})), computed once per index and kept until ``+=`` changes this cost
        (stage 2 adds and removes the same cost many times)."""
        kept = self.indexed_as
        if kept is None or kept[0] is not index:
            kept = self.indexed_as = (index, index.arrays_of(self))
        return kept[1]

    def __iadd__(self, other: "Cost") -> "Cost":
        self.indexed_as = None  # the arrays no longer hold the loads
        for k, v in other.loads.items():
            self.loads[k] += v
        for k, v in other.memory.items():
            self.memory[k] += v
        for g, charges in other.once.items():
            self.once.setdefault(g, charges)
        return self

    def total_loads(self) -> dict[tuple[int, str], float]:
        """Loads with every used group's fixed costs added once."""
        out = defaultdict(float, self.loads)
        for charges in self.once.values():
            for key, v in charges.items():
                out[key] += v
        return out


def cost_of(ops: list[Op], buffers: list[Buffer] = (), every_gpu: tuple[list[str], list[str]] = ((), ())) -> Cost:
    """Sum ops (and buffers) into a Cost: each op's seconds on its stream, its traffic on shared resources,
    ``once`` ops as their group's fixed costs. ``every_gpu``: the GPUs' (streams, memories) that an EVERY_GPU
    op or buffer stands for."""
    cost = Cost()
    streams, memories = every_gpu
    loads, once = cost.loads, cost.once  # (the hot loop of pricing: no method call per op or link)
    for op in ops:
        phase, seconds = op.phase, op.seconds
        for stream in (streams if op.stream == EVERY_GPU else (op.stream,)):
            if op.once:
                charges = once.setdefault(op.group, {})
                charges[(phase, stream)] = charges.get((phase, stream), 0.0) + seconds
            elif seconds:
                loads[(phase, stream)] += seconds
        for resource, load in op.traffic:
            if load:
                loads[(phase, resource)] += load
    for b in buffers:
        if b.bytes:
            for memory in (memories if b.memory == EVERY_GPU else (b.memory,)):
                cost.memory[memory] += b.bytes
    return cost


class CostModel:
    """Prices placements of one workload on one machine. Pure: no state but caches of derived values."""

    def __init__(self, topology: Topology, workload: Workload, include_exchange: bool = True,
                 cpu_reads_host: bool = False):
        """``include_exchange=False`` leaves out the links' load of the all-to-all of pooled embeddings (FX/BX
        phases), for callers that price it themselves from ``exchange_bytes_per_gpu`` (planner/kinds.py);
        ``cpu_reads_host``: price GPU rows in host memory as CPU lookups (ProgramBuilder). The step is built as the
        workload's trainer runs it: placer's runner (ProgramBuilder) or TorchRec's DistributedModelParallel
        (program/torchrec_build.py)."""
        self.include_exchange = include_exchange
        self.topo = topology
        self.wl = workload
        self.trainer = workload.trainer
        builder = TorchRecProgramBuilder if workload.trainer == "torchrec" else ProgramBuilder
        self.builder = builder(topology, workload, include_exchange, cpu_reads_host)
        self.traffic = self.builder.traffic
        self.gpus = topology.gpus
        self.W = len(self.gpus)
        self.B = workload.batch_size
        self.samples_per_gpu = self.B / self.W
        self.tables = self.builder.tables
        self.state_factor = workload.optimizer_state_factor
        self.lookups_per_sample = self.builder.lookups_per_sample
        self.outputs_per_sample = self.builder.features
        self._every_gpu = (self.builder.gpu_streams, self.builder.gpu_memories)

    def lookups_per_step(self, table: str) -> float:
        return self.builder.lookups_per_step(table)

    def exchange_bytes_per_gpu(self, table: str, cols: int) -> float:
        return self.builder.exchange_bytes_per_gpu(table, cols)

    def ring_orders(self, gpus: tuple[str, ...]) -> list[list[str]]:
        return self.traffic.ring_orders(gpus)

    # ---- placements ----------------------------------------------------------------------------------------

    def placement_ops(self, p: Placement) -> list[Op]:
        return self.builder.placement_ops(p)

    def placement_cost(self, p: Placement, every_gpu_folded: bool = False) -> Cost:
        """Loads, group fixed costs and memory of one table's placement. ``every_gpu_folded``: what every GPU
        carries alike stays under the one name EVERY_GPU (ops.py) instead of a load per GPU (for callers that
        fold loads into classes: planner/kinds.py)."""
        return cost_of(self.builder.placement_ops(p), self.builder.placement_buffers(p), self._gpus(every_gpu_folded))

    def shard_cost(self, p: Placement, every_gpu_folded: bool = False) -> Cost:
        """What ``p``'s shards add on their own (ProgramBuilder.shard_ops and shard_buffers): an option over
        all GPUs costs its shards' costs plus replica_allreduce_ops plus table_cost."""
        return cost_of(self.builder.shard_ops(p), self.builder.shard_buffers(p), self._gpus(every_gpu_folded))

    def table_cost(self, p: Placement, every_gpu_folded: bool = False) -> Cost:
        """What the sample owners add for ``p`` as a whole, on every GPU (ProgramBuilder.table_ops and
        table_buffers); it reads only the number of shards and their tiling."""
        return cost_of(self.builder.table_ops(p), self.builder.table_buffers(p), self._gpus(every_gpu_folded))

    def _gpus(self, folded: bool) -> tuple:
        """What an EVERY_GPU op or buffer stands for in cost_of: every GPU's stream and memory, or itself."""
        return ((EVERY_GPU,), (EVERY_GPU,)) if folded else self._every_gpu

    # ---- the part that does not depend on the placement -----------------------------------------------------

    @cached_property
    def base_ops(self) -> list[Op]:
        return self.builder.base_ops()

    @cached_property
    def base_cost(self) -> Cost:
        """The dense model's ops and memory on every GPU, the collectives' fixed costs (placement-free)."""
        return cost_of(self.base_ops, self.builder.base_buffers(), self._every_gpu)

    @cached_property
    def fixed_latency_s(self) -> dict[int, float]:
        return self.traffic.fixed_latency_s(len(PHASES), FX, BX, AR)

    @cached_property
    def rules(self) -> Rules:
        """The workload's constraints compiled for this machine (placer/constraints.py)."""
        return Rules.of(self.wl, self.topo)

    @cached_property
    def usable_memory(self) -> dict[str, float]:
        """Bytes each memory can give to tables: capacity - reserve - what the dense model holds there, less the
        workload's HBM headroom on every GPU's HBM (constraints.hbm_headroom_GiB)."""
        headroom = self.wl.constraints.hbm_headroom_GiB * GiB
        return {name: mem.usable_bytes - self.base_cost.memory.get(name, 0.0)
                - (headroom if mem.kind == "hbm" else 0.0) for name, mem in self.topo.memories.items()}

