"""Run a plan for real: build it, train on synthetic batches, time it, and put the prediction beside it.

Single process: every GPU of the plan maps onto the one local device (``devices_folded`` in the result says
how many), every host onto this machine's RAM. Each shard is built by ``tables.build_device_shards`` for its
plan device, which is what one rank of a distributed run would own.

One training step, in the cost model's phases (PHASES in cost.py):
1. embedding_forward:  every shard pools its lookups (GPU shards on the device, host shards on the CPU)
2. forward_exchange:   host shards' pooled outputs copied to the device (H2D); shard outputs assembled per
                       table (row-wise partial sums added, column-wise pieces and data-parallel slices
                       concatenated) - in one process the GPU-to-GPU all-to-all is a no-op
3. dense:              dense forward, BCE loss, backward (autograd), and the dense optimizer step
4. backward_exchange:  pooled-output gradients of host shards copied back to the CPU (D2H)
5. embedding_backward: every shard's sparse row update (expand, reduce duplicates, read-modify-write rows);
                       data-parallel replicas scatter into their dense gradient here, and apply the update
                       after the all-reduce (that time is charged here too)
6. gradient_allreduce: data-parallel replicas' gradients summed (the all-reduce, local in one process)

The timed steps run these back to back with no synchronization (CUDA events around each step on a GPU,
perf_counter on the CPU); the step time is the median after warm-up. A separate instrumented pass repeats the
same steps with a device synchronization at each phase boundary and reports the mean time per phase.
"""
from __future__ import annotations

import contextlib
import os
import platform
import resource
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from placer.cost import PHASES, CostModel
from placer.errors import SpecError
from placer.plan import Plan, check_plan
from placer.runner.batches import Batch, BatchGenerator, batch_bytes_estimate
from placer.runner.hostmem import HostMemory
from placer.runner.memory import check_memory, estimate_needs
from placer.program.dense_model import DenseDLRM, make_dense_optimizer
from placer.runner.optim import SparseRowOptimizer
from placer.runner.scale import scale_plan
from placer.runner.tables import (BuildContext, Replica, Shard, TableAssembler, allreduce_replicas,
                                  build_device_shards)
from placer.runner.timing import PhaseTimer, StepTimer, summarize, synchronize
from placer.simulate import predict
from placer.specs.workload import Workload
from placer.topology import Topology

POOL_MAX_BATCHES = 8
POOL_MAX_BYTES = 4 * 2**30


@dataclass
class RunConfig:
    device: str | None = None  # "cuda", "cuda:1", "cpu"; None = cuda when available
    steps: int = 50
    warmup: int = 10
    scale: float = 1.0
    seed: int = 0
    host_read: str = "auto"  # auto | uva | cpu_gather_copy
    phase_steps: int | None = None  # instrumented steps (default min(steps, 10))
    pool_batches: int | None = None
    check_memory: bool = True
    host_available_bytes: float | None = None  # override MemAvailable (tests)
    device_free_bytes: float | None = None  # override torch.cuda.mem_get_info (tests)
    threads: int | None = None  # torch CPU threads for the run (None: torch's default)


def resolve_device(name: str | None) -> torch.device:
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError) as exc:
        raise SpecError(f"--device {name!r}: {exc}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SpecError(f"--device {name}: CUDA is not available here (torch {torch.__version__}); "
                            "use --device cpu")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise SpecError(f"--device {name}: only cuda and cpu are supported")
    return dev


