"""The cost model: what a placement puts on each resource in each phase of a training step.

A synchronous step is a sequence of PHASES; within a phase every resource works in parallel, so the phase
lasts as long as its busiest resource; the step is the sum of its phases plus fixed latencies:

    step_time = sum_p max_r (base[p][r] + sum_tables load[p][r]) + fixed_latency

``load`` is in seconds: bytes / (bytes/s), FLOPs / (FLOP/s), kernel launches / (launches/s). Every load is
linear in the choice of placements, which is what makes the ILP exact (see planner/ilp.py), and the same
function prices a plan for the simulator, the planner and the baselines.

Physics per GPU shard (n of the table's N rows, c of its d columns, k rows in HBM, element bytes e):
- forward: n/N of the B*L lookups land on the shard; the hit share coverage(k/n) gathers from HBM at
  hbm_bw * hbm_gather_efficiency, the miss share is read by the GPU from pinned host memory across the
  host->GPU path at link rate * host_read_efficiency (and from host DRAM). Pooled outputs (fp32, c wide,
  one per feature and sample) are written to HBM and sent to the sample owners (B/W samples per GPU).
- backward: the owners send pooled-output gradients back; the shard expands them to one gradient row per
  lookup (written and read once, fp32) and updates each distinct touched row in place: read and write of
  the row and its optimizer state (HBM for hot rows, across PCIe for cold rows).
- host (CPU lookup): the CPU gathers and pools at cpu_gather rate from DRAM, pooled results go to every
  GPU across PCIe (and the network), gradients come back, the CPU applies the sparse update.
- data parallel: each GPU gathers for its own samples from a full replica; the table's dense gradient is
  all-reduced in rings (2(W-1)/W of its bytes through every ring hop; over several nodes one ring per rail,
  see ring_orders) and the update streams the table. The dense model's gradient is all-reduced the same way.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

from placer.plan import Placement, Shard
from placer.specs.workload import TableSpec, Workload
from placer.topology import Topology
from placer.units import element_bytes

PHASES = ("embedding_forward", "forward_exchange", "dense", "backward_exchange", "embedding_backward",
          "gradient_allreduce")
FWD, FX, DENSE, BX, BWD, AR = range(len(PHASES))

#: Kernel launches per shard and phase, as counted in the runner's eager PyTorch (docs/runner.md):
#: forward gather, or remap + hot gather + cold gather + add; backward per optimizer (gradient expansion,
#: unique rows, the update), and the extra remap/scatter work of a hot/cold split.
LAUNCHES_FWD = {"plain": 1, "split": 5}
LAUNCHES_BWD = {"sgd": 7, "adagrad": 12, "rowwise_adagrad": 12, "adam": 15}
LAUNCHES_BWD_SPLIT_EXTRA = 8
#: Kernel launches of the dense part per step: per MLP layer (forward GEMM + bias/activation, backward two
#: GEMMs + activation and bias grads, optimizer), plus the interaction (fixed, and per distinct embedding
#: width for stacking and padding, forward and backward; see runner/model.py) and the loss.
LAUNCHES_PER_LAYER = 12
LAUNCHES_INTERACTION = 20
LAUNCHES_PER_WIDTH = 6
REMAP_BYTES_PER_ROW = 8  # a hot/cold split keeps two int32 slot maps (row id -> hot slot, cold slot) in HBM
POOLED_BYTES = 4  # pooled embeddings and their gradients travel as fp32
STATE_BYTES = 4  # optimizer state is fp32


@dataclass
class Cost:
    """Loads in seconds keyed by (phase index, resource name) and memory in bytes keyed by memory name."""

    loads: dict[tuple[int, str], float] = field(default_factory=lambda: defaultdict(float))
    memory: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add_load(self, phase: int, resource: str, seconds: float) -> None:
        if seconds:
            self.loads[(phase, resource)] += seconds

    def add_memory(self, memory: str, n_bytes: float) -> None:
        if n_bytes:
            self.memory[memory] += n_bytes

    def __iadd__(self, other: "Cost") -> "Cost":
        for k, v in other.loads.items():
            self.loads[k] += v
        for k, v in other.memory.items():
            self.memory[k] += v
        return self


def slot_map_bytes(rows: int, hbm_rows: int) -> int:
    """HBM bytes of the slot maps of a shard with ``hbm_rows`` of its ``rows`` in HBM (0 unless it is split)."""
    return REMAP_BYTES_PER_ROW * rows if 0 < hbm_rows < rows else 0


class CostModel:
    """Prices placements of one workload on one machine. Pure: no state but caches of derived values."""

    def __init__(self, topology: Topology, workload: Workload, include_exchange: bool = True):
        """``include_exchange=False`` leaves out the all-to-all of pooled embeddings (FX/BX phases), for
        callers that price it themselves from ``exchange_bytes_per_gpu`` (planner/scale.py)."""
        self.include_exchange = include_exchange
        self.topo = topology
        self.wl = workload
        self.gpus = topology.gpus
        self.W = len(self.gpus)
        self.B = workload.batch_size
        self.samples_per_gpu = self.B / self.W
        self.tables: dict[str, TableSpec] = {t.name: t for t in workload.tables}
        self.state_factor = workload.optimizer_state_factor
        self.lookups_per_sample = {t.name: workload.lookups_per_sample(t.name) for t in workload.tables}
        self.outputs_per_sample = {t.name: workload.outputs_per_sample(t.name) for t in workload.tables}
        self._rate = {name: r.rate for name, r in topology.resources.items()}
        self._exchange_cache: dict[tuple[str, bool], list[tuple[str, float]]] = {}
        self._ring_cache: dict[tuple[str, ...], list[tuple[str, float]]] = {}
        self._access_cache: dict[tuple, object] = {}

    # ---- helpers -------------------------------------------------------------------------------------------

    def _send(self, cost: Cost, phase: int, src: str, dst: str, n_bytes: float, efficiency: float = 1.0) -> None:
        """Bytes from ``src`` to ``dst`` load every directed link on their route."""
        if n_bytes <= 0 or src == dst:
            return
        for link, share in self.topo.route_shares(src, dst):
            cost.add_load(phase, link, share * n_bytes / efficiency / self._rate[link])

    def _unit_exchange(self, device: str, outgoing: bool) -> list[tuple[str, float]]:
        """(link, seconds per byte) for sending one byte from ``device`` to every GPU (outgoing) or from
        every GPU to ``device``; cached, so an all-to-all costs one pass over the links it touches."""
        key = (device, outgoing)
        if key not in self._exchange_cache:
            acc: dict[str, float] = defaultdict(float)
            for h in self.gpus:
                for link, share in (self.topo.route_shares(device, h) if outgoing else self.topo.route_shares(h, device)):
                    acc[link] += share / self._rate[link]
            self._exchange_cache[key] = list(acc.items())
        return self._exchange_cache[key]

    def _exchange(self, cost: Cost, phase: int, device: str, per_gpu_bytes: float, outgoing: bool) -> None:
        """``per_gpu_bytes`` from ``device`` to every GPU (outgoing) or from every GPU to ``device``."""
        if per_gpu_bytes <= 0 or not self.include_exchange:
            return
        loads = cost.loads
        for link, seconds_per_byte in self._unit_exchange(device, outgoing):
            loads[(phase, link)] += per_gpu_bytes * seconds_per_byte

    def _on(self, cost: Cost, phase: int, device: str, kind: str, amount: float) -> None:
        name = f"{device}:{kind}"
        cost.add_load(phase, name, amount / self._rate[name])

    def lookups_per_step(self, table: str) -> float:
        return self.B * self.lookups_per_sample[table]

    # ---- placements ----------------------------------------------------------------------------------------

    def placement_cost(self, p: Placement) -> Cost:
        """Loads and memory of one table's placement."""
        t = self.tables[p.table]
        e = element_bytes(p.precision)
        cost = Cost()
        if p.sharding == "host":
            for s in p.shards:
                self._host_shard(cost, t, s, e)
        elif p.sharding == "data_parallel":
            for s in p.shards:
                self._replica(cost, t, s, e)
            self._allreduce(cost, tuple(s.device for s in p.shards), t.rows * t.dim * POOLED_BYTES)
        else:
            for s in p.shards:
                self._gpu_shard(cost, t, s, e)
        return cost

    def _gpu_shard(self, cost: Cost, t: TableSpec, s: Shard, e: int) -> None:
        g, host = s.device, self.topo.host_of(s.device)
        gspec = self.topo.gpu_spec(g)
        n, c, k = s.num_rows, s.num_cols, s.hbm_rows
        row_bytes = c * e
        state_bytes = self.state_factor[t.name] * c * STATE_BYTES
        lookups = self.lookups_per_step(t.name) * n / t.rows
        hot_frac = k / n
        hit = self._coverage(t.name, hot_frac)
        split = "split" if 0 < k < n else "plain"
        outputs = self.outputs_per_sample[t.name]
        out_bytes_all = self.B * outputs * c * POOLED_BYTES

        # forward: gathers
        self._on(cost, FWD, g, "hbm", lookups * hit * row_bytes / gspec.hbm_gather_efficiency + out_bytes_all)
        miss_bytes = lookups * (1 - hit) * row_bytes
        if miss_bytes:
            self._send(cost, FWD, host, g, miss_bytes, gspec.host_read_efficiency)
            self._on(cost, FWD, host, "dram", miss_bytes)
        self._on(cost, FWD, g, "launch", LAUNCHES_FWD[split])
        # exchange of pooled outputs and their gradients with the sample owners
        per_owner = self.exchange_bytes_per_gpu(t.name, c)
        self._exchange(cost, FX, g, per_owner, outgoing=True)
        self._exchange(cost, BX, g, per_owner, outgoing=False)
        # backward: expand gradients per lookup, update distinct rows in place
        grad_bytes = lookups * c * POOLED_BYTES
        uniq_hot, uniq_cold = self._unique_split(t, n, lookups, hot_frac)
        rmw = row_bytes + state_bytes
        self._on(cost, BWD, g, "hbm", 2 * grad_bytes + out_bytes_all
                 + 2 * uniq_hot * rmw / gspec.hbm_gather_efficiency)
        if uniq_cold:
            cold_bytes = uniq_cold * rmw
            self._send(cost, BWD, host, g, cold_bytes, gspec.host_read_efficiency)
            self._send(cost, BWD, g, host, cold_bytes, gspec.host_read_efficiency)
            self._on(cost, BWD, host, "dram", 2 * cold_bytes)
        self._on(cost, BWD, g, "launch", LAUNCHES_BWD[self.wl.optimizer.name]
                 + (LAUNCHES_BWD_SPLIT_EXTRA if split == "split" else 0))
        # memory
        cost.add_memory(g, k * rmw + slot_map_bytes(n, k))
        cost.add_memory(host, (n - k) * rmw)

    def exchange_bytes_per_gpu(self, table: str, cols: int) -> float:
        """Bytes of pooled embeddings (``cols`` wide) a shard sends to each GPU per step, and gets back as
        gradients: the GPU's samples x the table's features x cols x 4."""
        return self.samples_per_gpu * self.outputs_per_sample[table] * cols * POOLED_BYTES

    def _coverage(self, table: str, hot_frac: float) -> float:
        key = ("coverage", table, hot_frac)
        if key not in self._access_cache:
            self._access_cache[key] = float(self.wl.access_models[table].coverage(hot_frac))
        return self._access_cache[key]

    def _unique_split(self, t: TableSpec, n: int, lookups: float, hot_frac: float) -> tuple[float, float]:
        """Distinct rows a shard of n rows touches per step, (in HBM, in host memory)."""
        key = ("unique", t.name, hot_frac)
        if key not in self._access_cache:
            access = self.wl.access_models[t.name]
            self._access_cache[key] = access.unique_rows_split(self.lookups_per_step(t.name), hot_frac)
        hot, cold = self._access_cache[key]
        share = n / t.rows
        return hot * share, cold * share

    def _host_shard(self, cost: Cost, t: TableSpec, s: Shard, e: int) -> None:
        host = s.device
        n, c = s.num_rows, s.num_cols
        row_bytes = c * e
        state_bytes = self.state_factor[t.name] * c * STATE_BYTES
        lookups = self.lookups_per_step(t.name) * n / t.rows
        gathered = lookups * row_bytes
        self._on(cost, FWD, host, "cpu", gathered)
        self._on(cost, FWD, host, "dram", gathered)
        per_owner = self.exchange_bytes_per_gpu(t.name, c)
        self._exchange(cost, FX, host, per_owner, outgoing=True)
        self._exchange(cost, BX, host, per_owner, outgoing=False)
        for h in self.gpus:
            self._on(cost, FX, h, "launch", 1)
            self._on(cost, BX, h, "launch", 1)
        uniq = sum(self._unique_split(t, n, lookups, 1.0))
        update = lookups * c * POOLED_BYTES + 2 * uniq * (row_bytes + state_bytes)
        self._on(cost, BWD, host, "cpu", update)
        self._on(cost, BWD, host, "dram", update)
        cost.add_memory(host, n * (row_bytes + state_bytes))

    def _replica(self, cost: Cost, t: TableSpec, s: Shard, e: int) -> None:
        """One data-parallel replica's own work (its all-reduce is priced once per table, see _allreduce)."""
        g = s.device
        gspec = self.topo.gpu_spec(g)
        n, c = s.num_rows, s.num_cols
        row_bytes = c * e
        state_bytes = self.state_factor[t.name] * c * STATE_BYTES
        local_lookups = self.lookups_per_sample[t.name] * self.samples_per_gpu
        outputs = self.samples_per_gpu * self.outputs_per_sample[t.name] * c * POOLED_BYTES
        grad_table = n * c * POOLED_BYTES
        self._on(cost, FWD, g, "hbm", local_lookups * row_bytes / gspec.hbm_gather_efficiency + outputs)
        self._on(cost, FWD, g, "launch", 1)
        # dense gradient of the replica: zero, scatter, all-reduce, stream the update over the table
        self._on(cost, BWD, g, "hbm", 2 * grad_table + 2 * n * (row_bytes + state_bytes) + outputs)
        self._on(cost, BWD, g, "launch", 4)
        cost.add_memory(g, n * (row_bytes + state_bytes) + grad_table)

    def ring_orders(self, gpus: tuple[str, ...]) -> list[list[str]]:
        """The rings an all-reduce over ``gpus`` runs, each carrying an equal share of the bytes.

        Within one node: one ring in GPU order. Over several nodes with G GPUs each (NCCL-style multi-rail):
        G rings, ring r visiting each node's GPUs rotated by r, so that every node is left through a
        different GPU (and its rail NIC) by each ring."""
        nodes: dict[str, list[str]] = {}
        for g in gpus:
            nodes.setdefault(self.topo.node_of[g], []).append(g)
        sizes = {len(v) for v in nodes.values()}
        if len(nodes) == 1 or len(sizes) != 1:
            return [list(gpus)]
        per = sizes.pop()
        return [[local[(i + r) % per] for local in nodes.values() for i in range(per)] for r in range(per)]

    def _allreduce(self, cost: Cost, gpus: tuple[str, ...], n_bytes: float) -> None:
        """Ring all-reduce of ``n_bytes`` over ``gpus``: 2(W-1)/W of the bytes cross every ring hop."""
        W = len(gpus)
        if W < 2 or n_bytes <= 0:
            return
        if gpus not in self._ring_cache:
            acc: dict[str, float] = defaultdict(float)
            rings = self.ring_orders(gpus)
            for ring in rings:
                for i, g in enumerate(ring):
                    for link, share in self.topo.route_shares(g, ring[(i + 1) % W]):
                        acc[link] += share * 2 * (W - 1) / W / len(rings) / self._rate[link]
            self._ring_cache[gpus] = list(acc.items())
        loads = cost.loads
        for link, seconds_per_byte in self._ring_cache[gpus]:
            loads[(AR, link)] += n_bytes * seconds_per_byte
        for g in gpus:
            self._on(cost, AR, g, "launch", 1)

    # ---- the part that does not depend on the placement -----------------------------------------------------

    @cached_property
    def dense(self) -> "DenseModelCost":
        return DenseModelCost.of(self.wl)

    @cached_property
    def base_cost(self) -> Cost:
        """Dense compute, dense all-reduce and HBM held by the dense model on every GPU (placement-free)."""
        cost = Cost()
        d = self.dense
        for g in self.gpus:
            self._on(cost, DENSE, g, "compute", 3 * d.flops_per_sample * self.samples_per_gpu)
            self._on(cost, DENSE, g, "launch", d.launches)
            cost.add_memory(g, d.hbm_bytes(self.samples_per_gpu, self.wl.optimizer.name))
        self._allreduce(cost, tuple(self.gpus), d.params * 4)
        return cost

    @cached_property
    def fixed_latency_s(self) -> dict[int, float]:
        """Latency per phase that no bandwidth hides: the farthest exchange path; for the all-reduce, the
        lesser of a ring's 2(W-1) and a tree's 2 ceil(log2 W) hops of the slowest ring hop."""
        out = {p: 0.0 for p in range(len(PHASES))}
        if self.W > 1:
            g0 = self.gpus[0]
            farthest = max(self.topo.path_latency_s(g0, h) for h in self.gpus[1:])
            out[FX] = out[BX] = farthest
            ring = self.ring_orders(tuple(self.gpus))[0]
            hop = max(self.topo.path_latency_s(g, ring[(i + 1) % self.W]) for i, g in enumerate(ring))
            # NCCL picks a tree when latency dominates: 2 log2(W) hops instead of the ring's 2(W-1)
            out[AR] = 2 * min(self.W - 1, math.ceil(math.log2(self.W))) * hop
        return out

    @cached_property
    def usable_memory(self) -> dict[str, float]:
        """Bytes each memory can give to tables: capacity - reserve - what the dense model holds there."""
        out = {}
        for name, mem in self.topo.memories.items():
            out[name] = mem.usable_bytes - self.base_cost.memory.get(name, 0.0)
        return out


