"""Several processes: the runner over torch.distributed, with the real collectives.

Launch: ``placer run HW WL PLAN --nproc N`` starts N local processes (``python -m placer.runner``) with the
environment torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
MASTER_PORT=a free port), and ``torchrun --nproc-per-node N -m placer.runner HW WL PLAN ...`` runs the same
worker under torchrun (several nodes: torchrun's --nnodes/--node-rank/--rdzv-endpoint). Backend: NCCL on
cuda (rank on cuda:LOCAL_RANK), gloo on cpu.

Which rank does what:
- plan GPU i (the topology's GPU order: node0/gpu0, node0/gpu1, ..., node1/gpu0, ...) runs on rank i mod N
  (round-robin folding when the plan has more GPUs than processes; N must not exceed the plan's GPUs);
- a plan host (``nodeK/host``, sharding host) runs on the rank of nodeK's first GPU: with one node, rank 0.
  Its CPU gathers and pools for the whole global batch and its pooled outputs enter the all-to-all like
  any shard's (on cuda: copied to rank 0's GPU first);
- samples: rank r owns the contiguous slice [B*r/N, B*(r+1)/N) of every global batch (dense features,
  labels, the loss terms); every rank draws the same global batches from the same seed and keeps what it
  needs (its shards' lookups for the whole batch, its replicas' lookups for its own samples);
- data_parallel tables: each rank holds ONE replica (however many of the plan's replicas fold onto it) that
  pools the rank's own samples; the replicas' dense gradients are all-reduced (sum). A distributed run needs
  a replica on every rank.

One step, in the cost model's phases:
1. embedding_forward:  local shards pool their lookups (whole batch), replicas pool the rank's samples
2. forward_exchange:   all_to_all_single of the pooled outputs to the sample owners; owners assemble tables
                       (row-wise partial sums added, column-wise pieces concatenated)
3. dense:              DDP forward + backward over the rank's samples; loss = sum over the rank's samples of
                       BCE / global B, so the ranks' losses add up to the one-process mean-reduced loss. DDP's
                       gradient hook SUMS (not averages) over ranks for the same reason
4. backward_exchange:  autograd continues through the exchange: the reverse all_to_all_single of the
                       pooled gradients to the shards' owners (``exchange.PooledAllToAll``)
5. embedding_backward: sparse row updates on the owners; replicas scatter into their dense gradient
6. gradient_allreduce: replicas' gradients all-reduced (sum), then applied (charged to embedding_backward)

The timed steps run back to back (DDP all-reduces the dense gradients during the backward, overlapped); the
step time of step i is the max over ranks of each rank's own wall time for it; the reported step time is the
median of those. The instrumented pass synchronizes the device and all ranks (a barrier on a gloo group,
excluded from the phases) at every phase boundary, and does the dense all-reduce explicitly (``no_sync`` +
one coalesced all_reduce) so that it is charged to gradient_allreduce as cost.py prices it; each phase is the
max over ranks, median over steps. The collective alone is timed too, after a barrier of its own (so that it
is the transfer, not a rank waiting for another to finish packing; that barrier is left out of the phase):
``measured.exchange.forward_all_to_all_s`` / ``backward_all_to_all_s``.
"""
from __future__ import annotations

import contextlib
import datetime
import inspect
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from placer.cost import PHASES
from placer.errors import InfeasibleError, PlacerError, SpecError
from placer.plan import Placement, Plan
from placer.runner.batches import INDEX_DTYPE, BatchGenerator, ShardInput, _offsets_from_bags
from placer.runner.exchange import AllToAllLayout, ExchangeKey, ExchangeRecorder, exchange, sample_slices
from placer.runner.hostmem import HostMemory
from placer.runner.memory import MemoryNeeds, check_memory, estimate_needs
from placer.program.dense_model import DenseDLRM, make_dense_optimizer
from placer.runner.optim import SparseRowOptimizer
from placer.runner.run import (RunConfig, TrainerLoop, _dense_autocast, _peak_rss_bytes, _rss_bytes,
                               default_pool_batches, device_description, prepare)
from placer.runner.tables import BuildContext, Replica, Shard, TableAssembler, build_shard
from placer.runner.timing import PhaseTimer, StepTimer, summarize, synchronize
from placer.specs.workload import Workload
from placer.topology import Topology

#: how long a rank waits in a collective before giving up (a crashed peer), seconds
COLLECTIVE_TIMEOUT_S = 600


