"""Embedding shards built where the plan puts them, each with the forward and backward cost.py prices.

Kinds of shard (``Shard.kind``):
- ``hbm``:     all of the shard's rows in device memory; ``embedding_bag`` (sum pooling) gathers them.
- ``uvm``:     all rows in host memory (hbm_rows = 0), read by the GPU: under the ``uva`` mechanism the same
               ``embedding_bag`` kernel runs on a CUDA view of mapped pinned host memory, so every row crosses
               PCIe; under ``cpu_gather_copy`` the CPU gathers the rows and copies them to the device to be pooled.
- ``split``:   the shard's own hottest hbm_rows rows in device memory, the rest in host memory (read as for
               ``uvm``). Two int32 maps on the device turn a local row id into its hot slot and its cold slot;
               a row of the other part maps to that part's padding row, which ``embedding_bag`` skips
               (``padding_idx``: not gathered, not summed). Two gathers of the maps, two ``embedding_bag``
               calls, one add.
- ``host``:    sharding "host": rows in (pinned, on CUDA) host memory; the CPU gathers and pools with the CPU
               ``embedding_bag``; the pooled result is copied to the device by the runner (the exchange).
- ``replica``: one data-parallel replica: the whole table on the device, pooling only its own slice of the
               batch; its backward scatters into a dense fp32 gradient of the table, the runner all-reduces the
               replicas' gradients and every replica streams the update over the whole table.

Backward of every non-replica shard (as cost.py prices it): the pooled-output gradient is expanded to one row
per lookup, reduced over duplicate ids (``torch.unique`` + ``index_add_``) and the optimizer reads, updates and
writes back each distinct touched row and its state (in HBM for hot rows, across PCIe or by the CPU for cold
rows). Weights are stored in the plan's precision (fp16 or fp32), pooled outputs and gradients are fp32.

Initial weights are a function of (seed, table, row id, column) only, so any sharding of a table holds the same
logical table: U(-1/sqrt(N), 1/sqrt(N)) as in the DLRM reference, drawn in fixed chunks of rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from placer.plan import Placement, Plan
from placer.runner.batches import ShardInput
from placer.runner.hostmem import HostMemory, HostTensor
from placer.runner.optim import SparseRowOptimizer, aggregate, state_shapes
from placer.specs.workload import TableSpec, Workload

INIT_CHUNK_ROWS = 1 << 16
TORCH_DTYPE = {"fp32": torch.float32, "fp16": torch.float16}


def _bag(ids: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor, padding_idx: int | None = None
         ) -> torch.Tensor:
    """Sum-pooled bags, fp32."""
    out = F.embedding_bag(ids, weight, offsets, mode="sum", padding_idx=padding_idx)
    return out if out.dtype == torch.float32 else out.float()


def init_rows(seed: int, table_index: int, table_rows: int, table_dim: int, rows: tuple[int, int],
              cols: tuple[int, int], device: torch.device):
    """Yield (first local row, fp32 block) covering rows [a, b) x cols of the table, chunk by chunk, on
    ``device``. Values depend only on (seed, table, row, col)."""
    a, b = rows
    bound = 1.0 / math.sqrt(table_rows)
    gen_device = device if device.type == "cuda" else torch.device("cpu")
    for chunk in range(a // INIT_CHUNK_ROWS, (b - 1) // INIT_CHUNK_ROWS + 1):
        start = chunk * INIT_CHUNK_ROWS
        size = min(INIT_CHUNK_ROWS, table_rows - start)
        g = torch.Generator(device=gen_device)
        g.manual_seed((int(seed) * 1_000_003 + table_index) * 1_000_003 + chunk)
        block = torch.rand((size, table_dim), generator=g, device=gen_device)
        block.mul_(2 * bound).sub_(bound)
        lo, hi = max(a, start), min(b, start + size)
        yield lo - a, block[lo - start:hi - start, cols[0]:cols[1]]


def hot_local_ids(perm: np.ndarray, rows: tuple[int, int], k: int) -> np.ndarray:
    """Local ids (id - first row) of the ``k`` hottest rows of a shard: its ids in popularity-rank order."""
    a, b = rows
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    in_shard = perm[(perm >= a) & (perm < b)]
    return in_shard[:k].astype(np.int64) - a


@dataclass
class BuildContext:
    """What every shard needs to be built: the local torch device, host memory, optimizer, seed and the
    rank permutations (for the hot rows of split shards)."""

    workload: Workload
    device: torch.device
    host: HostMemory
    optimizer: SparseRowOptimizer
    seed: int
    perms: dict[str, np.ndarray]

    def table(self, name: str) -> TableSpec:
        return self.workload.tables[self.workload.table_index[name]]


@dataclass
class Shard:
    """One shard of one table (or one data-parallel replica) on one device of the plan."""

    table: str
    index: int
    device_name: str
    kind: str
    rows: tuple[int, int]
    cols: tuple[int, int]
    precision: str
    features: int
    ctx: BuildContext = field(repr=False)

    @property
    def n(self) -> int:
        return self.rows[1] - self.rows[0]

    @property
    def c(self) -> int:
        return self.cols[1] - self.cols[0]

    @property
    def on_host(self) -> bool:
        """True when forward returns a CPU tensor that the runner must copy to the device (sharding host)."""
        return False

    def forward(self, inp: ShardInput) -> torch.Tensor:  # (num_bags, c) fp32
        raise NotImplementedError

    def backward(self, inp: ShardInput, grad: torch.Tensor) -> None:
        raise NotImplementedError

    def logical_weights(self) -> torch.Tensor:
        """The shard's rows in local id order, fp32 on the CPU (for tests and checks)."""
        raise NotImplementedError

    def memory_bytes(self) -> dict[str, int]:
        """Bytes this shard holds: {'device': ..., 'host': ...}."""
        raise NotImplementedError

    def _alloc_states(self, rows: int, where: str) -> list:
        shapes = state_shapes(self.ctx.optimizer.name, rows, self.c)
        if where == "device":
            return [torch.zeros(s, dtype=torch.float32, device=self.ctx.device) for s in shapes]
        return [self.ctx.host.zeros(s, torch.float32, gpu_readable=(where == "host_mapped")) for s in shapes]


