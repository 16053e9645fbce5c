"""The command line of a run, shared by ``placer run`` (commands/run.py adds its --batch / --gpus what-ifs) and
``python -m placer.runner`` (one rank under torchrun, runner/__main__.py): the arguments, and running a plan from
them. Below both, so that the runner needs nothing of the commands; the runner itself (and torch) is imported
only when a run starts."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from rich.console import Console

from placer import argtypes
from placer.report_run import jsonable, print_result

#: (args, hardware spec, workload, plan) -> (hardware spec, workload): a command's changes to the loaded specs
WhatIf = Callable[..., tuple]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The run flags: the specs and plan, the run's settings, --nproc, --ids, --json (``placer run`` adds its
    what-ifs)."""
    p.add_argument("hardware", metavar="HW", help="hardware spec the prediction is made for (YAML/JSON)")
    p.add_argument("workload", metavar="WL", help="workload spec (YAML/JSON)")
    p.add_argument("plan", metavar="PLAN", help="plan JSON (placer solve, or written by hand)")
    from placer.commands._common import add_allow_implausible

    add_allow_implausible(p)
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    p.add_argument("--steps", type=argtypes.steps, default=50, metavar="N",
                   help=f"timed training steps, 1..{argtypes.MAX_STEPS:,} (default 50)")
    p.add_argument("--warmup", type=argtypes.nonneg_steps, default=10, metavar="N",
                   help="untimed warm-up steps first, >= 0 (default 10)")
    p.add_argument("--phase-steps", type=argtypes.nonneg_steps, default=None, metavar="N",
                   help="steps of the separate, synchronized per-phase pass, >= 0 (default min(steps, 20))")
    p.add_argument("--scale", type=argtypes.scale, default=1.0, metavar="S",
                   help="divide every table's rows by S >= 1; the plan and the prediction are scaled to match "
                        "(the plan must still fit the hardware spec unscaled)")
    p.add_argument("--seed", type=argtypes.seed, default=0, metavar="N",
                   help=f"seed of weights and batches, 0..{argtypes.MAX_SEED} (default 0)")
    p.add_argument("--host-read", default="auto", choices=("auto", "uva", "cpu_gather_copy"),
                   help="how the GPU reads host rows (default auto: uva when it works, else cpu_gather_copy)")
    p.add_argument("--graph", default="auto", choices=("auto", "on", "off"),
                   help="auto (default): on a GPU, replay the timed steps as CUDA graphs (no host in the loop: "
                        "static shapes, no synchronisation; rows the host CPU looks up stay eager beside them) where "
                        "every table's form allows it, else the eager step, and the result says why; on: require "
                        "that step (captured on a GPU, run as plain calls on a CPU); off: the eager step")
    p.add_argument("--threads", type=argtypes.threads, default=None, metavar="N",
                   help=f"torch CPU threads, 1..{argtypes.MAX_THREADS} (default: torch's choice)")
    p.add_argument("--pool", type=argtypes.pool, default=None, metavar="N",
                   help=f"batches generated ahead, 1..{argtypes.MAX_POOL_BATCHES} (default <= 8)")
    p.add_argument("--nproc", type=argtypes.processes, default=None, metavar="N",
                   help="run N processes with torch.distributed (gloo on cpu, NCCL on cuda): plan GPU i on rank "
                        "i mod N, the real all-to-all between them (default: one process, no torch.distributed)")
    p.add_argument("--ids", nargs="+", default=None, metavar="DATA",
                   help="train on real ids: batches of consecutive samples of these files (the formats of placer "
                        "profile) instead of ids drawn from the workload's access models; the first pool x batch "
                        "samples are loaded and cycled; ids are taken modulo the rows under --scale")
    p.add_argument("--ids-format", default=None, choices=("criteo-tsv", "dlrm-torch", "npy"),
                   help="format of the --ids files (default: from the file name; see placer profile --help)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args, what_if: WhatIf | None = None) -> int:
    """Run the plan of ``args`` (add_arguments' flags): in this process, or in --nproc local processes; print
    the result. ``what_if(args, hardware spec, workload, plan) -> (hardware spec, workload)`` changes the specs
    once loaded (placer run's --batch / --gpus). Returns the exit code."""
    from placer.errors import SpecError
    from placer.forms.tiers import refuse_tiers
    from placer.node_local import refuse_node_local
    from placer.runner.run import RUNNER_HAS_NO_TIERS
    from placer.plan import load_plan
    from placer.runner.run import RunConfig, run_plan
    from placer.specs import load_hardware, load_workload

    if args.threads is not None and args.threads < 1:
        raise SpecError("--threads must be >= 1")
    hw = load_hardware(args.hardware, allow_implausible=getattr(args, "allow_implausible", False))
    wl = load_workload(args.workload)
    plan = load_plan(args.plan)
    if what_if is not None:
        hw, wl = what_if(args, hw, wl, plan)
    if getattr(args, "nproc", None) is None:  # with --nproc the ranks hold one replica per node (node_ranks.py)
        refuse_node_local(plan, "placer run", "one process keeps one copy of every table: run it with --nproc N, "
                          "one process per plan GPU", file=args.plan)
    refuse_tiers(plan, "placer run", RUNNER_HAS_NO_TIERS, file=args.plan)
    config = RunConfig(device=args.device, steps=args.steps, warmup=args.warmup, scale=args.scale, seed=args.seed,
                       host_read=args.host_read, phase_steps=args.phase_steps, pool_batches=args.pool,
                       threads=args.threads, graph=getattr(args, "graph", "auto"))
    if getattr(args, "ids", None):
        if getattr(args, "nproc", None) is not None:
            raise SpecError("--ids with --nproc: real ids are read by one process only for now; drop --nproc",
                            field="--ids")
        from placer.data.samples import load_samples
        from placer.runner.run import POOL_MAX_BATCHES

        config.samples = load_samples(args.ids, args.ids_format, wl, (args.pool or POOL_MAX_BATCHES) * wl.batch_size)
    warn_if_oversubscribed(args)
    if getattr(args, "nproc", None) is not None and (any(p.compression for p in plan.placements)
                                                     or any(t.frozen for t in wl.tables)):
        raise SpecError("--nproc: plans with compressed (qr, tt, int8) or frozen tables run in one process only for "
                        "now; drop --nproc", file=args.plan, field="--nproc")
    if getattr(args, "nproc", None) is not None and config.graph == "on":
        raise SpecError("--graph on with --nproc: the ranks' graph-safe step is not built yet; drop one",
                        field="--graph")
    if getattr(args, "nproc", None) is not None:
        from placer.runner.distributed import emit, launch

        code, result = launch(args, args.nproc)
        if code == 0:
            emit(result, args)
        return code
    result = run_plan(hw, wl, plan, config, plan_file=args.plan)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1, default=jsonable) + "\n")
    else:
        print_result(result, Console(highlight=False, soft_wrap=True))
    return 0


def warn_if_oversubscribed(args) -> None:
    """OpenMP threads spin-wait: on a CPU already busy with other work, several torch threads can make each
    step 10-100x slower. Say so (on stderr) when the load exceeds the cores and --threads was not given."""
    import os

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.threads is not None or not device.startswith("cpu") or not hasattr(os, "getloadavg"):
        return
    if getattr(args, "nproc", None) is not None:  # the ranks of a CPU run default to one thread each
        return
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load > cores:
        Console(stderr=True, highlight=False).print(
            f"[yellow]note:[/] load average {load:.1f} on {cores} cores: CPU timings with several torch threads "
            "are unreliable on a busy machine; --threads 1 is steadier")
