"""Run a plan for real: build its step program (trainer.py), train on synthetic batches, time it, and put the
prediction for the same hardware spec beside it.

The timed steps run back to back with no synchronization (CUDA events around each step on a GPU,
perf_counter on the CPU); the step time is the median after warm-up. Two instrumented passes follow: one
synchronizes the device at each phase boundary (the median time per phase), one synchronizes around every op
(the mean time per op kind and stream, beside the program's price of the same ops: ``measured.ops``).

``graph`` (``placer run --graph``): ``auto`` replays the timed steps as CUDA graphs (runner/graph_step.py) where the
device is CUDA and every group of the plan has a graph-safe step, else runs today's eager step and says why;
``on`` requires the graph-safe step (refused, exit 2, for a plan with replicated or compressed tables) and runs
it, captured on CUDA and as plain calls elsewhere (the dry run of the path up to the capture call); ``off`` the
eager step. The warm-up steps precede the capture; the instrumented passes run eagerly after the timed steps.
"""
from __future__ import annotations

import math
import os
import platform
import resource
import time
from dataclasses import dataclass

import numpy as np
import torch

from placer.cost import PHASES, CostModel
from placer.errors import SpecError
from placer.forms.tiers import refuse_tiers
from placer.node_local import refuse_node_local
from placer.plan import Plan
from placer.plan_price import priced_plan
from placer.program.build import plan_ops
from placer.program.floor import floor_step_s
from placer.program.graph_price import predict_graph
from placer.runner.batches import batch_bytes_estimate
from placer.runner.graph_groups import graph_record
from placer.runner.graph_step import WARMUP_STEPS, GraphStep, plan_why_not_capturable
from placer.runner.hostmem import keep_freed_memory
from placer.runner.memory import check_memory, estimate_needs
from placer.runner.opcompare import compare
from placer.runner.scale import scale_plan
from placer.runner.timing import OpTimer, PhaseTimer, StepTimer, step_measurements, summarize, synchronize
from placer.runner.trainer import Trainer
from placer.simulate import predict
from placer.specs.workload import Workload
from placer.topology import Topology

POOL_MAX_BATCHES = 8
#: why the runner refuses a plan with cold rows in a memory tier (forms/tiers.refuse_tiers)
RUNNER_HAS_NO_TIERS = ("placer's runner keeps cold rows in host memory only: price and plan it (simulate, solve, "
                       "explain), or give the tier's rows to host memory to run it")
POOL_MAX_BYTES = 4 * 2**30


@dataclass
class RunConfig:
    device: str | None = None  # "cuda", "cuda:1", "cpu"; None = cuda when available
    steps: int = 50
    warmup: int = 10
    scale: float = 1.0
    seed: int = 0
    host_read: str = "auto"  # auto | uva | cpu_gather_copy
    phase_steps: int | None = None  # steps of each instrumented pass (default min(steps, 20))
    pool_batches: int | None = None
    check_memory: bool = True
    host_available_bytes: float | None = None  # override MemAvailable (tests)
    device_free_bytes: float | None = None  # override torch.cuda.mem_get_info (tests)
    threads: int | None = None  # torch CPU threads for the run (None: torch's default)
    samples: object = None  # real samples to train on (placer.data.samples.SampleSet; None: synthetic ids)
    graph: str = "auto"  # auto | on | off: the step replayed as CUDA graphs (runner/graph_step.py; module doc)


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