def _tensor_bytes(t) -> int:
    if t is None:
        return 0
    if isinstance(t, HostTensor):
        return t.nbytes
    return t.numel() * t.element_size()


class GpuShard(Shard):
    """A shard on a GPU of the plan: hbm, uvm or split (see the module docstring)."""

    def __init__(self, *, hbm_rows: int, **kw):
        super().__init__(**kw)
        ctx = self.ctx
        n, c, k = self.n, self.c, int(hbm_rows)
        self.k = k
        dtype = TORCH_DTYPE[self.precision]
        self.kind = "hbm" if k == n else "uvm" if k == 0 else "split"
        pad = 1 if self.kind == "split" else 0
        self.hot = self.hot_state = None
        self.cold = None
        self.cold_state = []
        self.hot_map = self.cold_map = self.remap_cpu = None
        if k:
            self.hot = torch.zeros((k + pad, c), dtype=dtype, device=ctx.device)
            self.hot_state = self._alloc_states(k + pad, "device")
        if n - k:
            self.cold = ctx.host.zeros((n - k + pad, c), dtype, gpu_readable=True)
            self.cold_state = self._alloc_states(n - k + pad, "host_mapped")
        t = ctx.table(self.table)
        hot_local = None
        if self.kind == "split":
            hot_local = hot_local_ids(ctx.perms[self.table], self.rows, k)
            remap = np.empty(n, dtype=np.int32)
            is_hot = np.zeros(n, dtype=bool)
            is_hot[hot_local] = True
            remap[hot_local] = np.arange(k, dtype=np.int32)
            cold_local = np.flatnonzero(~is_hot)
            remap[cold_local] = -1 - np.arange(n - k, dtype=np.int32)
            self.remap_cpu = torch.from_numpy(remap)
            # on the device: local id -> hot slot (k = the padding row for cold ids), and -> cold slot
            # (n - k = padding for hot ids); int32, one gather each in the forward
            self.hot_map = torch.where(self.remap_cpu >= 0, self.remap_cpu, k).to(ctx.device)
            if self.cold.dev is not None:
                self.cold_map = torch.where(self.remap_cpu < 0, -1 - self.remap_cpu, n - k).to(ctx.device)
        # initial weights, chunk by chunk
        index = ctx.workload.table_index[self.table]
        for j0, block in init_rows(ctx.seed, index, t.rows, t.dim, self.rows, self.cols, ctx.device):
            j1 = j0 + block.shape[0]
            if self.kind == "hbm":
                self.hot[j0:j1] = block.to(self.hot.device, dtype)
            elif self.kind == "uvm":
                self.cold.cpu[j0:j1] = block.to("cpu", dtype)
            else:
                m = self.remap_cpu[j0:j1]
                hot_mask = m >= 0
                hb, cb = block.to("cpu", dtype)[hot_mask], block.to("cpu", dtype)[~hot_mask]
                self.hot[m[hot_mask].long().to(ctx.device)] = hb.to(ctx.device)
                self.cold.cpu[(-1 - m[~hot_mask]).long()] = cb
        self._fwd = None

    # ---- forward ------------------------------------------------------------------------------------------

    def forward(self, inp: ShardInput) -> torch.Tensor:
        if self.kind == "hbm":
            return _bag(inp.ids, self.hot, inp.offsets)
        if self.kind == "uvm":
            if self.cold.dev is not None:
                return _bag(inp.ids, self.cold.dev, inp.offsets)
            return self._gather_copy(inp)
        n, k = self.n, self.k
        hot_idx = self.hot_map.index_select(0, inp.ids)
        out = _bag(hot_idx, self.hot, inp.offsets32, padding_idx=k)
        cold_idx = None
        if self.cold_map is not None:
            cold_idx = self.cold_map.index_select(0, inp.ids)
            out = out + _bag(cold_idx, self.cold.dev, inp.offsets32, padding_idx=n - k)
        else:
            out = out + self._gather_copy(inp)
        self._fwd = (inp, hot_idx, cold_idx)
        return out

    def _cold_lookups_cpu(self, inp: ShardInput) -> tuple[torch.Tensor, torch.Tensor]:
        """(cold slots, their bags) on the CPU, from the CPU copy of the batch."""
        if self.kind == "uvm":
            return inp.ids_cpu, inp.bags_cpu
        m = self.remap_cpu.index_select(0, inp.ids_cpu)
        cold = m < 0
        return (-1 - m[cold]).long(), inp.bags_cpu[cold]

    def _gather_copy(self, inp: ShardInput) -> torch.Tensor:
        """Fallback GPU read of host rows: CPU gathers the rows into pinned memory, H2D copy, pool on device."""
        slots, bags = self._cold_lookups_cpu(inp)
        dev = self.ctx.device
        pin = dev.type == "cuda"
        rows = torch.empty((slots.numel(), self.c), dtype=self.cold.cpu.dtype, pin_memory=pin)
        torch.index_select(self.cold.cpu, 0, slots, out=rows)
        rows_d = rows.to(dev, non_blocking=True)
        bags_d = bags.to(dev, non_blocking=True)
        out = torch.zeros((inp.num_bags, self.c), dtype=torch.float32, device=dev)
        return out.index_add_(0, bags_d, rows_d.float())

    # ---- backward -----------------------------------------------------------------------------------------

    def backward(self, inp: ShardInput, grad: torch.Tensor) -> None:
        opt = self.ctx.optimizer
        if self.kind == "hbm":
            uniq, summed = aggregate(inp.ids, grad.index_select(0, inp.bags))
            opt.update(self.hot, self.hot_state, uniq, summed)
            return
        if self.kind == "uvm":
            if self.cold.dev is not None:
                uniq, summed = aggregate(inp.ids, grad.index_select(0, inp.bags))
                opt.update(self.cold.dev, [s.dev for s in self.cold_state], uniq, summed)
            else:
                self._cold_update_cpu(inp, grad)
            return
        if self._fwd is not None and self._fwd[0] is inp:
            _, hot_idx, cold_idx = self._fwd
        else:
            hot_idx = self.hot_map.index_select(0, inp.ids)
            cold_idx = self.cold_map.index_select(0, inp.ids) if self.cold_map is not None else None
        self._fwd = None
        rows_g = grad.index_select(0, inp.bags)
        uniq, summed = aggregate(hot_idx, rows_g)  # includes the padding row: harmless, never read
        opt.update(self.hot, self.hot_state, uniq, summed)
        if cold_idx is not None:
            uniq, summed = aggregate(cold_idx, rows_g)
            opt.update(self.cold.dev, [s.dev for s in self.cold_state], uniq, summed)
        else:
            self._cold_update_cpu(inp, grad)

    def _cold_update_cpu(self, inp: ShardInput, grad: torch.Tensor) -> None:
        """Fallback: pooled gradients to the CPU (D2H), which expands, reduces and updates the cold rows."""
        g = grad.to("cpu")
        slots, bags = self._cold_lookups_cpu(inp)
        uniq, summed = aggregate(slots, g.index_select(0, bags))
        self.ctx.optimizer.update(self.cold.cpu, [s.cpu for s in self.cold_state], uniq, summed)

    # ---- inspection ---------------------------------------------------------------------------------------

    def logical_weights(self) -> torch.Tensor:
        if self.ctx.device.type == "cuda":
            torch.cuda.synchronize(self.ctx.device)
        if self.kind == "hbm":
            return self.hot.float().cpu()
        if self.kind == "uvm":
            return self.cold.cpu.float().clone()
        out = torch.empty((self.n, self.c), dtype=torch.float32)
        m = self.remap_cpu
        hot = m >= 0
        out[hot] = self.hot.float().cpu()[m[hot].long()]
        out[~hot] = self.cold.cpu.float()[(-1 - m[~hot]).long()]
        return out

    def memory_bytes(self) -> dict[str, int]:
        dev = _tensor_bytes(self.hot) + sum(_tensor_bytes(s) for s in (self.hot_state or [])) \
            + _tensor_bytes(self.hot_map) + _tensor_bytes(self.cold_map)
        host = _tensor_bytes(self.cold) + sum(_tensor_bytes(s) for s in self.cold_state)
        return {"device": dev, "host": host}