@dataclass(frozen=True)
class DenseModelCost:
    """FLOPs, parameters and launches of the dense DLRM part, per sample and per step."""

    flops_per_sample: float  # forward FLOPs of one sample (backward is counted as 2x forward)
    params: int  # dense parameters (fp32)
    launches: float  # kernel launches per step for the dense part
    activation_floats_per_sample: float

    @classmethod
    def of(cls, wl: Workload) -> "DenseModelCost":
        dense = wl.dense
        bottom = _mlp(dense.num_dense_features, dense.bottom_mlp)
        bottom_out = bottom.width
        flops, params, acts, layers = bottom.flops, bottom.params, dense.num_dense_features + bottom.acts, bottom.layers
        F = wl.num_pooled_features
        emb_total = wl.embedding_dim_total
        kind = dense.interaction.kind
        if kind == "dot":
            vectors = F + (1 if dense.bottom_mlp else 0)
            # the runner zero-pads every vector to the widest, so the Gram matrix costs vectors^2 x widest
            widest = max([t.dim for t in wl.tables] + ([bottom_out] if dense.bottom_mlp else []))
            flops += vectors * vectors * widest
            top_in = vectors * (vectors - 1) // 2 + bottom_out
        elif kind == "concat":
            top_in = emb_total + bottom_out
        else:  # dcnv2: x_{l+1} = x0 * (U (V x_l) + b) + x_l, low rank
            D = emb_total + bottom_out
            r = dense.interaction.rank
            for _ in range(dense.interaction.layers):
                flops += 2 * D * r * 2 + 3 * D
                params += 2 * D * r + D
                acts += D
            layers += dense.interaction.layers
            top_in = D
        top = _mlp(top_in, dense.top_mlp)
        flops, params, layers = flops + top.flops, params + top.params, layers + top.layers
        acts += top_in + emb_total + top.acts
        widths = len({t.dim for t in wl.tables} | ({bottom_out} if dense.bottom_mlp else set()))
        launches = layers * LAUNCHES_PER_LAYER + LAUNCHES_INTERACTION + LAUNCHES_PER_WIDTH * widths
        return cls(flops, params, launches, acts)

    def hbm_bytes(self, samples_per_gpu: float, optimizer: str) -> float:
        """Dense weights, gradients, optimizer state and activations (saved + their gradients), fp32."""
        state = {"sgd": 0, "adagrad": 1, "rowwise_adagrad": 1, "adam": 2}[optimizer]
        return self.params * 4 * (2 + state) + 2 * self.activation_floats_per_sample * samples_per_gpu * 4


@dataclass(frozen=True)
class _MlpCost:
    flops: float  # forward FLOPs per sample
    params: int
    acts: float  # output floats per sample, all layers
    layers: int
    width: int  # output width


def _mlp(width: int, layers: list[int]) -> _MlpCost:
    """Forward FLOPs, parameters and activations of a stack of Linear layers from ``width`` inputs."""
    flops, params, acts = 0.0, 0, 0.0
    for out in layers:
        flops += 2 * width * out
        params += width * out + out
        acts += out
        width = out
    return _MlpCost(flops, params, acts, len(layers), width)
