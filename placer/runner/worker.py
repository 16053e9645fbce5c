"""One rank of a distributed run, from its environment to its part of the result.

``python -m placer.runner HW WL PLAN ...`` with WORLD_SIZE set (torchrun's environment, or the launcher's:
runner/launcher.py) calls ``worker_main``: the rank checks everything (the same on every rank), checks its
node's memory (runner/ranks.py), joins the process group (NCCL on cuda, rank on cuda:LOCAL_RANK; gloo on
cpu), builds its RankTrainer (runner/rank_trainer.py) and runs:

- warm-up, then the timed steps back to back (the dense gradients all-reduced in one call after the embedding
  backward, as the program prices it; a CPU rank with a core of its own spins while it waits:
  runner/waiting.py); a step's time is the rank's own wall time (CUDA events on a GPU), seconds;
- the phase pass (``--phase-steps`` steps): the device synchronized and all ranks at a barrier at every phase
  boundary (the barrier charged to no phase), and the all-to-all's collective timed alone after a barrier of
  its own (``measured.exchange``);
- the op pass (as many steps): every op synchronized and timed under the program's (kind, stream), a barrier
  before each collective (``measured.ops``).

Every rank's record is gathered on rank 0, which merges them (runner/rank_results.py) and writes the result.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist

from placer.errors import SpecError
from placer.runner import waiting
from placer.runner.rank_results import distributed_result
from placer.runner.rank_timing import RankOpTimer, RankPhaseTimer
from placer.runner.node_ranks import check_node_local_ranks
from placer.runner.rank_trainer import RankTrainer
from placer.runner.ranks import check_distributable, check_node_memory, node_needs, rank_map
from placer.runner.run import (RunConfig, _peak_rss_bytes, _rss_bytes, default_pool_batches, device_description,
                               hardware_note, prepare)
from placer.runner.timing import StepTimer, synchronize

#: how long a rank waits in a collective before giving up (a crashed peer), seconds
COLLECTIVE_TIMEOUT_S = 600


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE)."""

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


def config_from_args(args) -> RunConfig:
    if getattr(args, "threads", None) is not None and args.threads < 1:
        raise SpecError("--threads must be >= 1")
    return RunConfig(device=args.device, steps=args.steps, warmup=args.warmup, scale=args.scale, seed=args.seed,
                     host_read=args.host_read, phase_steps=args.phase_steps, pool_batches=args.pool,
                     threads=args.threads)


def prepare_distributed(hw_path: str, wl_path: str, plan_path: str, config: RunConfig, world: int):
    """Load and check everything a distributed run needs (the same in the launcher and in every rank):
    (topology, workload, plan, predicted, rank map, pool batches) as run."""
    from placer.plan import load_plan
    from placer.specs import load_hardware, load_workload

    if config.steps < 1 or config.warmup < 0:
        raise SpecError("--steps must be >= 1 and --warmup >= 0")
    # the command (run_cli) has refused likely unit mistakes already, or the user allowed them: not again here
    hw, wl0, plan0 = load_hardware(hw_path, allow_implausible=True), load_workload(wl_path), load_plan(plan_path)
    topo, wl, plan, predicted = prepare(hw, wl0, plan0, scale=config.scale, plan_file=plan_path)
    rmap = rank_map(topo, world, wl.batch_size)
    check_distributable(plan, rmap)
    check_node_local_ranks(plan, topo, rmap, file=plan_path)
    pool = config.pool_batches or default_pool_batches(wl, plan, config.steps + config.warmup)
    return topo, wl, plan, predicted, rmap, pool