class HostShard(Shard):
    """sharding host: rows in host memory, looked up and updated by the CPU."""

    def __init__(self, **kw):
        super().__init__(**kw)
        ctx = self.ctx
        dtype = TORCH_DTYPE[self.precision]
        self.kind = "host"
        self.weight = ctx.host.zeros((self.n, self.c), dtype, gpu_readable=False)
        self.state = self._alloc_states(self.n, "host")
        t = ctx.table(self.table)
        index = ctx.workload.table_index[self.table]
        for j0, block in init_rows(ctx.seed, index, t.rows, t.dim, self.rows, self.cols, torch.device("cpu")):
            self.weight.cpu[j0:j0 + block.shape[0]] = block.to(dtype)

    @property
    def on_host(self) -> bool:
        return True

    def forward(self, inp: ShardInput) -> torch.Tensor:
        return _bag(inp.ids_cpu, self.weight.cpu, inp.offsets_cpu)

    def backward(self, inp: ShardInput, grad: torch.Tensor) -> None:
        uniq, summed = aggregate(inp.ids_cpu, grad.index_select(0, inp.bags_cpu))
        self.ctx.optimizer.update(self.weight.cpu, [s.cpu for s in self.state], uniq, summed)

    def logical_weights(self) -> torch.Tensor:
        return self.weight.cpu.float().clone()

    def memory_bytes(self) -> dict[str, int]:
        return {"device": 0, "host": self.weight.nbytes + sum(s.nbytes for s in self.state)}


