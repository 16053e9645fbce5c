"""One rank of a distributed run: the step program's groups of its plan devices, its side of the exchange,
the dense model over its samples (its gradients all-reduced once per step), a pool of its batches. The same
math as the one-process Trainer (runner/trainer.py), so several processes train exactly like one.

The rank builds the fused groups of its plan devices (runner/ranks.py says which; data-parallel tables: one
replica, pooling the rank's own samples [s0, s1)). Every rank draws the same global batches from the same seed
and its input step keeps what its groups need (whole-batch lookups for shards, its samples' for replicas). A
node-local table (``replicated: per_node``): the rank builds its node's replica only, whose shards pool the node's
samples, exchange with the node's ranks and update without any reduction across nodes (runner/node_ranks.py).

One step, in the program's phases (seconds; fp32 pooled outputs and gradients):
1. embedding_forward:  every local group's ``lookup``; split shards' hot + cold parts added on their device
2. forward_exchange:   CPU groups' outputs to the device on a GPU run (``copy_h2d``); every shard's output to
                       the sample owners (``all_to_all``: runner/exchange.py); each table assembled over the
                       rank's samples (``combine``: row-wise partial sums added in shard order, column-wise
                       pieces concatenated; a replicated table is the rank's replica's output); one leaf per
                       feature (``elementwise``)
3. dense:              forward + backward over the rank's n samples; loss = sum over its samples of BCE /
                       global B, so the ranks' losses add up to the one-process mean loss (and the all-reduce
                       SUMS the dense gradients over the ranks for the same reason)
4. backward_exchange:  each received slice's gradient (its table's gradient, the shard's columns) back to the
                       shard's rank (the reverse ``all_to_all``), there concatenated over the sample slices;
                       every group's ``pack_grad`` of its members' gradients (a split's two parts: the same one)
5. embedding_backward: every group's ``sort``, ``segment_reduce`` and ``update`` (replicas: ``scatter``)
6. gradient_allreduce: replicas' dense gradients and the dense model's summed over the ranks (``all_reduce``,
                       one coalesced call after the embedding backward, as the program prices it: no overlap
                       with the dense backward as DDP's, which the program does not price, and which a CPU
                       rank's one core could only share with gloo's thread; a rank waits for it, and for the
                       exchange, as runner/waiting.py says),
                       then ``update_dense`` (charged to embedding_backward) and the dense optimizer step (dense)

Op timing (``ops``: RankOpTimer) uses the program's names: group ops on their plan device's stream
(``builder.stream(key.device)``), the rank's own work (copies, exchange, assembly, leaves, dense, all-reduce)
on its first plan GPU's stream; a host's group (location cpu, not on a unified-memory node) has its ``pack_grad``
(and the copy back) on that stream too, as the program has it on the GPUs'.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist
import torch.nn.functional as F

from placer.forms.shardings import sharding_of
from placer.plan import Plan
from placer.program.build import ProgramBuilder
from placer.program.dense_model import DenseDLRM, make_dense_optimizer
from placer.runner import waiting
from placer.runner.batches import Batch, BatchGenerator
from placer.runner.exchange import (AllToAllLayout, ExchangeKey, ExchangeRecorder, exchange_gradients,
                                    exchange_outputs)
from placer.runner.groups import BuildContext, FusedGroup, build_groups
from placer.runner.hostmem import HostMemory
from placer.runner.optim import SparseRowOptimizer
from placer.runner.node_ranks import local_plan
from placer.runner.ranks import RankMap, one_replica_per_rank
from placer.runner.timing import OpTimer, PhaseTimer, synchronize
from placer.runner.trainer import (GroupOwner, TableParts, backward_group, dense_autocast, each_group, feature_slots,
                                   split_sums)
from placer.specs.workload import Workload
from placer.topology import Topology


def allreduce_sum(tensors: list[torch.Tensor]) -> None:
    """One coalesced all-reduce (sum over the ranks) of several tensors, in place."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    flat = _flatten_dense_tensors(tensors)
    waiting.wait(dist.all_reduce(flat, async_op=True))
    for t, s in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
        t.copy_(s)