# ---- which rank does what ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankMap:
    """Plan devices -> ranks, and the samples each rank owns."""

    world: int
    gpus: tuple[str, ...]  # the plan's GPUs in topology order
    rank_of_device: dict[str, int]
    slices: tuple[tuple[int, int], ...]

    def rank_of(self, device: str) -> int:
        return self.rank_of_device[device]

    def devices_of(self, rank: int) -> list[str]:
        return [d for d, r in self.rank_of_device.items() if r == rank]

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
        if p.sharding != "data_parallel":
            continue
        ranks = {rmap.rank_of(s.device) for s in p.shards}
        if len(ranks) != rmap.world:
            missing = sorted(set(range(rmap.world)) - ranks)
            raise SpecError(f"data_parallel table {p.table!r} has no replica on rank(s) {missing} of {rmap.world} "
                            "(plan GPU i runs on rank i mod N); a distributed run needs a replica on every rank "
                            "(the planner always replicates on every GPU)", field="placements")


def rank_subplan(plan: Plan, rmap: RankMap, rank: int) -> Plan:
    """The shards one rank builds (one replica per data_parallel table), as a plan, for the memory estimate."""
    placements = []
    for p in plan.placements:
        mine = [s for s in p.shards if rmap.rank_of(s.device) == rank]
        if p.sharding == "data_parallel":
            mine = mine[:1]
        if mine:
            placements.append(Placement.model_construct(table=p.table, sharding=p.sharding,
                                                        precision=p.precision, shards=mine))
    return plan.model_copy(update={"placements": placements})


def node_needs(plan: Plan, wl: Workload, rmap: RankMap, ranks: list[int], device_type: str, pool: int
               ) -> dict[int, MemoryNeeds]:
    """Per rank: what it will allocate (its shards, the dense model, its batch pool)."""
    out = {}
    for r in ranks:
        sub = rank_subplan(plan, rmap, r)
        out[r] = estimate_needs(sub, wl, device_type, pool) if sub.placements else \
            _dense_only_needs(wl, device_type, pool)
    return out


def _dense_only_needs(wl: Workload, device_type: str, pool: int) -> MemoryNeeds:
    from placer.cost import DenseModelCost
    from placer.runner.batches import batch_bytes_estimate

    need = MemoryNeeds()
    need.add("device", "dense model", DenseModelCost.of(wl).hbm_bytes(wl.batch_size, wl.optimizer.name))
    need.add("device", "batch pool", batch_bytes_estimate(wl) * pool)
    return need


def check_node_memory(needs: dict[int, MemoryNeeds], device: torch.device, *, only_rank: int | None = None,
                      config: RunConfig) -> dict:
    """Host RAM: the ranks of this node together (on a CPU run their device parts too); GPU memory: each
    rank's own (``only_rank``: check just that rank's device). Raises InfeasibleError."""
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
                                              host_available=float("inf"), device_free=config.device_free_bytes)
        report["host"] = check_memory(MemoryNeeds(host=dict(total.host)), torch.device("cpu"),
                                      host_available=config.host_available_bytes)
    else:
        report["host"] = check_memory(total, device, host_available=config.host_available_bytes)
    return report


# ---- the environment ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DistEnv:
    rank: int
    world: int
    local_rank: int
    local_world: int

    @classmethod
    def from_environ(cls, environ=os.environ) -> "DistEnv":
        try:
            world = int(environ["WORLD_SIZE"])
            rank = int(environ.get("RANK", "0"))
            local_rank = int(environ.get("LOCAL_RANK", str(rank)))
            local_world = int(environ.get("LOCAL_WORLD_SIZE", str(world)))
        except (KeyError, ValueError) as exc:
            raise SpecError(f"torch.distributed environment incomplete or malformed ({exc}); launch with "
                            "torchrun or placer run --nproc N") from None
        if not (0 <= rank < world and 0 <= local_rank < local_world):
            raise SpecError(f"RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local_rank}, "
                            f"LOCAL_WORLD_SIZE={local_world}: inconsistent")
        return cls(rank, world, local_rank, local_world)

    @property
    def node_ranks(self) -> list[int]:
        first = self.rank - self.local_rank
        return list(range(first, first + self.local_world))


def worker_device(name: str | None, env: DistEnv) -> torch.device:
    """cpu, or cuda:LOCAL_RANK (NCCL). ``--device cuda:N`` is accepted only with one process."""
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise SpecError(f"--device {name!r}: {exc}") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise SpecError(f"--device {name}: only cuda and cpu are supported")
    if not torch.cuda.is_available():
        raise SpecError(f"--device {name}: CUDA is not available here (torch {torch.__version__}); use --device cpu")
    if dev.index is not None:
        if env.world > 1:
            raise SpecError(f"--device {name}: with several processes each rank runs on cuda:LOCAL_RANK; "
                            "pass --device cuda (restrict GPUs with CUDA_VISIBLE_DEVICES)")
        return dev
    if env.local_rank >= torch.cuda.device_count():
        raise SpecError(f"{env.local_world} processes on this node but only {torch.cuda.device_count()} visible "
                        "CUDA device(s)")
    return torch.device("cuda", env.local_rank)