class Replica(Shard):
    """One data-parallel replica: the whole table on the device, pooling its own samples."""

    def __init__(self, **kw):
        super().__init__(**kw)
        ctx = self.ctx
        dtype = TORCH_DTYPE[self.precision]
        self.kind = "replica"
        self.weight = torch.zeros((self.n, self.c), dtype=dtype, device=ctx.device)
        self.state = self._alloc_states(self.n, "device")
        self.grad = torch.zeros((self.n, self.c), dtype=torch.float32, device=ctx.device)
        t = ctx.table(self.table)
        index = ctx.workload.table_index[self.table]
        for j0, block in init_rows(ctx.seed, index, t.rows, t.dim, self.rows, self.cols, ctx.device):
            self.weight[j0:j0 + block.shape[0]] = block.to(ctx.device, dtype)

    def forward(self, inp: ShardInput) -> torch.Tensor:
        return _bag(inp.ids, self.weight, inp.offsets)

    def backward(self, inp: ShardInput, grad: torch.Tensor) -> None:
        """Scatter this replica's pooled gradients into its dense table gradient (all-reduced by the runner)."""
        self.grad.zero_()
        self.grad.index_add_(0, inp.ids, grad.index_select(0, inp.bags))

    def apply_update(self) -> None:
        """After the all-reduce: stream the update over the whole table."""
        self.ctx.optimizer.update_dense(self.weight, self.state, self.grad)

    def logical_weights(self) -> torch.Tensor:
        return self.weight.float().cpu()

    def memory_bytes(self) -> dict[str, int]:
        return {"device": _tensor_bytes(self.weight) + _tensor_bytes(self.grad)
                + sum(_tensor_bytes(s) for s in self.state), "host": 0}


