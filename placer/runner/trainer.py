"""One process executes the step program of a plan: its fused groups, the tables they assemble, the dense model.

Every GPU of the plan maps onto the one local device (``devices_folded`` says how many), every host onto this
machine's RAM; each plan device's groups are built as one rank of a distributed run would build them. One
training step, phase by phase (the cost model's PHASES; the runner synchronizes where the phases meet):

1. embedding_forward:  every group's ``lookup`` (CPU-looked-up groups on a worker thread on a GPU run, so they
                       overlap the GPU's, as their own stream in the program); a split shard adds its hot and
                       cold parts (``combine``)
2. forward_exchange:   CPU groups' outputs copied to the device (``copy_h2d``, one per group); each table
                       assembled from its shards (row-wise partial sums added, column-wise pieces concatenated);
                       one leaf per feature for the dense model (in one process there is no all-to-all)
3. dense:              the dense model's forward, loss, backward and optimizer step (program/dense.py's ops)
4. backward_exchange:  every group's ``pack_grad`` of its members' pooled gradients (then ``copy_d2h`` to the
                       CPU for CPU groups)
5. embedding_backward: every group's ``sort``, ``segment_reduce`` and ``update`` (replica groups:
                       ``scatter`` into their dense gradient, and after the all-reduce ``update_dense``)
6. gradient_allreduce: replica groups' dense gradients summed (a local sum in one process)

``OpTimer`` (timing.py) times every op of an instrumented step, synchronized, keyed by (kind, stream): the
same keys as the program's priced ops, so a miss points at one op kind's calibration.
"""
from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import torch

from placer.forms.shardings import sharding_of
from placer.plan import Plan
from placer.program.build import ProgramBuilder
from placer.program.dense_model import DenseDLRM, make_dense_optimizer
from placer.runner.batches import Batch, BatchGenerator
from placer.runner.compressed_groups import make_group
from placer.runner.graph_groups import make_graph_group
from placer.runner.groups import BuildContext, FusedGroup, Slot, build_groups
from placer.runner.hostmem import HostMemory
from placer.runner.optim import SparseRowOptimizer
from placer.runner.static_step import StaticRowOptimizer
from placer.runner.timing import OpTimer, PhaseTimer, StepTimer, synchronize
from placer.specs.workload import Workload
from placer.topology import Topology

def dense_autocast(device: torch.device, dtype: str, cache: bool = True):
    """Context for the dense part's precision: tf32 matmuls, or autocast to bf16/fp16; and the dtype run.
    ``cache``: autocast's cache of cast weights (off for a step captured as a CUDA graph, as capture needs)."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    if dtype in ("bf16", "fp16"):
        want = torch.bfloat16 if dtype == "bf16" else torch.float16
        try:
            return torch.autocast(device_type=device.type, dtype=want, cache_enabled=cache), dtype
        except (RuntimeError, ValueError):
            return contextlib.nullcontext(), "fp32"
    return contextlib.nullcontext(), dtype if device.type == "cuda" else "fp32"


class TableParts:
    """How a table's output is assembled from its groups' members: per shard its parts (one, or a split's hot
    and cold), then the shards combined by the placement's kind."""

    def __init__(self, placement, parts: dict[int, list[tuple[FusedGroup, Slot]]], dim: int):
        """``parts``: per shard index, its (group, slot) pairs here (a rank of a distributed run builds some
        shards only: the others get no parts)."""
        self.p = placement
        self.shards = [parts.get(i, []) for i in range(len(placement.shards))]
        self.dim = dim
        cols = {s.cols for s in placement.shards}
        if sharding_of(placement).whole_copies:
            self.mode = "samples"
        elif len(placement.shards) == 1:
            self.mode = "single"
        elif len(cols) == 1:
            self.mode = "sum"
        elif all(s.rows == placement.shards[0].rows for s in placement.shards):
            self.mode = "cat"
            self.order = sorted(range(len(placement.shards)), key=lambda i: placement.shards[i].cols[0])
        else:
            self.mode = "general"

    def combine(self, outs: list[torch.Tensor]) -> torch.Tensor:
        """The table's (features, samples, dim) output from its shards' (features, samples, cols) outputs, in
        shard order: replicas' sample slices concatenated, row-wise partial sums added (in shard order),
        column-wise pieces concatenated, a general tiling padded to full width and added."""
        if self.mode == "single":
            return outs[0]
        if self.mode == "samples":
            return torch.cat(outs, dim=1)
        if self.mode == "sum":
            acc = outs[0]
            for o in outs[1:]:
                acc = acc + o
            return acc
        if self.mode == "cat":
            return torch.cat([outs[i] for i in self.order], dim=2)
        acc = None
        for s, o in zip(self.p.shards, outs):
            padded = torch.nn.functional.pad(o, (s.cols[0], self.dim - s.cols[1]))
            acc = padded if acc is None else acc + padded
        return acc