def default_threads(device: torch.device, local_world: int) -> int:
    """Torch CPU threads per rank: 1 on a CPU run (ranks share the cores; OpenMP spin-waits make
    oversubscribed runs 10-100x slower), the node's cores split between ranks on a GPU run."""
    if device.type == "cpu":
        return 1
    return max(1, (os.cpu_count() or 1) // max(local_world, 1))


# ---- one rank's part of the plan ------------------------------------------------------------------------------

@dataclass
class RankBatch:
    dense: torch.Tensor  # (n, num_dense) this rank's samples
    labels: torch.Tensor  # (n,)
    shards: dict[tuple[str, int], ShardInput]  # local shards: lookups of the whole global batch
    replicas: dict[str, ShardInput]  # data-parallel replica per table: lookups of this rank's samples


def _shard_input(ids: np.ndarray, bags: np.ndarray, offsets: np.ndarray, nb: int, device: torch.device
                 ) -> ShardInput:
    ic, bc, oc = (torch.from_numpy(np.ascontiguousarray(a)).to(INDEX_DTYPE) for a in (ids, bags, offsets))
    same = device.type == "cpu"
    return ShardInput(ids=ic if same else ic.to(device), offsets=oc if same else oc.to(device),
                      offsets32=oc.to(device=device, dtype=torch.int32), bags=bc if same else bc.to(device),
                      ids_cpu=ic, offsets_cpu=oc, bags_cpu=bc, num_bags=nb)


class DistPhaseTimer(PhaseTimer):
    """PhaseTimer whose boundaries also wait for every rank (a barrier, not charged to any phase)."""

    def __init__(self, device: torch.device, group, recorder: ExchangeRecorder | None = None):
        super().__init__(device)
        self.group = group
        self.recorder = recorder

    def begin(self) -> None:
        synchronize(self.device)
        dist.barrier(group=self.group)
        self.by_step.append(defaultdict(float))
        self._t = time.perf_counter()

    def mark(self, phase: str) -> None:
        synchronize(self.device)
        now = time.perf_counter()
        spent = now - self._t - (self.recorder.take_excluded() if self.recorder else 0.0)
        self.totals[phase] += spent
        if self.by_step:
            self.by_step[-1][phase] += spent
        dist.barrier(group=self.group)
        self._t = time.perf_counter()


def _sum_hook(state, bucket):
    """DDP communication hook: all-reduce SUM (DDP's default divides by the world size)."""
    fut = dist.all_reduce(bucket.buffer(), group=state, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


class DistTrainer(TrainerLoop):
    """One rank's part of a plan: its shards, one replica per data-parallel table, the DDP dense model, the
    exchange layout and a pool of its batches. Same math as the one-process ``Trainer`` (module docstring)."""

    def __init__(self, plan: Plan, workload: Workload, device: torch.device, rmap: RankMap, rank: int, *,
                 seed: int = 0, host_read: str = "auto", pool_batches: int = 4, cpu_group=None,
                 overlap_host: bool | None = None):
        from concurrent.futures import ThreadPoolExecutor

        from torch.nn.parallel import DistributedDataParallel as DDP

        self.plan, self.wl, self.device, self.rmap, self.rank = plan, workload, device, rmap, rank
        self.world = rmap.world
        self.B = workload.batch_size
        self.s0, self.s1 = rmap.slices[rank]
        self.n = self.s1 - self.s0
        self.cpu_group = cpu_group
        self.host = HostMemory(device, host_read)
        self.optimizer = SparseRowOptimizer(workload.optimizer.name, workload.optimizer.lr)
        gen = BatchGenerator(workload, plan, seed)
        ctx = BuildContext(workload=workload, device=device, host=self.host, optimizer=self.optimizer,
                           seed=seed, perms=gen.perms)
        tables = {t.name: t for t in workload.tables}
        self.local: dict[tuple[str, int], Shard] = {}
        self.replicas: dict[str, Replica] = {}
        keys: list[ExchangeKey] = []
        for p in plan.placements:
            F_ = workload.outputs_per_sample(p.table)
            if p.sharding == "data_parallel":
                mine = [i for i, s in enumerate(p.shards) if rmap.rank_of(s.device) == rank]
                self.replicas[p.table] = build_shard(p, mine[0], ctx)
                continue
            for i, s in enumerate(p.shards):
                owner = rmap.rank_of(s.device)
                keys.append(ExchangeKey(p.table, i, owner, F_, s.num_cols))
                if owner == rank:
                    self.local[(p.table, i)] = build_shard(p, i, ctx)
        self.layout = AllToAllLayout(keys, list(rmap.slices), rank, self.B, device)
        self.recorder = ExchangeRecorder(device)
        self.assemblers = {p.table: TableAssembler(p, tables[p.table], workload.outputs_per_sample(p.table),
                                                   self.n)
                           for p in plan.placements if p.sharding != "data_parallel"}
        pos: dict[str, int] = {}
        self.feature_slots = []
        for f in workload.resolved_features:
            self.feature_slots.append((f.table, pos.get(f.table, 0)))
            pos[f.table] = pos.get(f.table, 0) + 1
        # the dense model: the same init as the one-process Trainer (global torch seed, then DenseDLRM)
        torch.manual_seed(seed)
        self.model = DenseDLRM(workload).to(device)
        # the model's buffers are constants (interaction indices): no broadcast before every forward
        no_buffer_sync = {"forward_sync_buffers": False} \
            if "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters else {"broadcast_buffers": False}
        self.ddp = DDP(self.model, device_ids=[device.index] if device.type == "cuda" else None, **no_buffer_sync)
        self.ddp.register_comm_hook(None, _sum_hook)
        self.dense_opt = make_dense_optimizer(self.model, workload.optimizer.name, workload.optimizer.lr)
        self.autocast, self.dense_dtype = _dense_autocast(device, workload.dense.dtype)
        self.pool = [self._make_batch(gen) for _ in range(max(1, pool_batches))]
        gen.release_permutations()
        synchronize(device)
        self.losses: list[torch.Tensor] = []
        has_host = any(sh.on_host for sh in self.local.values())
        overlap = (device.type == "cuda") if overlap_host is None else overlap_host
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="placer-host") \
            if (overlap and has_host) else None

    # ---- batches --------------------------------------------------------------------------------------------

    def _make_batch(self, gen: BatchGenerator) -> RankBatch:
        """The next global batch of the generator (every rank draws the same), cut to this rank's needs."""
        arrays = gen.make_numpy()
        B, s0, s1, n = self.B, self.s0, self.s1, self.n
        shards: dict[tuple[str, int], ShardInput] = {}
        replicas: dict[str, ShardInput] = {}
        for p in self.plan.placements:
            ids, bags = arrays["tables"][p.table]
            if p.sharding == "data_parallel":
                sample, feature = bags % B, bags // B
                mask = (sample >= s0) & (sample < s1)
                nb = self.wl.outputs_per_sample(p.table) * n
                lb = feature[mask] * n + (sample[mask] - s0)
                replicas[p.table] = _shard_input(ids[mask], lb, _offsets_from_bags(lb, nb), nb, self.device)
                continue
            mine = [i for i in range(len(p.shards)) if (p.table, i) in self.local]
            if not mine:
                continue
            pieces = gen.shard_arrays(p, ids, bags)
            cache: dict[int, ShardInput] = {}
            for i in mine:
                lid, lb, off, nb = pieces[i]
                if id(lid) not in cache:
                    cache[id(lid)] = _shard_input(lid, lb, off, nb, self.device)
                shards[(p.table, i)] = cache[id(lid)]
        return RankBatch(dense=torch.from_numpy(arrays["dense"][s0:s1].copy()).to(self.device),
                         labels=torch.from_numpy(arrays["labels"][s0:s1].copy()).to(self.device),
                         shards=shards, replicas=replicas)

    # ---- one step -------------------------------------------------------------------------------------------

    def _split_work(self, fn) -> None:
        """``fn(key, shard)`` for every local shard; CPU-lookup (host) shards on the worker thread on GPU runs."""
        items = list(self.local.items())
        host_jobs = [(k, sh) for k, sh in items if sh.on_host] if self._worker is not None else []
        future = self._worker.submit(lambda: [fn(k, sh) for k, sh in host_jobs]) if host_jobs else None
        for k, sh in items:
            if future is None or not sh.on_host:
                fn(k, sh)
        if future is not None:
            future.result()

    def step(self, batch: RankBatch, timer: PhaseTimer | None = None) -> torch.Tensor:
        """One training step; returns this rank's loss term (sum over its samples / global B, not synced)."""
        mark = timer.mark if timer else (lambda _phase: None)
        instrumented = timer is not None
        if timer:
            timer.begin()
        self.optimizer.new_step()
        raw: dict[tuple[str, int], torch.Tensor] = {}

        def fwd(k, sh):
            raw[k] = sh.forward(batch.shards[k])

        self._split_work(fwd)
        rep_raw = {t: r.forward(batch.replicas[t]) for t, r in self.replicas.items()}
        mark("embedding_forward")
        # forward exchange: leaves (the shards' outputs), host outputs to the device, the all-to-all
        leaves = {k: o.detach().requires_grad_(True) for k, o in raw.items()}
        rep_leaves = {t: o.detach().requires_grad_(True) for t, o in rep_raw.items()}
        sendable = [leaves[(k.table, k.index)] for k in self.layout.local]
        sendable = [x.to(self.device, non_blocking=True) if x.device != self.device else x for x in sendable]
        per_table: dict[str, torch.Tensor] = {}
        if not self.layout.empty:
            received = exchange(self.layout, sendable, self.recorder)
            pieces: dict[str, list] = defaultdict(list)
            for k, r in zip(self.layout.recv_order, received):
                pieces[k.table].append((k.index, r))
            for t, items in pieces.items():
                outs = [r.reshape(-1, r.shape[-1]) for _, r in sorted(items, key=lambda x: x[0])]
                per_table[t] = self.assemblers[t].combine(outs)
        for t, leaf in rep_leaves.items():
            per_table[t] = leaf.view(self.wl.outputs_per_sample(t), self.n, -1)
        embeddings = [per_table[t][i] for t, i in self.feature_slots]
        mark("forward_exchange")
        # dense: DDP over this rank's samples; the embeddings are cut off the graph here so that the dense
        # backward and the backward exchange are timed apart
        emb_in = [e.detach().requires_grad_(True) for e in embeddings]
        sync_ctx = self.ddp.no_sync() if instrumented else contextlib.nullcontext()
        with sync_ctx:
            with self.autocast:
                logits = self.ddp(batch.dense, emb_in)
            loss = F.binary_cross_entropy_with_logits(logits.float(), batch.labels, reduction="sum") / self.B
            self.dense_opt.zero_grad(set_to_none=True)
            loss.backward()
        mark("dense")
        # backward exchange: through the assembly and the reverse all-to-all, to the shards' outputs
        grads = [e.grad if e.grad is not None else torch.zeros_like(e) for e in emb_in]
        torch.autograd.backward(embeddings, grads)
        mark("backward_exchange")

        def bwd(k, sh):
            g = leaves[k].grad
            sh.backward(batch.shards[k], g if g is not None else torch.zeros_like(leaves[k]))

        self._split_work(bwd)
        for t, r in self.replicas.items():
            g = rep_leaves[t].grad
            r.backward(batch.replicas[t], g if g is not None else torch.zeros_like(rep_leaves[t]))
        mark("embedding_backward")
        bufs = [r.grad for r in self.replicas.values()]
        if instrumented:
            bufs += [p.grad for p in self.model.parameters() if p.grad is not None]
        if bufs and self.world > 1:
            _allreduce_sum(bufs)
        if bufs or instrumented:
            mark("gradient_allreduce")
        for r in self.replicas.values():
            r.apply_update()
        mark("embedding_backward")
        self.dense_opt.step()
        mark("dense")
        return loss.detach()

    def global_losses(self) -> list[float]:
        """Every step's loss over the global batch (the ranks' terms summed): a collective, all ranks call."""
        if not self.losses:
            return []
        x = torch.stack(self.losses).float()
        if self.world > 1:
            dist.all_reduce(x)
        return [float(v) for v in x.cpu()]

    def table_weights(self, table: str) -> dict[int, torch.Tensor]:
        """This rank's shards of ``table`` as {shard index: fp32 weights} (replica: {-1: whole table})."""
        if table in self.replicas:
            return {-1: self.replicas[table].logical_weights()}
        return {i: sh.logical_weights() for (t, i), sh in self.local.items() if t == table}

    def table_parts(self) -> list:
        return list(self.local.values()) + list(self.replicas.values())


def _allreduce_sum(tensors: list[torch.Tensor]) -> None:
    """One coalesced all-reduce (sum) of several tensors, in place."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    flat = _flatten_dense_tensors(tensors)
    dist.all_reduce(flat)
    for t, s in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
        t.copy_(s)


# ---- the worker: one rank ---------------------------------------------------------------------------------

def config_from_args(args) -> RunConfig:
    if getattr(args, "threads", None) is not None and args.threads < 1:
        raise SpecError("--threads must be >= 1")
    return RunConfig(device=args.device, steps=args.steps, warmup=args.warmup, scale=args.scale, seed=args.seed,
                     host_read=args.host_read, phase_steps=args.phase_steps, pool_batches=args.pool,
                     threads=args.threads)


def prepare_distributed(hw_path: str, wl_path: str, plan_path: str, config: RunConfig, world: int):
    """Load and check everything a distributed run needs (the same in the launcher and in every rank)."""
    from placer.plan import load_plan
    from placer.specs import load_hardware, load_workload

    if config.steps < 1 or config.warmup < 0:
        raise SpecError("--steps must be >= 1 and --warmup >= 0")
    hw, wl0, plan0 = load_hardware(hw_path), load_workload(wl_path), load_plan(plan_path)
    topo, wl, plan, predicted = prepare(hw, wl0, plan0, scale=config.scale, plan_file=plan_path)
    rmap = rank_map(topo, world, wl.batch_size)
    check_distributable(plan, rmap)
    pool = config.pool_batches or default_pool_batches(wl, plan, config.steps + config.warmup)
    return topo, wl, plan, predicted, rmap, pool


def run_worker(hw_path: str, wl_path: str, plan_path: str, config: RunConfig, env: DistEnv) -> dict | None:
    """One rank of a distributed run; returns the result on rank 0 (None elsewhere)."""
    device = worker_device(config.device, env)
    torch.set_num_threads(config.threads or default_threads(device, env.local_world))
    topo, wl, plan, predicted, rmap, pool = prepare_distributed(hw_path, wl_path, plan_path, config, env.world)
    mem_report = None
    if config.check_memory:
        ranks = env.node_ranks if env.local_rank == 0 else [env.rank]
        needs = node_needs(plan, wl, rmap, [r for r in ranks if r < env.world], device.type, pool)
        if device.type == "cuda" or env.local_rank == 0:
            mem_report = check_node_memory(needs, device, only_rank=env.rank, config=config)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    init_kw = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, rank=env.rank, world_size=env.world,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S), **init_kw)
    trainer, finished = None, False
    try:
        cpu_group = dist.new_group(backend="gloo") if backend != "gloo" else None
        rss_start = _rss_bytes()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        t_build = time.perf_counter()
        trainer = DistTrainer(plan, wl, device, rmap, env.rank, seed=config.seed, host_read=config.host_read,
                              pool_batches=pool, cpu_group=cpu_group)
        build_s = time.perf_counter() - t_build
        trainer.train(config.warmup)
        synchronize(device)
        dist.barrier(group=cpu_group)
        timer = StepTimer(device)
        trainer.train(config.steps, timer, start=config.warmup)
        times = timer.times_s()
        phase_steps = config.phase_steps if config.phase_steps is not None else min(config.steps, 20)
        phases = DistPhaseTimer(device, cpu_group, trainer.recorder)
        trainer.recorder.active = True
        trainer.recorder.barrier_group = cpu_group
        trainer.recorder.use_barrier = True
        for i in range(phase_steps):
            batch = trainer.pool[(config.warmup + config.steps + i) % len(trainer.pool)]
            trainer.losses.append(trainer.step(batch, phases))
            phases.steps += 1
        trainer.recorder.active = False
        synchronize(device)
        losses = trainer.global_losses()
        record = {
            "rank": env.rank, "device": str(device), "device_name": device_description(device),
            "plan_devices": rmap.devices_of(env.rank), "samples": trainer.n, "times": times,
            "phases": [dict(s) for s in phases.by_step], "a2a": trainer.recorder.times,
            "bytes_out": trainer.layout.bytes_out, "bytes_in": trainer.layout.bytes_in,
            "shards": len(trainer.local), "replicas": len(trainer.replicas), **trainer.memory_bytes(),
            "peak_host_bytes": _peak_rss_bytes(), "host_rss_at_start_bytes": rss_start,
            "peak_device_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
            "build_s": build_s, "host_read_mechanism": trainer.host.mechanism,
            "host_read_detail": trainer.host.detail, "torch_threads": torch.get_num_threads(),
            "mem_report": mem_report,
        }
        records: list = [None] * env.world
        dist.all_gather_object(records, record, group=cpu_group)
        result = None
        if env.rank == 0:
            result = _result(records, topo, wl, plan, predicted, config, rmap, backend, losses, pool, trainer)
        dist.barrier(group=cpu_group)
        finished = True
        return result
    finally:
        if trainer is not None:
            trainer.close()
        if not finished:  # a finished rank leaves the group to the process's exit (worker_main)
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def _median_of_max(per_rank: list[list[float]]) -> float:
    """Per index the max over ranks, then the median over indices (0 when there is none)."""
    n = min((len(x) for x in per_rank), default=0)
    if n == 0:
        return 0.0
    return statistics.median(max(x[i] for x in per_rank) for i in range(n))


def _result(records, topo, wl, plan, predicted, config, rmap, backend, losses, pool, trainer) -> dict:
    per_rank_times = [r["times"] for r in records]
    n = min(len(t) for t in per_rank_times)
    step_times = [max(t[i] for t in per_rank_times) for i in range(n)]
    stats = summarize(step_times)
    step = stats["median"]
    measured_phases = {}
    for ph in PHASES:
        measured_phases[ph] = _median_of_max([[s.get(ph, 0.0) for s in r["phases"]] for r in records])
    pred_step = predicted["step_time_s"]
    first = losses[: max(1, min(5, len(losses) // 4))]
    last = losses[-max(1, min(5, len(losses) // 4)):]
    peak_dev = [r["peak_device_bytes"] for r in records if r["peak_device_bytes"] is not None]
    a2a = {name: _median_of_max([r["a2a"].get(name, []) for r in records])
           for name in ("forward_all_to_all", "backward_all_to_all")}
    r0 = records[0]
    return {
        "hardware": topo.spec.name,
        "workload": wl.name,
        "plan_method": plan.method,
        "device": r0["device"],
        "device_name": r0["device_name"],
        "torch_version": torch.__version__,
        "steps": config.steps,
        "warmup": config.warmup,
        "phase_steps": min(len(r["phases"]) for r in records),
        "scale": config.scale,
        "seed": config.seed,
        "batch_size": wl.batch_size,
        "host_read_mechanism": r0["host_read_mechanism"],
        "host_read_detail": r0["host_read_detail"],
        "devices_folded": rmap.gpus_per_rank,
        "dense_dtype": trainer.dense_dtype,
        "pool_batches": pool,
        "torch_threads": r0["torch_threads"],
        "nproc": rmap.world,
        "backend": backend,
        "measured": {
            "step_time_s": step,
            "throughput_samples_per_s": wl.batch_size / step if step > 0 else float("inf"),
            "step_time_stats_s": stats,
            "phases_s": measured_phases,
            "phases_sum_s": sum(measured_phases.values()),
            "peak_device_bytes": max(peak_dev) if peak_dev else None,
            "peak_host_bytes": sum(r["peak_host_bytes"] for r in records),
            "host_rss_at_start_bytes": sum(r["host_rss_at_start_bytes"] for r in records),
            "device_table_bytes": sum(r["device_tables"] for r in records),
            "host_table_bytes": sum(r["host_tables"] for r in records),
            "build_s": max(r["build_s"] for r in records),
            "loss_first": float(np.mean(first)) if losses else None,
            "loss_last": float(np.mean(last)) if losses else None,
            "loss_history": losses,
            "exchange": {
                "forward_all_to_all_s": a2a["forward_all_to_all"],
                "backward_all_to_all_s": a2a["backward_all_to_all"],
                "bytes_out_per_rank_max": max(r["bytes_out"] for r in records),
                "bytes_in_per_rank_max": max(r["bytes_in"] for r in records),
                "how": "the all_to_all_single call alone, after a barrier, device synchronized before and after, "
                       "max over ranks, median over the instrumented steps; bytes to/from other ranks per step "
                       "(fp32)",
            },
        },
        "predicted": {k: v for k, v in predicted.items() if k != "devices"},
        "relative_error": step / pred_step - 1 if pred_step > 0 else None,
        "phase_ratio": {p: (measured_phases[p] / predicted["phases_s"][p]) if predicted["phases_s"].get(p) else None
                        for p in PHASES},
        "memory_check": r0["mem_report"],
        "memory_estimate_bytes": _estimate_totals(plan, wl, rmap, r0["device"], pool),
        "ranks": [{
            "rank": r["rank"], "device": r["device"], "plan_devices": r["plan_devices"], "samples": r["samples"],
            "shards": r["shards"], "replicas": r["replicas"],
            "step_time_median_s": statistics.median(r["times"]) if r["times"] else None,
            "phases_s": {ph: statistics.median([s.get(ph, 0.0) for s in r["phases"]]) if r["phases"] else 0.0
                         for ph in PHASES},
            "exchange_bytes_out": r["bytes_out"], "exchange_bytes_in": r["bytes_in"],
            "device_table_bytes": r["device_tables"], "host_table_bytes": r["host_tables"],
            "peak_host_bytes": r["peak_host_bytes"], "peak_device_bytes": r["peak_device_bytes"],
        } for r in records],
    }


def _estimate_totals(plan, wl, rmap, device: str, pool: int) -> dict:
    """The memory check's estimate: the largest rank's device bytes, and host bytes summed over the ranks."""
    needs = node_needs(plan, wl, rmap, list(range(rmap.world)), torch.device(device).type, pool)
    return {"device": max(n.device_total for n in needs.values()),
            "host": sum(n.host_total for n in needs.values()),
            "per_rank_device": [needs[r].device_total for r in range(rmap.world)]}


def worker_main(args) -> NoReturn:
    """Entry of one rank (``python -m placer.runner`` with WORLD_SIZE set): run, write/print the result on
    rank 0, and end the process (exit code 0); errors propagate to the caller."""
    env = DistEnv.from_environ()
    if getattr(args, "nproc", None) not in (None, env.world):
        raise SpecError(f"--nproc {args.nproc} but WORLD_SIZE={env.world} (under torchrun, leave --nproc out)")
    config = config_from_args(args)
    result = run_worker(args.hardware, args.workload, args.plan, config, env)
    if env.rank == 0 and result is not None:
        emit(result, args)
    # Every rank has passed the last barrier: leave without tearing gloo down. Its teardown (destroying the
    # group, or the interpreter's finalization with gloo's threads alive) aborted a finished rank about once in
    # 20 runs of the 4-process test ("terminate called without an active exception"), failing a run whose
    # result was already written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def emit(result: dict, args) -> None:
    """Rank 0 (or the launcher): write the result to --result-file, else print it (JSON or table)."""
    from placer.commands.run import _jsonable, print_result

    path = getattr(args, "result_file", None)
    if path:
        Path(path).write_text(json.dumps(result, default=_jsonable), encoding="utf-8")
        return
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1, default=_jsonable) + "\n")
        sys.stdout.flush()
    else:
        from rich.console import Console

        print_result(result, Console(highlight=False, soft_wrap=True))


# ---- the launcher: N local processes --------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_argv(args, result_file: str) -> list[str]:
    """The ``python -m placer.runner`` command line of one child, from the parsed ``placer run`` arguments."""
    argv = [sys.executable, "-m", "placer.runner", str(args.hardware), str(args.workload), str(args.plan),
            "--steps", str(args.steps), "--warmup", str(args.warmup), "--scale", repr(float(args.scale)),
            "--seed", str(args.seed), "--host-read", args.host_read, "--result-file", result_file]
    for flag, value in (("--device", args.device), ("--phase-steps", args.phase_steps),
                        ("--threads", args.threads), ("--pool", args.pool)):
        if value is not None:
            argv += [flag, str(value)]
    return argv


def launch(args, nproc: int) -> tuple[int, dict | None]:
    """Validate in this process, then run ``nproc`` ranks as child processes on this machine (torchrun's
    environment, MASTER_ADDR 127.0.0.1 and a free port). Returns (exit code, rank 0's result)."""
    config = config_from_args(args)
    if nproc < 1:
        raise SpecError(f"--nproc {nproc}: must be >= 1")
    env0 = DistEnv(0, nproc, 0, nproc)
    device = worker_device(config.device, env0)
    if device.type == "cuda" and torch.cuda.device_count() < nproc:
        raise SpecError(f"--nproc {nproc} on --device cuda: only {torch.cuda.device_count()} visible CUDA "
                        "device(s); one process per GPU (use --device cpu, or fewer processes)")
    _, wl, plan, _, rmap, pool = prepare_distributed(args.hardware, args.workload, args.plan, config, nproc)
    if config.check_memory:
        needs = node_needs(plan, wl, rmap, list(range(nproc)), device.type, pool)
        if device.type != "cuda":
            check_node_memory(needs, device, config=config)
    threads = config.threads or default_threads(device, nproc)
    root = str(Path(__file__).resolve().parent.parent.parent)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="placer-run-") as tmp:
        result_file = os.path.join(tmp, "result.json")
        procs = []
        try:
            for r in range(nproc):
                env = dict(os.environ)
                env.update(RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc),
                           GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                           OMP_NUM_THREADS=str(threads),
                           PYTHONPATH=root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""))
                procs.append(subprocess.Popen(child_argv(args, result_file), env=env))
            code = _wait_all(procs)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if code != 0:
            return code, None
        try:
            return 0, json.loads(Path(result_file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PlacerError(f"rank 0 finished without a result ({exc})") from None


def _wait_all(procs: list[subprocess.Popen], grace_s: float = 5.0) -> int:
    """Wait for every child; when one fails, stop the others (they would wait in a collective) and return the
    first failure's exit code (negative signals become 1)."""
    failed = None
    while True:
        running = False
        for p in procs:
            rc = p.poll()
            if rc is None:
                running = True
            elif rc != 0 and failed is None:
                failed = rc
        if failed is not None or not running:
            break
        time.sleep(0.05)
    if failed is None:
        return 0
    deadline = time.time() + grace_s
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.time()))
    return failed if failed > 0 else 1


def run_distributed(hw_path, wl_path, plan_path, config: RunConfig, nproc: int) -> dict:
    """API for tests and scripts: ``placer run --nproc`` on files; returns rank 0's result (raises on failure)."""
    import argparse

    args = argparse.Namespace(hardware=str(hw_path), workload=str(wl_path), plan=str(plan_path),
                              device=config.device, steps=config.steps, warmup=config.warmup, scale=config.scale,
                              seed=config.seed, host_read=config.host_read, phase_steps=config.phase_steps,
                              pool=config.pool_batches, threads=config.threads, json=True)
    code, result = launch(args, nproc)
    if code != 0 or result is None:
        exc = {2: SpecError, 3: InfeasibleError}.get(code, PlacerError)
        raise exc(f"distributed run failed with exit code {code} (see the ranks' messages above)")
    return result
