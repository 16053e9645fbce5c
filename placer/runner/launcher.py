"""The launcher of a distributed run on this machine: ``placer run HW WL PLAN --nproc N``.

It checks the run in this process (bad input and a CPU run's memory fail here, before any child starts), then
starts N local processes (``python -m placer.runner``, one rank each: runner/worker.py) with the environment
torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT=a free
port, OMP_NUM_THREADS), waits for them (one failing stops the others) and reads rank 0's result from a
temporary file.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from placer.errors import InfeasibleError, PlacerError, SpecError
from placer.runner.ranks import check_node_memory, node_needs
from placer.runner.run import RunConfig
from placer.runner.worker import DistEnv, config_from_args, default_threads, prepare_distributed, worker_device


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
    topo, wl, plan, _, rmap, pool = prepare_distributed(args.hardware, args.workload, args.plan, config, nproc)
    if config.check_memory and device.type != "cuda":
        needs = node_needs(plan, wl, topo, rmap, list(range(nproc)), device.type, pool)
        check_node_memory(needs, device, host_available=config.host_available_bytes)
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