def feature_slots(workload: Workload) -> list[tuple[str, int]]:
    """Per pooled feature (workload order): its table and its position among the table's features."""
    pos: dict[str, int] = {}
    out = []
    for f in workload.resolved_features:
        out.append((f.table, pos.get(f.table, 0)))
        pos[f.table] = pos.get(f.table, 0) + 1
    return out


def each_group(groups: dict, fn, worker: ThreadPoolExecutor | None) -> None:
    """``fn(key, group)`` for every group, in key order; CPU groups on ``worker`` (a thread) when given, so
    that they overlap the device's groups."""
    items = list(groups.items())
    cpu = [(k, g) for k, g in items if g.on_cpu] if worker is not None else []
    future = worker.submit(lambda: [fn(k, g) for k, g in cpu]) if cpu else None
    for k, g in items:
        if future is None or not g.on_cpu:
            fn(k, g)
    if future is not None:
        future.result()


def split_sums(tables, outs: dict, streams: dict, device: torch.device, timer: OpTimer, copied: bool
               ) -> dict[tuple[str, int], torch.Tensor]:
    """Split shards' outputs among ``tables`` (TableParts): hot part + cold part, (features, B, cols), on the
    shard's stream (``copied``: the splits with a part looked up by the CPU of a GPU run, after its copy)."""
    sums = {}
    for tp in tables:
        for i, parts in enumerate(tp.shards):
            if len(parts) == 2 and copied == any(g.on_cpu and device.type == "cuda" for g, _ in parts):
                views = [g.member_output(outs[g.key], s) for g, s in parts]
                sums[(tp.p.table, i)] = timer.run("combine", streams[parts[0][0].key], lambda v=views: v[0] + v[1])
    return sums


def backward_group(g: FusedGroup, inp, timer: OpTimer, stream: str) -> None:
    """A group's backward after its pack_grad: sort, segment_reduce, then update (replicas: scatter into
    their dense gradient, updated after the all-reduce)."""
    runs = timer.run("sort", stream, lambda: g.sort(inp))
    summed = timer.run("segment_reduce", stream, lambda: g.segment_reduce(runs))
    if g.key.location == "replica":
        timer.run("scatter", stream, lambda: g.scatter(runs, summed))
    else:
        timer.run("update", stream, lambda: g.update(runs, summed))