def allreduce_replicas(replicas: list[Replica]) -> None:
    """Sum the replicas' dense gradients into every replica (single process: all replicas are local; a
    distributed runner replaces this with torch.distributed.all_reduce on its one replica)."""
    if len(replicas) < 2:
        return
    total = replicas[0].grad
    for r in replicas[1:]:
        total.add_(r.grad)
    for r in replicas[1:]:
        r.grad.copy_(total)


def build_device_shards(plan: Plan, ctx: BuildContext, device_name: str) -> list[Shard]:
    """Every shard (and replica) the plan puts on ``device_name`` (a GPU or a host of the plan), built on the
    local torch device / host memory. The unit of work of one rank in a distributed run."""
    out: list[Shard] = []
    for p in plan.placements:
        for i, s in enumerate(p.shards):
            if s.device != device_name:
                continue
            out.append(build_shard(p, i, ctx))
    return out


def build_shard(p: Placement, i: int, ctx: BuildContext) -> Shard:
    s = p.shards[i]
    F_ = ctx.workload.outputs_per_sample(p.table)
    common = dict(table=p.table, index=i, device_name=s.device, kind="", rows=tuple(s.rows), cols=tuple(s.cols),
                  precision=p.precision, features=F_, ctx=ctx)
    if p.sharding == "host":
        return HostShard(**common)
    if p.sharding == "data_parallel":
        return Replica(**common)
    return GpuShard(hbm_rows=s.hbm_rows, **common)


class TableAssembler:
    """Turns the pooled outputs of a table's shards into one (F, B, dim) tensor: row-wise partial sums added,
    column-wise pieces concatenated, data-parallel sample slices concatenated (autograd-friendly)."""

    def __init__(self, placement: Placement, table: TableSpec, features: int, batch: int):
        self.p = placement
        self.t = table
        self.F = features
        self.B = batch
        cols = [s.cols for s in placement.shards]
        rows = [s.rows for s in placement.shards]
        if placement.sharding == "data_parallel":
            self.mode = "samples"
        elif len(placement.shards) == 1:
            self.mode = "single"
        elif len(set(cols)) == 1:
            self.mode = "sum"
        elif all(r == (0, table.rows) for r in rows):
            self.mode = "cat"
            self.order = sorted(range(len(cols)), key=lambda i: cols[i][0])
        else:
            self.mode = "general"

    def combine(self, outs: list[torch.Tensor]) -> torch.Tensor:
        F_, B, d = self.F, self.B, self.t.dim
        if self.mode == "single":
            return outs[0].view(F_, B, d)
        if self.mode == "samples":
            return torch.cat([o.view(F_, -1, d) for o in outs], dim=1)
        if self.mode == "sum":
            total = outs[0]
            for o in outs[1:]:
                total = total + o
            return total.view(F_, B, d)
        if self.mode == "cat":
            return torch.cat([outs[i] for i in self.order], dim=1).view(F_, B, d)
        total = None
        for s, o in zip(self.p.shards, outs):
            padded = F.pad(o, (s.cols[0], d - s.cols[1]))
            total = padded if total is None else total + padded
        return total.view(F_, B, d)