def run_worker(hw_path: str, wl_path: str, plan_path: str, config: RunConfig, env: DistEnv) -> dict | None:
    """One rank of a distributed run; returns the result on rank 0 (None elsewhere)."""
    device = worker_device(config.device, env)
    torch.set_num_threads(config.threads or default_threads(device, env.local_world))
    waiting.configure(waiting.spin_wanted(device.type, env.local_world, torch.get_num_threads()))
    topo, wl, plan, predicted, rmap, pool = prepare_distributed(hw_path, wl_path, plan_path, config, env.world)
    mem_report = None
    if config.check_memory:
        ranks = env.node_ranks if env.local_rank == 0 else [env.rank]
        needs = node_needs(plan, wl, topo, rmap, [r for r in ranks if r < env.world], device.type, pool)
        if device.type == "cuda" or env.local_rank == 0:
            mem_report = check_node_memory(needs, device, only_rank=env.rank,
                                           host_available=config.host_available_bytes,
                                           device_free=config.device_free_bytes)
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
        trainer = RankTrainer(plan, wl, device, topo, rmap, env.rank, seed=config.seed, host_read=config.host_read,
                              pool_batches=pool)
        build_s = time.perf_counter() - t_build
        times, phases, ops = _train_and_time(trainer, config, device, cpu_group)
        losses = trainer.global_losses()
        record = rank_record(trainer, env, device, rmap, times, phases, ops, build_s, rss_start, mem_report)
        records: list = [None] * env.world
        dist.all_gather_object(records, record, group=cpu_group)
        result = None
        if env.rank == 0:
            result = distributed_result(records, topo, wl, plan, predicted, config, rmap, backend, losses, pool,
                                        trainer.dense_dtype, trainer.builder)
            result["hardware_note"] = hardware_note(topo, device)
            result["rank_wait"] = "spin" if waiting.spinning() else "sleep"
        dist.barrier(group=cpu_group)
        finished = True
        return result
    finally:
        if trainer is not None:
            trainer.close()
        if not finished:  # a finished rank leaves the group to the process's exit (worker_main)
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def _train_and_time(trainer: RankTrainer, config: RunConfig, device: torch.device, cpu_group):
    """Warm-up, timed steps, the phase pass and the op pass (module docstring): (step times, phases, ops)."""
    trainer.train(config.warmup)
    synchronize(device)
    waiting.barrier(cpu_group)
    timer = StepTimer(device)
    trainer.train(config.steps, timer, start=config.warmup)
    times = timer.times_s()
    phase_steps = config.phase_steps if config.phase_steps is not None else min(config.steps, 20)
    start = config.warmup + config.steps
    phases = RankPhaseTimer(device, cpu_group, trainer.recorder)
    rec = trainer.recorder
    rec.active, rec.barrier_group, rec.use_barrier = True, cpu_group, True
    for i in range(phase_steps):
        trainer.losses.append(trainer.step(trainer.pool[(start + i) % len(trainer.pool)], phases=phases))
        phases.steps += 1
    rec.active = False
    ops = RankOpTimer(device, cpu_group)
    for i in range(phase_steps):
        trainer.losses.append(trainer.step(trainer.pool[(start + phase_steps + i) % len(trainer.pool)], ops=ops))
        ops.steps += 1
    synchronize(device)
    return times, phases, ops


def rank_record(trainer: RankTrainer, env: DistEnv, device: torch.device, rmap, times, phases, ops, build_s,
                rss_start, mem_report) -> dict:
    """What one rank reports to rank 0 (seconds, bytes; picklable)."""
    return {
        "rank": env.rank, "device": str(device), "device_name": device_description(device),
        "plan_devices": rmap.devices_of(env.rank), "samples": trainer.n, "times": times,
        "phases": [dict(s) for s in phases.by_step], "a2a": trainer.recorder.times,
        "ops": list(ops.per_step().items()),
        "bytes_out": trainer.layout.bytes_out, "bytes_in": trainer.layout.bytes_in,
        "groups": len(trainer.groups), "shards": len(trainer.layout.local), "replicas": trainer.replicas,
        **trainer.memory_bytes(),
        "peak_host_bytes": _peak_rss_bytes(), "host_rss_at_start_bytes": rss_start,
        "peak_device_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "build_s": build_s, "host_read_mechanism": trainer.host.mechanism,
        "host_read_detail": trainer.host.detail, "torch_threads": torch.get_num_threads(),
        "mem_report": mem_report,
    }


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
    from placer.report_run import jsonable, print_result

    path = getattr(args, "result_file", None)
    if path:
        Path(path).write_text(json.dumps(result, default=jsonable), encoding="utf-8")
        return
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1, default=jsonable) + "\n")
        sys.stdout.flush()
    else:
        from rich.console import Console

        print_result(result, Console(highlight=False, soft_wrap=True))