class GroupOwner:
    """What a trainer of fused groups shares (``groups``, ``host``, ``_worker``, ``pool``, ``step``,
    ``losses``): the training loop, their memory and shutdown."""

    def train(self, steps: int, timer: StepTimer | None = None, start: int = 0) -> None:
        """``steps`` training steps over the pool (from batch ``start``), each step's loss kept."""
        for i in range(steps):
            batch = self.pool[(start + i) % len(self.pool)]
            if timer:
                timer.start()
            loss = self.step(batch)
            if timer:
                timer.stop()
            self.losses.append(loss)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes of table rows and optimizer state on the device and in host memory."""
        dev = host = 0
        for g in self.groups.values():
            m = g.memory_bytes()
            dev += m["device"]
            host += m["host"]
        return {"device_tables": dev, "host_tables": host}

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        self.host.close()


class Trainer(GroupOwner):
    """The plan's step program built on one local device: groups, table assembly, dense model, batches."""

    def __init__(self, plan: Plan, workload: Workload, device: torch.device, topology: Topology, *, seed: int = 0,
                 host_read: str = "auto", pool_batches: int = 4, overlap_host: bool | None = None, samples=None,
                 graph_safe: bool = False):
        """``graph_safe``: the groups graph_groups.graph_safe covers run the static-shape backward (no host sync;
        runner/graph_groups.py), the others as before."""
        self.plan, self.wl, self.device, self.topo = plan, workload, device, topology
        self.B = workload.batch_size
        self.host = HostMemory(device, host_read)
        # where the GPU cannot read host memory, its host rows are looked up by the CPU: built and priced so
        self.builder = ProgramBuilder(topology, workload, cpu_reads_host=self.host.mechanism == "cpu_gather_copy")
        self.optimizer = SparseRowOptimizer(workload.optimizer.name, workload.optimizer.lr)
        torch.manual_seed(seed)
        self.gen = BatchGenerator(workload, plan, seed, samples)  # samples: real ids (run --ids) or None
        self.static_optimizer = (StaticRowOptimizer(workload.optimizer.name, workload.optimizer.lr, device)
                                 if graph_safe else None)
        ctx = BuildContext(workload=workload, device=device, host=self.host, optimizer=self.optimizer, seed=seed,
                           perms=self.gen.perms, batch=self.B, static_optimizer=self.static_optimizer)
        self.groups = build_groups(plan, ctx, self.builder, make=make_graph_group if graph_safe else make_group)
        self.streams = {key: self.builder.stream(key.device) for key in self.groups}
        parts: dict[str, dict[int, list]] = {p.table: {} for p in plan.placements}
        for g in self.groups.values():
            for s in g.slots:
                parts[s.member.table].setdefault(s.member.shard, []).append((g, s))
        dims = {t.name: t.dim for t in workload.tables}
        self.tables = [TableParts(p, parts[p.table], dims[p.table]) for p in plan.placements]
        self.feature_slots = feature_slots(workload)  # per feature: (table, its position among the table's)
        self.model = DenseDLRM(workload).to(device)
        dense_spec = workload.resolved_dense_optimizer
        self.dense_opt = make_dense_optimizer(self.model, dense_spec.name, dense_spec.lr, foreach=device.type == "cuda",
                                              capturable=graph_safe and device.type == "cuda")
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.autocast, self.dense_dtype = dense_autocast(device, workload.dense.dtype, cache=not graph_safe)
        self.dense_stream = self.builder.stream(topology.gpus[0])
        self.pool: list[Batch] = [self.make_batch() for _ in range(max(1, pool_batches))]
        self.gen.release_permutations()
        synchronize(device)
        self.losses: list[torch.Tensor] = []
        cpu_groups = [g for g in self.groups.values() if g.on_cpu]
        self._cpu_groups = bool(cpu_groups)
        overlap = (device.type == "cuda") if overlap_host is None else overlap_host
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="placer-host") \
            if (overlap and cpu_groups) else None

    def make_batch(self) -> Batch:
        arrays = self.gen.make_numpy()
        inputs = {key: g.make_input(arrays["tables"]) for key, g in self.groups.items()}
        return Batch(dense=torch.from_numpy(arrays["dense"]).to(self.device),
                     labels=torch.from_numpy(arrays["labels"]).to(self.device), groups=inputs,
                     table_ids={k: v[0] for k, v in arrays["tables"].items()})

    @property
    def gpu_devices_folded(self) -> int:
        return len({s.device for p in self.plan.placements if sharding_of(p).on_gpus for s in p.shards})

    # ---- the step ---------------------------------------------------------------------------------------------

    def _each_group(self, fn, ops: OpTimer | None) -> None:
        """``fn(key, group)`` for every group; CPU groups on the worker thread when overlapping (not while ops
        are timed one by one)."""
        each_group(self.groups, fn, self._worker if ops is None else None)

    def _split_sums(self, outs: dict, ops: OpTimer, copied: bool) -> dict[tuple[str, int], torch.Tensor]:
        """Split shards' outputs: hot part + cold part, on the shard's device (in the forward, as the program
        has it; after the copies where a part was looked up by the CPU of a GPU run)."""
        return split_sums(self.tables, outs, self.streams, self.device, ops, copied)

    def _assemble(self, outs: dict, sums: dict, ops: OpTimer) -> dict[str, torch.Tensor]:
        """Each table's (features, B, dim) output from its shards' outputs."""
        tables = {}
        for tp in self.tables:
            shard_outs = [sums.get((tp.p.table, i)) if len(parts) == 2 else parts[0][0].member_output(
                outs[parts[0][0].key], parts[0][1]) for i, parts in enumerate(tp.shards)]
            tables[tp.p.table] = self._combine(tp, shard_outs, ops)
        return tables

    def _combine(self, tp: TableParts, outs: list[torch.Tensor], ops: OpTimer) -> torch.Tensor:
        if tp.mode == "single":
            return outs[0]
        return ops.run("combine", self.dense_stream, lambda: tp.combine(outs))

    def step(self, batch: Batch, phases: PhaseTimer | None = None, ops: OpTimer | None = None) -> torch.Tensor:
        """One training step; returns the loss (a device tensor, not synchronized). ``phases`` marks the
        phases; ``ops`` times every op (synchronized)."""
        mark = phases.mark if phases else (lambda _phase: None)
        timer = ops or OpTimer.off()
        if phases:
            phases.begin()
        self.new_step()
        outs: dict = {}
        self._each_group(lambda k, g: outs.__setitem__(k, timer.run("lookup", self.streams[k],
                                                                    lambda: g.lookup(batch.groups[k]))), ops)
        return self.finish_step(outs, batch, timer, mark)

    def new_step(self) -> None:
        """Advance the optimizers' step counts (Adam's bias corrections): once per training step."""
        self.optimizer.new_step()
        if self.static_optimizer is not None:
            self.static_optimizer.new_step()

    def finish_step(self, outs: dict, batch: Batch, timer: OpTimer, mark=lambda _phase: None,
                    eager_keys: frozenset = frozenset()) -> torch.Tensor:
        """The step after every group's lookup (``outs``: per group key, its output): the exchanges, the dense
        part, the embedding backward; returns the loss. The groups of ``eager_keys`` (rows looked up by the host
        CPU while the rest of the step replays as a CUDA graph: runner/graph_step.py) get their gradients packed
        and copied, but neither a device synchronisation nor their backward here: their caller runs it."""
        sums = self._split_sums(outs, timer, copied=False)
        mark("embedding_forward")
        for k, g in self.groups.items():  # rows looked up by the CPU: their outputs to the device
            if g.on_cpu and self.device.type == "cuda":
                outs[k] = timer.run("copy_h2d", self.dense_stream,
                                    lambda o=outs[k]: o.to(self.device, non_blocking=True))
        sums.update(self._split_sums(outs, timer, copied=True))
        tables = self._assemble(outs, sums, timer)
        leaves = timer.run("elementwise", self.dense_stream, lambda: self._leaves(tables))
        mark("forward_exchange")

        def dense():
            with self.autocast:
                logits = self.model(batch.dense, leaves)
            loss = self.loss_fn(logits.float(), batch.labels)
            self.dense_opt.zero_grad(set_to_none=True)
            loss.backward()
            self.dense_opt.step()
            return loss
        loss = timer.run("dense", self.dense_stream, dense)
        mark("dense")
        grads = self._feature_grads(leaves)
        for k, g in self.groups.items():
            if g.key.trained:  # a frozen table's rows get no gradient
                timer.run("pack_grad", self.streams[k] if not g.on_cpu else self.dense_stream,
                          lambda g=g: g.pack_grad(self._member_grads(g, grads)))
        if self.device.type == "cuda" and self._cpu_groups and not eager_keys:
            synchronize(self.device)  # the CPU groups' gradients have arrived (no sync when there are none)
        mark("backward_exchange")
        backward = {k: g for k, g in self.groups.items() if k not in eager_keys}
        each_group(backward, lambda k, g: self._backward(k, g, batch, timer), None if timer.active else self._worker)
        mark("embedding_backward")
        replicas = [g for g in self.groups.values() if g.key.location == "replica" and g.key.trained]
        if replicas:
            timer.run("all_reduce", self.dense_stream, lambda: allreduce_local(replicas))
            mark("gradient_allreduce")
            for g in replicas:
                timer.run("update_dense", self.streams[g.key], g.update_dense)
            mark("embedding_backward")
        return loss.detach()

    def _leaves(self, tables: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        return [tables[t][i].detach().requires_grad_(True) for t, i in self.feature_slots]

    def _feature_grads(self, leaves: list[torch.Tensor]) -> dict[str, list[torch.Tensor]]:
        out: dict[str, list[torch.Tensor]] = {}
        for (t, _), leaf in zip(self.feature_slots, leaves):
            out.setdefault(t, []).append(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf))
        return out

    def _member_grads(self, g: FusedGroup, grads: dict[str, list[torch.Tensor]]) -> list[torch.Tensor]:
        """The pooled-gradient pieces of a group's members, in bag order: per member, per feature, its samples'
        rows and its columns of the feature's gradient."""
        pieces = []
        for s in g.slots:
            (s0, s1), (c0, c1) = s.samples, s.member.cols
            whole = s0 == 0 and s1 == self.B and c0 == 0 and c1 == g.key.width and c1 == s.table_dim
            pieces += grads[s.member.table] if whole else [fg[s0:s1, c0:c1] for fg in grads[s.member.table]]
        return pieces

    def _backward(self, k, g: FusedGroup, batch: Batch, timer: OpTimer) -> None:
        if g.key.trained:
            backward_group(g, batch.groups[k], timer, self.streams[k])

    # ---- loop and inspection ----------------------------------------------------------------------------------

    def loss_history(self) -> list[float]:
        return [float(x) for x in torch.stack(self.losses).float().cpu()] if self.losses else []

    def embed(self, batch: Batch) -> list[torch.Tensor]:
        """Pooled embedding of every feature (workload order), (B, dim) each: forward + assembly only."""
        with torch.no_grad():
            timer = OpTimer.off()
            outs = {k: g.lookup(batch.groups[k]) for k, g in self.groups.items()}
            if self.device.type == "cuda":
                outs = {k: o.to(self.device) for k, o in outs.items()}
            sums = self._split_sums(outs, timer, copied=False)
            sums.update(self._split_sums(outs, timer, copied=True))
            tables = self._assemble(outs, sums, timer)
            return [tables[t][i].detach() for t, i in self.feature_slots]

    def table_weights(self, table: str) -> torch.Tensor:
        """The logical (rows, dim) fp32 table assembled from its members (replica 0 for data-parallel)."""
        tp = next(tp for tp in self.tables if tp.p.table == table)
        t = self.wl.tables[self.wl.table_index[table]]
        if tp.mode == "samples":
            g, s = tp.shards[0][0]
            return g.member_rows(s)
        out = torch.empty((t.rows, t.dim), dtype=torch.float32)
        for parts in tp.shards:
            for g, s in parts:
                (a, b), (c0, c1) = s.member.local_ids, s.member.cols
                rows = g.member_rows(s)
                maps = g.slot_map(s)
                if maps is None:
                    out[a:b, c0:c1] = rows
                else:
                    is_hot, slot = maps
                    local = torch.from_numpy((is_hot if s.member.part == "hot" else ~is_hot).nonzero()[0])
                    out[a + local, c0:c1] = rows[torch.from_numpy(slot[local.numpy()])]
        return out



def allreduce_local(replicas: list[FusedGroup]) -> None:
    """Sum replica groups' dense gradients (same tables, same layout on every device) into each of them."""
    by_kind: dict[tuple, list[FusedGroup]] = {}
    for g in replicas:
        by_kind.setdefault((g.key.dtype, g.key.width), []).append(g)
    for same in by_kind.values():
        if len(same) < 2:
            continue
        total = same[0].dense_grad
        for g in same[1:]:
            total.add_(g.dense_grad)
        for g in same[1:]:
            g.dense_grad.copy_(total)