def device_description(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def _dense_autocast(device: torch.device, dtype: str):
    """Context for the dense part's precision: tf32 matmuls, or autocast to bf16/fp16."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    if dtype in ("bf16", "fp16"):
        want = torch.bfloat16 if dtype == "bf16" else torch.float16
        try:
            return torch.autocast(device_type=device.type, dtype=want), dtype
        except (RuntimeError, ValueError):
            return contextlib.nullcontext(), "fp32"
    return contextlib.nullcontext(), dtype if device.type == "cuda" else "fp32"


class TrainerLoop:
    """What every trainer shares: the step loop, table memory, shutdown. Subclasses provide ``step``,
    ``table_parts``, ``pool``, ``losses``, ``host`` and ``_worker``."""

    def train(self, steps: int, timer: StepTimer | None = None, start: int = 0) -> None:
        for i in range(steps):
            batch = self.pool[(start + i) % len(self.pool)]
            if timer:
                timer.start()
            loss = self.step(batch)
            if timer:
                timer.stop()
            self.losses.append(loss)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes of table weights and state on the device and in host memory."""
        dev = host = 0
        for sh in self.table_parts():
            m = sh.memory_bytes()
            dev += m["device"]
            host += m["host"]
        return {"device_tables": dev, "host_tables": host}

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        self.host.close()


class Trainer(TrainerLoop):
    """The plan built on one local device: shards, assemblers, dense model, optimizers, batch pool."""

    def __init__(self, plan: Plan, workload: Workload, device: torch.device, *, seed: int = 0,
                 host_read: str = "auto", pool_batches: int = 4, perms: dict | None = None,
                 overlap_host: bool | None = None):
        self.plan = plan
        self.wl = workload
        self.device = device
        self.B = workload.batch_size
        self.host = HostMemory(device, host_read)
        self.optimizer = SparseRowOptimizer(workload.optimizer.name, workload.optimizer.lr)
        torch.manual_seed(seed)
        self.gen = BatchGenerator(workload, plan, seed)
        ctx = BuildContext(workload=workload, device=device, host=self.host, optimizer=self.optimizer,
                           seed=seed, perms=perms if perms is not None else self.gen.perms)
        devices = []
        for p in plan.placements:
            for s in p.shards:
                if s.device not in devices:
                    devices.append(s.device)
        built: dict[tuple[str, int], Shard] = {}
        for d in devices:
            for sh in build_device_shards(plan, ctx, d):
                built[(sh.table, sh.index)] = sh
        self.shards: dict[str, list[Shard]] = {p.table: [built[(p.table, i)] for i in range(len(p.shards))]
                                               for p in plan.placements}
        tables = {t.name: t for t in workload.tables}
        self.assemblers = {p.table: TableAssembler(p, tables[p.table], workload.outputs_per_sample(p.table),
                                                   self.B) for p in plan.placements}
        self.replicas = {p.table: [s for s in self.shards[p.table] if isinstance(s, Replica)]
                         for p in plan.placements if p.sharding == "data_parallel"}
        # feature order: for each feature, (table, position among the table's features)
        pos: dict[str, int] = {}
        self.feature_slots = []
        for f in workload.resolved_features:
            self.feature_slots.append((f.table, pos.get(f.table, 0)))
            pos[f.table] = pos.get(f.table, 0) + 1
        self.model = DenseDLRM(workload).to(device)
        self.dense_opt = make_dense_optimizer(self.model, workload.optimizer.name, workload.optimizer.lr)
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.autocast, self.dense_dtype = _dense_autocast(device, workload.dense.dtype)
        self.pool: list[Batch] = [self.gen.make(device) for _ in range(max(1, pool_batches))]
        self.gen.release_permutations()
        synchronize(device)
        self.losses: list[torch.Tensor] = []
        # CPU-lookup tables run on a worker thread on GPU runs (on a CPU run both sides share the same cores)
        has_host = any(sh.on_host for shards in self.shards.values() for sh in shards)
        overlap = (device.type == "cuda") if overlap_host is None else overlap_host
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="placer-host") \
            if (overlap and has_host) else None

    @property
    def gpu_devices_folded(self) -> int:
        return len({s.device for p in self.plan.placements if p.sharding != "host" for s in p.shards})

    # ---- one step, phase by phase -------------------------------------------------------------------------

    def _split_work(self, fn) -> None:
        """Call ``fn(table, shard)`` for every shard: device shards on this thread, host (CPU-lookup) shards on
        the worker thread when overlapping, so the CPU's gathers and updates run while the GPU works - the
        overlap cost.py assumes inside a phase (its time is the busiest resource's, not the sum)."""
        pairs = [(t, sh) for t, shards in self.shards.items() for sh in shards]
        host_jobs = [(t, sh) for t, sh in pairs if sh.on_host] if self._worker is not None else []
        future = self._worker.submit(lambda: [fn(t, sh) for t, sh in host_jobs]) if host_jobs else None
        for t, sh in pairs:
            if future is None or not sh.on_host:
                fn(t, sh)
        if future is not None:
            future.result()

    def _forward_embeddings(self, batch: Batch) -> dict[str, list[torch.Tensor]]:
        out: dict[str, list] = {t: [None] * len(shards) for t, shards in self.shards.items()}

        def fwd(t, sh):
            out[t][sh.index] = sh.forward(batch.shards[(t, sh.index)])

        self._split_work(fwd)
        return out

    def _exchange(self, raw: dict[str, list[torch.Tensor]]):
        leaves: dict[str, list[torch.Tensor]] = {}
        for t, outs in raw.items():
            ls = []
            for sh, o in zip(self.shards[t], outs):
                if sh.on_host and self.device.type != "cpu":
                    o = o.to(self.device, non_blocking=True)
                ls.append(o.detach().requires_grad_(True))
            leaves[t] = ls
        per_table = {t: self.assemblers[t].combine(ls) for t, ls in leaves.items()}
        embeddings = [per_table[t][i] for t, i in self.feature_slots]
        return leaves, embeddings

    def embed(self, batch: Batch) -> list[torch.Tensor]:
        """Pooled embedding of every feature (workload order), (B, dim) each: forward + exchange only."""
        with torch.no_grad():
            _, embeddings = self._exchange(self._forward_embeddings(batch))
        return [e.detach() for e in embeddings]

    def step(self, batch: Batch, timer: PhaseTimer | None = None) -> torch.Tensor:
        """One training step; returns the loss (a device tensor, not synchronized)."""
        mark = timer.mark if timer else (lambda _phase: None)
        if timer:
            timer.begin()
        self.optimizer.new_step()
        raw = self._forward_embeddings(batch)
        mark("embedding_forward")
        leaves, embeddings = self._exchange(raw)
        mark("forward_exchange")
        with self.autocast:
            logits = self.model(batch.dense, embeddings)
        loss = self.loss_fn(logits.float(), batch.labels)
        self.dense_opt.zero_grad(set_to_none=True)
        loss.backward()
        mark("dense")
        grads = {}
        for t, ls in leaves.items():
            gs = []
            for sh, leaf in zip(self.shards[t], ls):
                g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
                if sh.on_host and self.device.type != "cpu":
                    g = g.to("cpu")
                gs.append(g)
            grads[t] = gs
        mark("backward_exchange")
        self._split_work(lambda t, sh: sh.backward(batch.shards[(t, sh.index)], grads[t][sh.index]))
        mark("embedding_backward")
        if self.replicas:
            for reps in self.replicas.values():
                allreduce_replicas(reps)
            mark("gradient_allreduce")
            for reps in self.replicas.values():
                for r in reps:
                    r.apply_update()
            mark("embedding_backward")
        self.dense_opt.step()
        mark("dense")
        return loss.detach()

    def loss_history(self) -> list[float]:
        return [float(x) for x in torch.stack(self.losses).float().cpu()] if self.losses else []

    def table_weights(self, table: str) -> torch.Tensor:
        """The logical (rows, dim) fp32 table assembled from its shards (replica 0 for data-parallel)."""
        p = self.plan.placement_of(table)
        t = self.wl.tables[self.wl.table_index[table]]
        if p.sharding == "data_parallel":
            return self.shards[table][0].logical_weights()
        out = torch.empty((t.rows, t.dim), dtype=torch.float32)
        for sh in self.shards[table]:
            out[sh.rows[0]:sh.rows[1], sh.cols[0]:sh.cols[1]] = sh.logical_weights()
        return out

    def table_parts(self) -> list:
        return [sh for shards in self.shards.values() for sh in shards]


