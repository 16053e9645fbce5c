"""The all-to-all of pooled embeddings between ranks: each shard's output to the sample owners, and back.

Every rank owns a contiguous slice of the global batch (runner/ranks.sample_slices: rank r owns samples
[B*r/N, B*(r+1)/N)). A shard (a table_wise, row_wise or column_wise piece, or a host table) pools its lookups
for the WHOLE global batch on the rank that builds it: (F, B, c) fp32, F the table's features, c the shard's
columns (a hot/cold split shard: the sum of its two parts, added on its device before the exchange). The
forward exchange (``exchange_outputs``) sends each rank the (F, n_r, c) slice of every shard's output for the
samples it owns, with one ``torch.distributed.all_to_all_single`` over a flat fp32 buffer with explicit split
sizes (the piece a rank keeps for itself is part of the same call: the collective copies it locally). The
owners then assemble each table over their samples (runner/rank_trainer.py).

The backward (``exchange_gradients``) is the same collective in reverse: each owner sends the gradient of
every (F, n_r, c) slice it received back to the shard's rank, which concatenates them over the sample slices
into the (F*B, c) gradient of the shard's output: what its groups' ``pack_grad`` reads.

Layout of the flat buffers (every rank derives it from the plan alone, so they agree):
- send, on rank q: for each destination r in rank order, for each shard q owns in plan order, the
  (F, n_r, c) slice, row-major;
- receive, on rank r: for each source q in rank order, for each shard q owns in plan order, (F, n_r, c).

Packing and unpacking cost a fixed number of ops per step, whatever the number of shards and ranks: the local
outputs are concatenated once (the stage: every local shard's (F, B, c), in plan order) and the send buffer is
one gather from it by an index computed once (``send_index``); the gradients coming back are one gather into the
stage's layout (the inverse index), split into per-shard views; the owner's gradients are its leaves' gradients
concatenated once (one (n_me, dim) per pooled feature, in feature order) and gathered by ``grad_index``. The
indices hold one int32 (int64 past 2^31 elements) per element of the stage and of the received slices: memory
beside the buffers themselves, paid once per run, in exchange for no Python loop over shards x ranks per step.

Data-parallel tables do not take part: each rank's replica pools its own samples (no exchange). A node-local
replica's shard (runner/node_ranks.py) pools its node's samples only (its key's ``samples`` [a, b), a union of
its node's ranks' slices): it sends to, and hears back from, the ranks whose slices lie in [a, b) and no other;
every rank lists only its own node's replicas' keys, so the layouts still agree between any two ranks.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from placer.runner import waiting


@dataclass(frozen=True)
class ExchangeKey:
    """One shard in the exchange: (table, shard index in its placement), its owner rank, features, columns."""

    table: str
    index: int
    owner: int
    features: int
    cols: int
    col0: int = 0  # the shard's first column in its table
    samples: tuple[int, int] | None = None  # the samples it pools (a node-local replica's: its node's); None: all


@dataclass
class ExchangeRecorder:
    """Wall times of the collective itself, seconds, when ``active`` (the instrumented pass): the device is
    synchronized and, with ``barrier_group`` set, every rank waits at a barrier first, so that the time is the
    transfer and not a rank waiting for another one to finish packing. The barrier's own time is kept in
    ``excluded_s`` (the phase timer leaves it out of the phase)."""

    device: torch.device
    active: bool = False
    times: dict[str, list[float]] = field(default_factory=dict)
    barrier_group: object = None
    use_barrier: bool = False
    excluded_s: float = 0.0

    def take_excluded(self) -> float:
        x, self.excluded_s = self.excluded_s, 0.0
        return x

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def run(self, name: str, fn):
        """``fn()``, timed under ``name`` when active; returns what it returns."""
        if not self.active:
            return fn()
        self.sync()
        if self.use_barrier:
            b0 = time.perf_counter()
            waiting.barrier(self.barrier_group)
            self.excluded_s += time.perf_counter() - b0
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        self.times.setdefault(name, []).append(time.perf_counter() - t0)
        return out


class AllToAllLayout:
    """Split sizes (fp32 elements), packing and unpacking of the exchange for one rank (module docstring)."""

    def __init__(self, keys: list[ExchangeKey], slices: list[tuple[int, int]], rank: int, batch: int,
                 device: torch.device, group=None, leaves: list[tuple[str, int]] | None = None):
        """``leaves``: the owner's dense inputs, (table, dim) per pooled feature in feature order (the backward
        exchange reads their gradients); a table's features are its keys' F, in this order."""
        self.keys = list(keys)
        self.slices = slices
        self.world = len(slices)
        self.rank = rank
        self.B = batch
        self.device = device
        self.group = group
        self.local = [k for k in self.keys if k.owner == rank]
        self.n_of = [b - a for a, b in slices]
        n_me = self.n_of[rank]
        self.send_splits = [sum(k.features * n * k.cols for k in self.local if self.reaches(k, r))
                            for r, n in enumerate(self.n_of)]
        self.recv_order = [k for q in range(self.world) for k in self.keys if k.owner == q and self.reaches(k, rank)]
        self.recv_splits = [sum(k.features * n_me * k.cols for k in self.recv_order if k.owner == q)
                            for q in range(self.world)]
        self.recv_sizes = [k.features * n_me * k.cols for k in self.recv_order]
        # what this rank sends to / receives from OTHER ranks per step, bytes (fp32)
        self.bytes_out = 4 * sum(s for r, s in enumerate(self.send_splits) if r != rank)
        self.bytes_in = 4 * sum(s for q, s in enumerate(self.recv_splits) if q != rank)
        self.leaves = list(leaves or [])
        self.stage_sizes = [k.features * self.span_len(k) * k.cols for k in self.local]
        self._buffers: dict[str, torch.Tensor] = {}
        self._indices: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, numel: int) -> torch.Tensor:
        """A flat fp32 buffer kept from step to step (sizes are fixed by the plan). On a CPU, large fresh
        allocations come from mmap and page-fault inside the collective: about 2x the all-to-all time of 1 MiB
        per peer on gloo. On CUDA the caching allocator would reuse the blocks anyway."""
        buf = self._buffers.get(name)
        if buf is None or buf.numel() != numel:
            buf = torch.empty(numel, dtype=torch.float32, device=self.device)
            self._buffers[name] = buf
        return buf

    def span(self, k: ExchangeKey) -> tuple[int, int]:
        """[start, stop) of the samples shard ``k`` pools: its ``samples``, or the whole batch."""
        return k.samples or (0, self.B)

    def span_len(self, k: ExchangeKey) -> int:
        a, b = self.span(k)
        return b - a

    def reaches(self, k: ExchangeKey, r: int) -> bool:
        """Whether shard ``k``'s output goes to rank ``r``: r's samples lie in those it pools."""
        a, b = self.span(k)
        return a <= self.slices[r][0] and self.slices[r][1] <= b

    @property
    def empty(self) -> bool:
        return not self.keys

    def _index(self, name: str, build) -> torch.Tensor:
        """An index tensor kept for the run (``build()``: int64 positions), int32 where it fits, on the device."""
        idx = self._indices.get(name)
        if idx is None:
            built = build()
            dtype = torch.int32 if built.numel() == 0 or int(built.max()) < 2**31 else torch.int64
            idx = self._indices[name] = built.to(dtype=dtype, device=self.device)
        return idx

    def _slice_positions(self, a: int, b: int, F: int, c: int, base: int, n: int) -> torch.Tensor:
        """Positions, in a row-major (F, n, c) block at ``base``, of its (F, b - a, c) sample slice [a, b) (sample
        positions in the block)."""
        f = torch.arange(F, dtype=torch.int64).view(F, 1, 1) * (n * c)
        s = torch.arange(a, b, dtype=torch.int64).view(1, b - a, 1) * c
        return (base + f + s + torch.arange(c, dtype=torch.int64).view(1, 1, c)).reshape(-1)

    def send_index(self) -> torch.Tensor:
        """send[j] = stage[send_index[j]]: a permutation of the stage (the local shards' outputs, plan order)."""
        def build():
            bases = [0]
            for n in self.stage_sizes:
                bases.append(bases[-1] + n)
            parts = [self._slice_positions(a - self.span(k)[0], b - self.span(k)[0], k.features, k.cols, base,
                                           self.span_len(k))
                     for r, (a, b) in enumerate(self.slices) for k, base in zip(self.local, bases)
                     if self.reaches(k, r)]
            return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
        return self._index("send", build)

    def stage_index(self) -> torch.Tensor:
        """stage[i] = send[stage_index[i]]: the inverse of ``send_index`` (where each stage element travels)."""
        def build():
            perm = self.send_index().to(device="cpu", dtype=torch.int64)
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(perm.numel(), dtype=torch.int64)
            return inv
        return self._index("stage", build)

    def grad_index(self) -> torch.Tensor:
        """backward send[j] = leaf_grads[grad_index[j]]: each received slice's gradient, (F, n_me, c) in
        ``recv_order``, from the leaves' gradients concatenated in feature order ((n_me, dim) each)."""
        def build():
            n = self.n_of[self.rank]
            starts: dict[str, list[int]] = {}
            offset = 0
            for table, dim in self.leaves:
                starts.setdefault(table, []).append(offset)
                offset += n * dim
            dims = dict(self.leaves)
            parts = []
            for k in self.recv_order:
                first = torch.tensor(starts[k.table][:k.features], dtype=torch.int64).view(-1, 1, 1)
                s = torch.arange(n, dtype=torch.int64).view(1, n, 1) * dims[k.table]
                parts.append((first + s + (k.col0 + torch.arange(k.cols, dtype=torch.int64)).view(1, 1, -1))
                             .reshape(-1))
            return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
        return self._index("grad", build)

    def pack(self, outs: list[torch.Tensor]) -> torch.Tensor:
        """Flat send buffer from the local shards' (F, B, c) or (F*B, c) outputs (in ``self.local`` order): one
        concatenation, one gather."""
        if not outs:
            return torch.zeros(0, dtype=torch.float32, device=self.device)
        stage = torch.cat([o.reshape(-1) for o in outs], out=self.buffer("forward_stage", sum(self.stage_sizes)))
        return torch.index_select(stage, 0, self.send_index(), out=self.buffer("forward_send", stage.numel()))

    def unpack(self, recv: torch.Tensor) -> list[torch.Tensor]:
        """(F, n_me, c) per received shard, in ``self.recv_order`` (views of ``recv``)."""
        n = self.n_of[self.rank]
        return [c.view(k.features, n, k.cols) for k, c in zip(self.recv_order, recv.split(self.recv_sizes))]

    def pack_grads(self, leaf_grads: list[torch.Tensor]) -> torch.Tensor:
        """Flat send buffer of the reverse exchange from the gradients of this rank's leaves ((n_me, dim) per
        pooled feature, in feature order; ``leaves`` of the constructor): one concatenation, one gather."""
        total = sum(self.recv_splits)
        if not total:
            return torch.zeros(0, dtype=torch.float32, device=self.device)
        flat = torch.cat([g.reshape(-1) for g in leaf_grads],
                         out=self.buffer("backward_leaves", sum(g.numel() for g in leaf_grads)))
        return torch.index_select(flat, 0, self.grad_index(), out=self.buffer("backward_send", total))

    def unpack_grads(self, back: torch.Tensor) -> list[torch.Tensor]:
        """The (F*B, c) gradient of every local shard's output from the reverse exchange's flat buffer (views of
        a buffer kept for the run: read them within the step)."""
        if not self.local:
            return []
        stage = torch.index_select(back, 0, self.stage_index(),
                                   out=self.buffer("backward_stage", sum(self.stage_sizes)))
        return [c.view(k.features * self.span_len(k), k.cols)
                for k, c in zip(self.local, stage.split(self.stage_sizes))]

    def all_to_all(self, send: torch.Tensor, out_splits: list[int], in_splits: list[int], name: str
                   ) -> torch.Tensor:
        out = self.buffer(name, sum(out_splits))
        work = dist.all_to_all_single(out, send, output_split_sizes=out_splits, input_split_sizes=in_splits,
                                      group=self.group, async_op=True)
        waiting.wait(work)
        return out


def exchange_outputs(layout: AllToAllLayout, outs: list[torch.Tensor], recorder: ExchangeRecorder | None = None
                     ) -> list[torch.Tensor]:
    """The forward exchange: the local shards' outputs (``layout.local`` order) -> this rank's (F, n_me, c)
    slices of every shard, in ``layout.recv_order``. Every rank calls it (the collective needs them all)."""
    send = layout.pack([o.float() for o in outs])

    def go():
        return layout.all_to_all(send, layout.recv_splits, layout.send_splits, "forward_recv")

    recv = recorder.run("forward_all_to_all", go) if recorder else go()
    return layout.unpack(recv)


def exchange_gradients(layout: AllToAllLayout, leaf_grads: list[torch.Tensor],
                       recorder: ExchangeRecorder | None = None) -> list[torch.Tensor]:
    """The backward exchange: the gradients of this rank's leaves (``layout.leaves`` order) -> the (F*B, c)
    gradient of every local shard's output (``layout.local`` order). Every rank calls it."""
    send = layout.pack_grads([g.float() for g in leaf_grads])

    def go():
        return layout.all_to_all(send, layout.send_splits, layout.recv_splits, "backward_recv")

    back = recorder.run("backward_all_to_all", go) if recorder else go()
    return layout.unpack_grads(back)
