"""The step program's fused groups, built on this machine: one table per group, its inputs, its ops.

A plan's placements become members of groups (placer/program/build.py decides which, for the cost model and
for this runner alike). Each ``FusedGroup`` holds its members' rows in ONE tensor (member after member, in
plan order), in the memory its location says: device memory (hbm, replica), pinned host memory mapped for
the GPU (uvm), or host memory read by the CPU (cpu; on a CPU run every location is RAM). Its ops are the
program's, implemented in runner/kernels.py:

- forward: one ``lookup`` over all members' bags (a member's bags are a slice of the output);
- backward: ``pack_grad`` (the members' pooled gradients into one buffer), ``sort``, ``segment_reduce`` and
  the optimizer's ``update`` of the distinct rows; a replica group ``scatter``s into its dense gradient
  instead, which the runner all-reduces, then ``update_dense`` streams the update over the group's rows.

The input step (batch preparation, outside the timed step, as TorchRec's input distribution) turns a batch's
table ids into each group's ids: a member's lookups renumbered into the fused table, with a hot/cold split's
ids remapped through its slot map (the shard's hottest rows first) so that each part reads only its own rows.

Initial weights depend only on (seed, table, row, column): U(-1/sqrt(N), 1/sqrt(N)) as in the DLRM reference,
drawn in fixed chunks of rows, so any placement holds the same logical table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from placer.forms.shardings import sharding_of
from placer.plan import Placement, Plan
from placer.program.build import ProgramBuilder
from placer.program.ops import GroupKey, Member
from placer.runner import kernels
from placer.runner.hostmem import HostMemory
from placer.runner.optim import SparseRowOptimizer, state_shapes
from placer.specs.workload import Workload

INIT_CHUNK_ROWS = 1 << 16
TORCH_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def init_rows(seed: int, table_index: int, table_rows: int, table_dim: int, rows: tuple[int, int],
              cols: tuple[int, int], device: torch.device, cache: dict | None = None):
    """Yield (first local row, fp32 block) covering rows [a, b) x cols of the table, chunk by chunk, on
    ``device``. Values depend only on (seed, table, row, col). ``cache`` (a dict the caller keeps) holds the
    last chunk drawn, so that many small shards of one chunk draw it once (without it, 20,000 one-row shards
    drew 20,000 chunks of INIT_CHUNK_ROWS rows: minutes); at most one chunk is kept."""
    a, b = rows
    bound = 1.0 / math.sqrt(table_rows)
    gen_device = device if device.type == "cuda" else torch.device("cpu")
    for chunk in range(a // INIT_CHUNK_ROWS, (b - 1) // INIT_CHUNK_ROWS + 1):
        start = chunk * INIT_CHUNK_ROWS
        size = min(INIT_CHUNK_ROWS, table_rows - start)
        key = (int(seed), table_index, table_rows, table_dim, chunk, str(gen_device))
        block = cache.get(key) if cache is not None else None
        if block is None:
            g = torch.Generator(device=gen_device)
            g.manual_seed((int(seed) * 1_000_003 + table_index) * 1_000_003 + chunk)
            block = torch.rand((size, table_dim), generator=g, device=gen_device)
            block.mul_(2 * bound).sub_(bound)
            if cache is not None:
                cache.clear()
                cache[key] = block
        lo, hi = max(a, start), min(b, start + size)
        yield lo - a, block[lo - start:hi - start, cols[0]:cols[1]]


def hot_local_ids(perm: np.ndarray, rows: tuple[int, int], k: int) -> np.ndarray:
    """Local ids (id - first row) of the ``k`` hottest rows of a shard: its ids in popularity-rank order."""
    a, b = rows
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    in_shard = perm[(perm >= a) & (perm < b)]
    return in_shard[:k].astype(np.int64) - a


def offsets_from_bags(bags: np.ndarray, num_bags: int) -> np.ndarray:
    """Start of every bag in a lookup list sorted by bag."""
    counts = np.bincount(bags, minlength=num_bags)
    offsets = np.zeros(num_bags, dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    return offsets


@dataclass
class Slot:
    """One member in a fused group: rows [row_base, row_base + rows), bags [bag_base, bag_base + bags)."""

    placement: Placement
    member: Member
    row_base: int
    bag_base: int
    samples: tuple[int, int]  # samples it pools: a replica its slice, everything else the whole batch
    features: int
    table_dim: int = 0  # the table's width (a member of the whole width needs no column slice)

    @property
    def width(self) -> int:
        return self.member.cols[1] - self.member.cols[0]


@dataclass
class GroupInput:
    """A group's lookups in one batch: row ids of the fused table, offsets of every bag, bag of every lookup
    (sorted by bag), on the device its lookups run on."""

    ids: torch.Tensor
    offsets: torch.Tensor
    bags: torch.Tensor

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.ids, self.offsets, self.bags))


@dataclass
class BuildContext:
    """What a group needs to be built: the local device, host memory, optimizer, seed, rank permutations."""

    workload: Workload
    device: torch.device
    host: HostMemory
    optimizer: SparseRowOptimizer
    seed: int
    perms: dict[str, np.ndarray]
    batch: int
    #: (table, shard) -> a hot/cold split's (is_hot per local id, local id -> slot in its part): FusedGroup.slot_map
    slot_maps: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: graph-safe groups' optimizer (runner/static_step.StaticRowOptimizer; runner/graph_groups.py), else None
    static_optimizer: object | None = None


class FusedGroup:
    """One group of the program on this machine: its fused rows and state, and its ops."""

    #: rows held past the group's own (a graph-safe group's scratch row: runner/graph_groups.py)
    extra_rows = 0

    def __init__(self, key: GroupKey, slots: list[Slot], ctx: BuildContext):
        self.key, self.slots, self.ctx = key, slots, ctx
        self.width = key.width
        self.rows = sum(s.member.rows for s in slots)
        self.bags = sum(s.member.bags for s in slots)
        dtype = TORCH_DTYPE[key.dtype]
        dev = ctx.device
        self.host_rows = key.location in ("uvm", "cpu")
        self._host = None
        held = self.rows + self.extra_rows
        if key.location in ("hbm", "replica"):
            self.weight = self.weight_cpu = torch.zeros((held, self.width), dtype=dtype, device=dev)
            self.states = self._states(lambda shape: torch.zeros(shape, dtype=torch.float32, device=dev))
        else:
            self._host = ctx.host.zeros((held, self.width), dtype, gpu_readable=key.location == "uvm")
            self.weight_cpu = self._host.cpu
            mapped = self._host.dev is not None
            self.weight = self._host.dev if mapped else self._host.cpu
            self._host_states = self._states(lambda shape: ctx.host.zeros(shape, torch.float32,
                                                                          gpu_readable=key.location == "uvm"))
            self.states = [s.dev if mapped else s.cpu for s in self._host_states]
        # where the lookups run: on the CPU for CPU-looked-up rows (and where the GPU cannot map host memory)
        self.op_device = self.weight.device
        self.on_cpu = self.op_device.type == "cpu"
        self.grad = torch.empty((self.bags, self.width), dtype=torch.float32, device=dev)  # packed on the device
        self.grad_op = self.grad if not self.on_cpu or dev.type == "cpu" else torch.empty(
            (self.bags, self.width), dtype=torch.float32, pin_memory=True)
        # a GPU run's CPU-looked-up output is staged in pinned memory, so that its copy to the device is the
        # asynchronous pinned H2D the program prices (copy_h2d at the link's rate), not a synchronous pageable copy;
        # the staging memcpy on the host (bags x width x 4 bytes) is not priced (a few % of the lookup it follows)
        self.out_pinned = torch.empty((self.bags, self.width), dtype=torch.float32, pin_memory=True) \
            if self.on_cpu and dev.type == "cuda" else None
        self.dense_grad = (torch.zeros((self.rows, self.width), dtype=torch.float32, device=dev)
                           if key.location == "replica" else None)
        self._fill()

    def _states(self, alloc) -> list[torch.Tensor]:
        """The optimizer's state tensors of the group's rows (none for frozen rows, never updated)."""
        if not self.key.trained:
            return []
        return [alloc(s) for s in state_shapes(self.ctx.optimizer.name, self.rows + self.extra_rows, self.width)]

    # ---- build ------------------------------------------------------------------------------------------------

    def slot_map(self, s: Slot) -> tuple[np.ndarray, np.ndarray] | None:
        """For a part of a hot/cold split: (is_hot per local id, local id -> slot in its part); else None."""
        if s.member.part == "all":
            return None
        cache = self.ctx.slot_maps
        key = (s.member.table, s.member.shard)
        if key not in cache:
            a, b = s.member.local_ids
            n = b - a
            k = s.member.rows if s.member.part == "hot" else n - s.member.rows
            hot = hot_local_ids(self.ctx.perms[s.member.table], (a, b), k)
            is_hot = np.zeros(n, dtype=bool)
            is_hot[hot] = True
            slot = np.empty(n, dtype=np.int64)
            slot[hot] = np.arange(k)
            slot[~is_hot] = np.arange(n - k)
            cache[key] = (is_hot, slot)
        return cache[key]

    def _fill(self) -> None:
        wl = self.ctx.workload
        init_dev = self.ctx.device if self.weight_cpu.device.type == "cuda" else torch.device("cpu")
        chunks: dict = {}  # the last chunk drawn (init_rows)
        for s in self.slots:
            t = wl.tables[wl.table_index[s.member.table]]
            maps = self.slot_map(s)
            for j0, block in init_rows(self.ctx.seed, wl.table_index[t.name], t.rows, t.dim, s.member.local_ids,
                                       s.member.cols, init_dev, chunks):
                block = block.to(self.weight_cpu.device, self.weight_cpu.dtype)
                if maps is None:
                    self.weight_cpu[s.row_base + j0:s.row_base + j0 + block.shape[0]] = block
                    continue
                is_hot, slot = maps
                local = np.arange(j0, j0 + block.shape[0])
                mine = is_hot[local] if s.member.part == "hot" else ~is_hot[local]
                at = torch.from_numpy(s.row_base + slot[local[mine]]).to(self.weight_cpu.device)
                self.weight_cpu[at] = block[torch.from_numpy(mine).to(block.device)]

    # ---- the input step ---------------------------------------------------------------------------------------

    def make_input(self, tables: dict[str, tuple[np.ndarray, np.ndarray]]) -> GroupInput:
        """This group's lookups of one batch (``tables``: per table, global ids and bags f*B + s)."""
        B = self.ctx.batch
        ids_parts, bag_parts = [], []
        for s in self.slots:
            ids, bags = tables[s.member.table]
            s0, s1 = s.samples
            if (s0, s1) != (0, B):  # a replica's, or a node-local replica's shard's: those samples' lookups only
                sample, feature = bags % B, bags // B
                keep = (sample >= s0) & (sample < s1)
                ids, bags = ids[keep], feature[keep] * (s1 - s0) + (sample[keep] - s0)
            if self.key.location == "replica":
                local, lbags = ids, bags
            else:
                a, b = s.member.local_ids
                keep = (ids >= a) & (ids < b)
                local, lbags = ids[keep] - a, bags[keep]
                maps = self.slot_map(s)
                if maps is not None:
                    is_hot, slot = maps
                    mine = is_hot[local] if s.member.part == "hot" else ~is_hot[local]
                    local, lbags = slot[local[mine]], lbags[mine]
            ids_parts.append(local + s.row_base)
            bag_parts.append(lbags + s.bag_base)
        ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int64)
        bags = np.concatenate(bag_parts) if bag_parts else np.zeros(0, np.int64)
        offsets = offsets_from_bags(bags, self.bags)
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(self.op_device)
        return GroupInput(ids=to(ids), offsets=to(offsets), bags=to(bags))

    # ---- ops --------------------------------------------------------------------------------------------------

    def lookup(self, inp: GroupInput) -> torch.Tensor:
        out = kernels.lookup(self.weight, inp.ids, inp.offsets)
        return out if self.out_pinned is None else self.out_pinned.copy_(out)

    def member_output(self, out: torch.Tensor, s: Slot) -> torch.Tensor:
        """A member's pooled output, (features, samples, width), a view of the group's output."""
        n = s.samples[1] - s.samples[0]
        return out[s.bag_base:s.bag_base + s.member.bags].view(s.features, n, self.width)

    def pack_grad(self, parts: list[torch.Tensor]) -> None:
        """The members' pooled gradients (features x samples x width pieces, member order) into ``grad``; on a
        GPU run with the rows looked up by the CPU, then copied to the CPU (pinned, non-blocking)."""
        kernels.pack_grad(parts, self.grad)
        if self.grad_op is not self.grad:
            self.grad_op.copy_(self.grad, non_blocking=True)

    def sort(self, inp: GroupInput):
        return kernels.sort(inp.ids, inp.bags)

    def segment_reduce(self, runs) -> torch.Tensor:
        _uniq, counts, sorted_bags = runs
        return kernels.segment_reduce(self.grad_op, sorted_bags, counts)

    def update(self, runs, summed: torch.Tensor) -> None:
        self.ctx.optimizer.update(self.weight, self.states, runs[0], summed)

    def scatter(self, runs, summed: torch.Tensor) -> None:
        kernels.scatter(self.dense_grad, runs[0], summed)

    def update_dense(self) -> None:
        self.ctx.optimizer.update_dense(self.weight, self.states, self.dense_grad)

    # ---- inspection -------------------------------------------------------------------------------------------

    def member_rows(self, s: Slot) -> torch.Tensor:
        """A member's rows in its local id order (a split part: its own rows, in slot order), fp32 on the CPU."""
        if self.ctx.device.type == "cuda":
            torch.cuda.synchronize(self.ctx.device)
        return self.weight_cpu[s.row_base:s.row_base + s.member.rows].float().cpu()

    def memory_bytes(self) -> dict[str, int]:
        nb = lambda t: t.numel() * t.element_size()
        rows = nb(self.weight_cpu) + sum(nb(t) for t in self.states)  # states: views of the host states
        return {"device": 0 if self.host_rows else rows, "host": rows if self.host_rows else 0}


