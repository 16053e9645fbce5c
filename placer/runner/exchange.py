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

Data-parallel tables do not take part: each rank's replica pools its own samples (no exchange).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class ExchangeKey:
    """One shard in the exchange: (table, shard index in its placement), its owner rank, features, columns."""

    table: str
    index: int
    owner: int
    features: int
    cols: int


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
            dist.barrier(group=self.barrier_group)
            self.excluded_s += time.perf_counter() - b0
        t0 = time.perf_counter()
        out = fn()
        self.sync()
        self.times.setdefault(name, []).append(time.perf_counter() - t0)
        return out


class AllToAllLayout:
    """Split sizes (fp32 elements), packing and unpacking of the exchange for one rank (module docstring)."""

    def __init__(self, keys: list[ExchangeKey], slices: list[tuple[int, int]], rank: int, batch: int,
                 device: torch.device, group=None):
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
        self.send_splits = [sum(k.features * n * k.cols for k in self.local) for n in self.n_of]
        self.recv_order = [k for q in range(self.world) for k in self.keys if k.owner == q]
        self.recv_splits = [sum(k.features * n_me * k.cols for k in self.keys if k.owner == q)
                            for q in range(self.world)]
        self.recv_sizes = [k.features * n_me * k.cols for k in self.recv_order]
        # what this rank sends to / receives from OTHER ranks per step, bytes (fp32)
        self.bytes_out = 4 * sum(s for r, s in enumerate(self.send_splits) if r != rank)
        self.bytes_in = 4 * sum(s for q, s in enumerate(self.recv_splits) if q != rank)
        self._buffers: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, numel: int) -> torch.Tensor:
        """A flat fp32 buffer kept from step to step (sizes are fixed by the plan). On a CPU, large fresh
        allocations come from mmap and page-fault inside the collective: about 2x the all-to-all time of 1 MiB
        per peer on gloo. On CUDA the caching allocator would reuse the blocks anyway."""
        buf = self._buffers.get(name)
        if buf is None or buf.numel() != numel:
            buf = torch.empty(numel, dtype=torch.float32, device=self.device)
            self._buffers[name] = buf
        return buf

    @property
    def empty(self) -> bool:
        return not self.keys

    def pack(self, outs: list[torch.Tensor]) -> torch.Tensor:
        """Flat send buffer from the local shards' (F, B, c) or (F*B, c) outputs (in ``self.local`` order)."""
        pieces = []
        for a, b in self.slices:
            for k, o in zip(self.local, outs):
                pieces.append(o.reshape(k.features, self.B, k.cols)[:, a:b].reshape(-1))
        if not pieces:
            return torch.zeros(0, dtype=torch.float32, device=self.device)
        return torch.cat(pieces, out=self.buffer("forward_send", sum(self.send_splits)))

    def unpack(self, recv: torch.Tensor) -> list[torch.Tensor]:
        """(F, n_me, c) per received shard, in ``self.recv_order`` (views of ``recv``)."""
        n = self.n_of[self.rank]
        return [c.view(k.features, n, k.cols) for k, c in zip(self.recv_order, recv.split(self.recv_sizes))]

    def pack_grads(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """Flat send buffer of the reverse exchange from the (F, n_me, c) gradients of the received slices
        (in ``self.recv_order``)."""
        if not grads:
            return torch.zeros(0, dtype=torch.float32, device=self.device)
        return torch.cat([g.reshape(-1) for g in grads], out=self.buffer("backward_send", sum(self.recv_splits)))

    def unpack_grads(self, back: torch.Tensor) -> list[torch.Tensor]:
        """The (F*B, c) gradient of every local shard's output from the reverse exchange's flat buffer."""
        sizes = [k.features * n * k.cols for n in self.n_of for k in self.local]
        chunks = back.split(sizes) if sizes else []
        per_key: list[list[torch.Tensor]] = [[] for _ in self.local]
        it = iter(chunks)
        for n in self.n_of:
            for j, k in enumerate(self.local):
                per_key[j].append(next(it).view(k.features, n, k.cols))
        return [torch.cat(parts, dim=1).reshape(k.features * self.B, k.cols)
                for k, parts in zip(self.local, per_key)]

    def all_to_all(self, send: torch.Tensor, out_splits: list[int], in_splits: list[int], name: str
                   ) -> torch.Tensor:
        out = self.buffer(name, sum(out_splits))
        dist.all_to_all_single(out, send, output_split_sizes=out_splits, input_split_sizes=in_splits,
                               group=self.group)
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


def exchange_gradients(layout: AllToAllLayout, grads: list[torch.Tensor],
                       recorder: ExchangeRecorder | None = None) -> list[torch.Tensor]:
    """The backward exchange: gradients of the received slices (``layout.recv_order``) -> the (F*B, c)
    gradient of every local shard's output (``layout.local`` order). Every rank calls it."""
    send = layout.pack_grads([g.float() for g in grads])

    def go():
        return layout.all_to_all(send, layout.send_splits, layout.recv_splits, "backward_recv")

    back = recorder.run("backward_all_to_all", go) if recorder else go()
    return layout.unpack_grads(back)