class RankTrainer(GroupOwner):
    """One rank's part of a plan (module docstring)."""

    def __init__(self, plan: Plan, workload: Workload, device: torch.device, topology: Topology, rmap: RankMap,
                 rank: int, *, seed: int = 0, host_read: str = "auto", pool_batches: int = 4,
                 overlap_host: bool | None = None):
        self.plan, self.wl, self.device, self.topo, self.rmap, self.rank = plan, workload, device, topology, rmap, rank
        self.world = rmap.world
        self.B = workload.batch_size
        self.s0, self.s1 = rmap.slices[rank]
        self.n = self.s1 - self.s0
        self.builder = ProgramBuilder(topology, workload)
        self.host = HostMemory(device, host_read)
        self.optimizer = SparseRowOptimizer(workload.optimizer.name, workload.optimizer.lr)
        gen = BatchGenerator(workload, plan, seed)
        ctx = BuildContext(workload=workload, device=device, host=self.host, optimizer=self.optimizer, seed=seed,
                           perms=gen.perms, batch=self.B)
        # node-local tables: this rank's node's replica only, pooling that node's samples (runner/node_ranks.py)
        self.local_plan, self.table_samples = local_plan(one_replica_per_rank(plan, rmap, rank), topology, rmap, rank)
        self.groups: dict = build_groups(self.local_plan, ctx, self.builder, devices=set(rmap.devices_of(rank)),
                                         replica_samples=(self.s0, self.s1), table_samples=self.table_samples)
        self.streams = {key: self.builder.stream(key.device) for key in self.groups}
        self.stream = self.builder.stream(rmap.first_gpu(rank))
        self._init_tables(self.local_plan, workload)
        self.feature_slots = feature_slots(workload)
        # the dense model: the same init as the one-process Trainer (global torch seed, then DenseDLRM), so every
        # rank starts from the same weights and the summed gradients keep them equal
        torch.manual_seed(seed)
        self.model = DenseDLRM(workload).to(device)
        dense_spec = workload.resolved_dense_optimizer
        self.dense_opt = make_dense_optimizer(self.model, dense_spec.name, dense_spec.lr, foreach=device.type == "cuda")
        self.autocast, self.dense_dtype = dense_autocast(device, workload.dense.dtype)
        self.pool: list[Batch] = [self._make_batch(gen) for _ in range(max(1, pool_batches))]
        gen.release_permutations()
        synchronize(device)
        self.losses: list[torch.Tensor] = []
        overlap = (device.type == "cuda") if overlap_host is None else overlap_host
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="placer-host") \
            if (overlap and any(g.on_cpu for g in self.groups.values())) else None

    def _init_tables(self, plan: Plan, workload: Workload) -> None:
        """Per table its local parts (TableParts), the exchange layout over every rank's shards, and the local
        replicas' dense gradients in plan order (the all-reduce's layout: the same on every rank)."""
        parts: dict[str, dict[int, list]] = {p.table: {} for p in plan.placements}
        for g in self.groups.values():
            for s in g.slots:
                parts[s.member.table].setdefault(s.member.shard, []).append((g, s))
        dims = {t.name: t.dim for t in workload.tables}
        self.tables = {p.table: TableParts(p, parts[p.table], dims[p.table]) for p in plan.placements}
        keys = [ExchangeKey(p.table, i, self.rmap.rank_of(s.device), workload.outputs_per_sample(p.table),
                            s.num_cols, s.cols[0], self.table_samples.get(p.table))
                for p in plan.placements if not sharding_of(p).whole_copies for i, s in enumerate(p.shards)]
        leaves = [(t, dims[t]) for t, _ in feature_slots(workload)]
        self.layout = AllToAllLayout(keys, list(self.rmap.slices), self.rank, self.B, self.device, leaves=leaves)
        self.recorder = ExchangeRecorder(self.device)
        self.replica_grads = []
        for p in plan.placements:
            if sharding_of(p).whole_copies:
                g, s = self.tables[p.table].shards[0][0]
                self.replica_grads.append(g.dense_grad[s.row_base:s.row_base + s.member.rows])

    # ---- batches ----------------------------------------------------------------------------------------------

    def _make_batch(self, gen: BatchGenerator) -> Batch:
        """The generator's next global batch (every rank draws the same), cut to this rank's groups and
        samples."""
        arrays = gen.make_numpy()
        inputs = {key: g.make_input(arrays["tables"]) for key, g in self.groups.items()}
        cut = lambda a: torch.from_numpy(a[self.s0:self.s1].copy()).to(self.device)
        return Batch(dense=cut(arrays["dense"]), labels=cut(arrays["labels"]), groups=inputs, table_ids={})

    # ---- one step ---------------------------------------------------------------------------------------------

    def step(self, batch: Batch, phases: PhaseTimer | None = None, ops: OpTimer | None = None) -> torch.Tensor:
        """One training step; returns this rank's loss term (sum over its samples / global B; not synchronized).
        ``phases`` marks the phases, ``ops`` times every op (the instrumented passes; module docstring)."""
        mark = phases.mark if phases else (lambda _phase: None)
        timer = ops or OpTimer.off()
        worker = self._worker if ops is None else None
        if phases:
            phases.begin()
        self.optimizer.new_step()
        tables = list(self.tables.values())
        outs: dict = {}
        each_group(self.groups, lambda k, g: outs.__setitem__(
            k, timer.run("lookup", self.streams[k], lambda: g.lookup(batch.groups[k]))), worker)
        sums = split_sums(tables, outs, self.streams, self.device, timer, copied=False)
        mark("embedding_forward")

        for k, g in self.groups.items():  # rows looked up by the CPU: their outputs to the device
            if g.on_cpu and self.device.type == "cuda":
                outs[k] = timer.run("copy_h2d", self.stream, lambda o=outs[k]: o.to(self.device, non_blocking=True))
        sums.update(split_sums(tables, outs, self.streams, self.device, timer, copied=True))
        leaves = self._forward_exchange(outs, sums, timer)
        mark("forward_exchange")

        def dense():
            with self.autocast:
                logits = self.model(batch.dense, leaves)
            loss = F.binary_cross_entropy_with_logits(logits.float(), batch.labels, reduction="sum") / self.B
            self.dense_opt.zero_grad(set_to_none=True)
            loss.backward()
            return loss
        loss = timer.run("dense", self.stream, dense)
        mark("dense")

        self._backward_exchange(leaves, timer)
        if self.device.type == "cuda" and any(g.on_cpu for g in self.groups.values()):
            synchronize(self.device)  # the CPU groups' gradients have arrived (no sync when there are none)
        mark("backward_exchange")

        each_group(self.groups, lambda k, g: backward_group(g, batch.groups[k], timer, self.streams[k]), worker)
        mark("embedding_backward")
        bufs = list(self.replica_grads) + [p.grad for p in self.model.parameters() if p.grad is not None]
        if bufs and self.world > 1:
            timer.run("all_reduce", self.stream, lambda: allreduce_sum(bufs))
        mark("gradient_allreduce")
        for k, g in self.groups.items():
            if k.location == "replica":
                timer.run("update_dense", self.streams[k], g.update_dense)
        mark("embedding_backward")
        timer.run("dense", self.stream, self.dense_opt.step)
        mark("dense")
        return loss.detach()

    def _shard_output(self, tp: TableParts, i: int, outs: dict, sums: dict) -> torch.Tensor:
        """Shard i's pooled output (features, B, cols): its one member's, or its split parts' sum."""
        parts = tp.shards[i]
        if len(parts) == 2:
            return sums[(tp.p.table, i)]
        g, s = parts[0]
        return g.member_output(outs[g.key], s)

    def _forward_exchange(self, outs: dict, sums: dict, timer: OpTimer) -> list[torch.Tensor]:
        """The all-to-all of the local shards' outputs, each table assembled over this rank's samples, and the
        dense model's leaves: one (n, dim) tensor per feature, requiring grad."""
        received: dict[str, list] = {t: [None] * len(tp.shards) for t, tp in self.tables.items()}
        if not self.layout.empty:
            send = [self._shard_output(self.tables[k.table], k.index, outs, sums) for k in self.layout.local]
            got = timer.run("all_to_all", self.stream, lambda: exchange_outputs(self.layout, send, self.recorder))
            for k, r in zip(self.layout.recv_order, got):
                received[k.table][k.index] = r
        per_table = {}
        for t, tp in self.tables.items():
            if tp.mode == "samples":  # the rank's replica: its own samples already
                g, s = tp.shards[0][0]
                per_table[t] = g.member_output(outs[g.key], s)
            elif tp.mode == "single":
                per_table[t] = received[t][0]
            else:
                per_table[t] = timer.run("combine", self.stream, lambda tp=tp, r=received[t]: tp.combine(r))
        return timer.run("elementwise", self.stream, lambda: [per_table[t][i].detach().requires_grad_(True)
                                                             for t, i in self.feature_slots])

    def _backward_exchange(self, leaves: list[torch.Tensor], timer: OpTimer) -> None:
        """Each table's gradient over this rank's samples back to its shards (the reverse all-to-all), then every
        group's pack_grad of its members' gradients."""
        grads = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
        per_table: dict[str, list[torch.Tensor]] = {}
        for (t, _), g in zip(self.feature_slots, grads):
            per_table.setdefault(t, []).append(g)
        shard_grads: dict[tuple[str, int], torch.Tensor] = {}
        if not self.layout.empty:
            got = timer.run("all_to_all", self.stream, lambda: exchange_gradients(self.layout, grads, self.recorder))
            shard_grads = {(k.table, k.index): g for k, g in zip(self.layout.local, got)}

        def member_grads(g: FusedGroup) -> list[torch.Tensor]:
            pieces = []
            for s in g.slots:
                if g.key.location == "replica":
                    c0, c1 = s.member.cols
                    pieces += [fg[:, c0:c1] for fg in per_table[s.member.table]]
                else:
                    pieces.append(shard_grads[(s.member.table, s.member.shard)])
            return pieces
        for k, g in self.groups.items():
            on_gpus = k.location == "cpu" and not self.topo.is_unified(k.device)  # packed on the GPU, copied back
            timer.run("pack_grad", self.stream if on_gpus else self.streams[k],
                      lambda g=g: g.pack_grad(member_grads(g)))

    # ---- results ----------------------------------------------------------------------------------------------

    def global_losses(self) -> list[float]:
        """Every step's loss over the global batch (the ranks' terms summed): a collective, all ranks call."""
        if not self.losses:
            return []
        x = torch.stack(self.losses).float()
        if self.world > 1:
            dist.all_reduce(x)
        return [float(v) for v in x.cpu()]

    @property
    def replicas(self) -> int:
        return len(self.replica_grads)