def build_groups(plan: Plan, ctx: BuildContext, builder: ProgramBuilder, devices: set[str] | None = None,
                 replica_samples: tuple[int, int] | None = None, make=FusedGroup,
                 table_samples: dict[str, tuple[int, int]] | None = None) -> dict[GroupKey, FusedGroup]:
    """The plan's groups (those on ``devices``, or all), built on the local device; slots in plan order.
    ``make(key, slots, ctx)`` builds each (runner/compressed_groups.make_group: compressed groups too).

    Replica r of a data-parallel table with n replicas pools samples [B*r/n, B*(r+1)/n) of the global batch,
    or ``replica_samples`` [start, stop) when given (a rank of a distributed run: its own sample slice). The
    shards of a table in ``table_samples`` pool its [start, stop) (a node-local replica: its node's samples:
    runner/node_ranks.py); every other shard the whole batch."""
    slots: dict[GroupKey, list[Slot]] = {}
    bases: dict[GroupKey, tuple[int, int]] = {}  # next (row_base, bag_base) of every group
    W = len(builder.gpus)
    for p in plan.placements:
        F = builder.features[p.table]
        for key, m in builder.members(p):
            if devices is not None and key.device not in devices:
                continue
            have = slots.setdefault(key, [])
            samples = None  # a slice of the batch: the member pools its bags only
            if sharding_of(p).whole_copies:
                r = m.shard
                samples = (ctx.batch * r // W, ctx.batch * (r + 1) // W) if len(p.shards) == W else \
                    (ctx.batch * r // len(p.shards), ctx.batch * (r + 1) // len(p.shards))
                if replica_samples is not None:
                    samples = tuple(replica_samples)
            elif table_samples and p.table in table_samples:
                samples = tuple(table_samples[p.table])
            if samples is None:
                samples = (0, ctx.batch)
            else:
                m = Member(m.table, m.shard, m.part, m.rows, m.cols, F * (samples[1] - samples[0]), m.lookups,
                           m.unique_rows, m.local_ids)
            row_base, bag_base = bases.get(key, (0, 0))
            bases[key] = (row_base + m.rows, bag_base + m.bags)
            have.append(Slot(p, m, row_base, bag_base, samples, F, builder.tables[p.table].dim))
    return {key: make(key, s, ctx) for key, s in sorted(slots.items())}


__all__ = ["BuildContext", "FusedGroup", "GroupInput", "Slot", "build_groups", "init_rows", "hot_local_ids",
           "offsets_from_bags"]