def default_pool_batches(workload: Workload, plan: Plan, total_steps: int) -> int:
    per = max(batch_bytes_estimate(workload, plan), 1.0)
    return int(max(1, min(POOL_MAX_BATCHES, total_steps, POOL_MAX_BYTES // per)))


def prepare(hardware, workload: Workload, plan: Plan, *, scale: float = 1.0, plan_file: str | None = None
            ) -> tuple[Topology, Workload, Plan, dict]:
    """Check the plan, scale it when asked, and predict it: (topology, workload, plan, predicted) as run."""
    topo = Topology(hardware, workload.dense.dtype)
    check_plan(plan, topo, workload, file=plan_file)
    if scale != 1.0:
        if scale <= 0:
            raise SpecError(f"--scale {scale:g}: must be positive")
        workload = workload.with_scaled_rows(scale)
        plan = scale_plan(plan, workload)
        check_plan(plan, topo, workload, file=plan_file, check_hashes=False)
    predicted = predict(CostModel(topo, workload), plan)
    return topo, workload, plan, predicted


def run_plan(hardware, workload: Workload, plan: Plan, config: RunConfig = RunConfig(), *,
             plan_file: str | None = None, keep_trainer: bool = False) -> dict:
    """Build and train ``plan`` on this machine; measured numbers next to the prediction (see module doc)."""
    if config.steps < 1 or config.warmup < 0:
        raise SpecError("--steps must be >= 1 and --warmup >= 0")
    device = resolve_device(config.device)
    topo, wl, plan, predicted = prepare(hardware, workload, plan, scale=config.scale, plan_file=plan_file)
    pool = config.pool_batches or default_pool_batches(wl, plan, config.steps + config.warmup)
    needs = estimate_needs(plan, wl, device.type, pool)
    mem_report = None
    if config.check_memory:
        mem_report = check_memory(needs, device, host_available=config.host_available_bytes,
                                  device_free=config.device_free_bytes)
    rss_start = _rss_bytes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    threads_before = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    t_build = time.perf_counter()
    trainer = None
    try:
        trainer = Trainer(plan, wl, device, seed=config.seed, host_read=config.host_read, pool_batches=pool)
        build_s = time.perf_counter() - t_build
        trainer.train(config.warmup)
        synchronize(device)
        timer = StepTimer(device)
        trainer.train(config.steps, timer, start=config.warmup)
        times = timer.times_s()
        phase_steps = config.phase_steps if config.phase_steps is not None else min(config.steps, 20)
        phases = PhaseTimer(device)
        for i in range(phase_steps):
            batch = trainer.pool[(config.warmup + config.steps + i) % len(trainer.pool)]
            trainer.losses.append(trainer.step(batch, phases))
            phases.steps += 1
        synchronize(device)
        losses = trainer.loss_history()
        result = _result(trainer, topo, wl, plan, predicted, config, device, times, phases, losses, build_s,
                         pool, needs, mem_report, rss_start)
    finally:
        torch.set_num_threads(threads_before)
        if trainer is not None and not keep_trainer:
            trainer.close()
    if keep_trainer:
        result["_trainer"] = trainer
    return result


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def _result(trainer: Trainer, topo, wl, plan, predicted, config, device, times, phases, losses, build_s, pool,
            needs, mem_report, rss_start) -> dict:
    stats = summarize(times)
    step = stats["median"]
    per_phase = phases.per_step()
    measured_phases = {p: per_phase.get(p, 0.0) for p in PHASES}
    pred_step = predicted["step_time_s"]
    tables = trainer.memory_bytes()
    first = losses[: max(1, min(5, len(losses) // 4))]
    last = losses[-max(1, min(5, len(losses) // 4)):]
    return {
        "hardware": topo.spec.name,
        "workload": wl.name,
        "plan_method": plan.method,
        "device": str(device),
        "device_name": device_description(device),
        "torch_version": torch.__version__,
        "steps": config.steps,
        "warmup": config.warmup,
        "phase_steps": phases.steps,
        "scale": config.scale,
        "seed": config.seed,
        "batch_size": wl.batch_size,
        "host_read_mechanism": trainer.host.mechanism,
        "host_read_detail": trainer.host.detail,
        "devices_folded": trainer.gpu_devices_folded,
        "dense_dtype": trainer.dense_dtype,
        "pool_batches": pool,
        "torch_threads": torch.get_num_threads(),
        "measured": {
            "step_time_s": step,
            "throughput_samples_per_s": wl.batch_size / step if step > 0 else float("inf"),
            "step_time_stats_s": stats,
            "phases_s": measured_phases,
            "phases_sum_s": sum(measured_phases.values()),
            "peak_device_bytes": (torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None),
            "peak_host_bytes": _peak_rss_bytes(),
            "host_rss_at_start_bytes": rss_start,
            "device_table_bytes": tables["device_tables"],
            "host_table_bytes": tables["host_tables"],
            "build_s": build_s,
            "loss_first": float(np.mean(first)) if losses else None,
            "loss_last": float(np.mean(last)) if losses else None,
        },
        "predicted": {k: v for k, v in predicted.items() if k != "devices"},
        "relative_error": step / pred_step - 1 if pred_step > 0 else None,
        "phase_ratio": {p: (measured_phases[p] / predicted["phases_s"][p]) if predicted["phases_s"].get(p) else None
                        for p in PHASES},
        "memory_check": mem_report,
        "memory_estimate_bytes": {"device": needs.device_total, "host": needs.host_total},
    }