def default_pool_batches(workload: Workload, plan: Plan, total_steps: int) -> int:
    per = max(batch_bytes_estimate(workload, plan), 1.0)
    return int(max(1, min(POOL_MAX_BATCHES, total_steps, POOL_MAX_BYTES // per)))


def prepare(hardware, workload: Workload, plan: Plan, *, scale: float = 1.0, plan_file: str | None = None
            ) -> tuple[Topology, Workload, Plan, dict]:
    """Check the plan, scale it when asked, and predict it: (topology, workload, plan, predicted) as run. The
    plan as given must fit the hardware spec (the same check as simulate and check: plan_price.priced_plan),
    scaled or not; the scaled plan is checked and priced again. Refusals name ``plan_file``."""
    refuse_tiers(plan, "placer run", RUNNER_HAS_NO_TIERS, file=plan_file)
    topo = Topology(hardware, workload.dense.dtype)
    predicted = priced_plan(plan, topo, workload, file=plan_file)
    if scale != 1.0:
        if not (math.isfinite(scale) and scale >= 1):
            raise SpecError(f"{scale:g}: the rows divisor must be a finite number >= 1", field="--scale")
        workload = workload.with_scaled_rows(scale)
        try:
            plan = scale_plan(plan, workload)
        except SpecError as exc:
            raise SpecError(exc.detail, file=plan_file, field=exc.field or "--scale") from None
        predicted = priced_plan(plan, topo, workload, file=plan_file, check_hashes=False)
    return topo, workload, plan, predicted


def hardware_note(topo: Topology, device: torch.device) -> str | None:
    """A plain sentence when the hardware spec describes other hardware than the run's device (the prediction
    is then for that machine, not this one), else None."""
    unified = all(topo.is_unified(g) for g in topo.gpus)
    if device.type == "cpu" and not unified:
        return (f"the hardware spec {topo.spec.name!r} describes GPUs ({topo.gpu_spec(topo.gpus[0]).model}); this "
                "run is on a CPU, so the prediction is for that machine, not this one: calibrate this machine "
                "(placer calibrate --device cpu) and plan for it to compare")
    if device.type == "cuda" and unified:
        return (f"the hardware spec {topo.spec.name!r} describes CPU processes; this run is on "
                f"{torch.cuda.get_device_name(device)}: calibrate it (placer calibrate --device cuda) to compare")
    if device.type == "cuda":
        model = topo.gpu_spec(topo.gpus[0]).model.lower()
        name = torch.cuda.get_device_name(device).lower()
        if not set(model.split()) & set(name.split()):
            return f"the hardware spec's GPU is {model!r}, this run's is {name!r}: the prediction is for the spec's"
    return None


def run_plan(hardware, workload: Workload, plan: Plan, config: RunConfig = RunConfig(), *,
             plan_file: str | None = None, keep_trainer: bool = False) -> dict:
    """Build and train ``plan`` on this machine; measured numbers next to the prediction (see module doc)."""
    if config.steps < 1 or config.warmup < 0:
        raise SpecError("--steps must be >= 1 and --warmup >= 0")
    device = resolve_device(config.device)
    if workload.trainer != "placer":  # placer's runner runs the plan: its step is priced as that runner's
        workload = workload.model_copy(update={"trainer": "placer"})
    refuse_node_local(plan, "one process", "keeps one copy of every table: run it with --nproc N, one process per "
                      "plan GPU", file=plan_file)
    topo, wl, plan, predicted = prepare(hardware, workload, plan, scale=config.scale, plan_file=plan_file)
    pool = config.pool_batches or default_pool_batches(wl, plan, config.steps + config.warmup)
    needs = estimate_needs(plan, wl, topo, device.type, pool)
    mem_report = None
    if config.check_memory:
        mem_report = check_memory(needs, device, host_available=config.host_available_bytes,
                                  device_free=config.device_free_bytes)
    keep_freed_memory()
    rss_start = _rss_bytes()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    threads_before = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    graph_on, graph_why = graph_choice(config.graph, device, plan, topo, wl, plan_file)
    t_build = time.perf_counter()
    trainer = graph = None
    try:
        trainer = Trainer(plan, wl, device, topo, seed=config.seed, host_read=config.host_read, pool_batches=pool,
                          samples=config.samples, graph_safe=graph_on)
        build_s = time.perf_counter() - t_build
        if trainer.builder.cpu_reads_host:  # the prediction prices the host-read mechanism that runs
            predicted = predict(CostModel(topo, wl, cpu_reads_host=True), plan)
        timer = StepTimer(device)
        if graph_on:
            graph = GraphStep(trainer, capacity=config.warmup + config.steps + WARMUP_STEPS)
            graph.capture(warmup=max(config.warmup, WARMUP_STEPS) if device.type == "cuda" else config.warmup)
            synchronize(device)
            graph.train(config.steps, timer)
            start = graph.position
            if graph.captured:  # the step runs as graphs: priced as device work and launches (program/graph_price.py)
                predicted = predict_graph(topo, wl, plan, len(graph.graphs),
                                          cpu_reads_host=trainer.builder.cpu_reads_host)
        else:
            trainer.train(config.warmup)
            synchronize(device)
            trainer.train(config.steps, timer, start=config.warmup)
            start = config.warmup + config.steps
        times = timer.times_s()
        phase_steps = config.phase_steps if config.phase_steps is not None else min(config.steps, 20)
        phases, ops = PhaseTimer(device), OpTimer(device)
        for i in range(phase_steps):
            trainer.losses.append(trainer.step(trainer.pool[(start + i) % len(trainer.pool)], phases=phases))
            phases.steps += 1
        for i in range(phase_steps):
            trainer.losses.append(trainer.step(trainer.pool[(start + phase_steps + i) % len(trainer.pool)], ops=ops))
            ops.steps += 1
        synchronize(device)
        losses = (graph.losses() if graph is not None else []) + trainer.loss_history()
        result = _result(trainer, topo, wl, plan, predicted, config, device, times, phases, losses, build_s,
                         pool, needs, mem_report, rss_start)
        result["measured"]["ops"] = compare(ops.per_step(), plan_ops(trainer.builder, plan.placements),
                                            trainer.builder.expand)
        result["graph"] = graph_record(config.graph, trainer.groups, device, graph, graph_why)
        result["graph"]["prediction_prices"] = ("the step's device work and one launch per graph (graph_price.py)"
                                                if graph is not None and graph.captured else
                                                "every op's host issue (the eager step)")
        result["hardware_note"] = hardware_note(topo, device)
        result["floor"] = floor_record(topo, wl, plan, result["measured"]["step_time_s"], device)
    finally:
        torch.set_num_threads(threads_before)
        if trainer is not None and not keep_trainer:
            trainer.close()
    if keep_trainer:
        result["_trainer"] = trainer
    return result


def graph_choice(mode: str, device: torch.device, plan: Plan, topo: Topology, wl: Workload,
                 plan_file: str | None) -> tuple[bool, str | None]:
    """(whether the run takes the graph step, why not where it does not) for ``--graph`` ``mode`` (module doc)."""
    if mode == "off":
        return False, "--graph off"
    why = plan_why_not_capturable(plan, topo, wl)
    if mode == "on":
        if why is not None:
            raise SpecError(f"--graph on: {why}; run it with --graph auto or off", file=plan_file, field="--graph")
        return True, None
    if device.type != "cuda":
        return False, "CUDA graphs are CUDA's: on this device --graph auto runs the eager step"
    return why is None, why


def floor_record(topo: Topology, wl: Workload, plan: Plan, measured_s: float, device: torch.device) -> dict:
    """The plan's physics floor on the hardware spec (program/floor.py) and the measured step over it; the ratio
    only where the run was on a GPU (a CPU run is not the spec's GPUs)."""
    floor_s = floor_step_s(topo, wl, plan)
    return {"step_time_s": floor_s,
            "runner_over_floor": measured_s / floor_s if device.type == "cuda" and floor_s > 0 else None,
            "what": "the step program at the spec's datasheet rates with no fixed cost per GPU kernel, plus one "
                    "launch of the step (a production trainer replaying a CUDA graph); it counts no device time "
                    "per kernel, so it is a loose floor for small models"}


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
        "prediction_prices_host_reads_as": ("CPU lookups and copies (as cpu_gather_copy runs them)"
                                            if trainer.builder.cpu_reads_host else "zero-copy reads by the GPU (uva)"),
        "host_read_detail": trainer.host.detail,
        "devices_folded": trainer.gpu_devices_folded,
        "dense_dtype": trainer.dense_dtype,
        "pool_batches": pool,
        "torch_threads": torch.get_num_threads(),
        "measured": {
            **step_measurements(wl.batch_size, step, stats, measured_phases),
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
