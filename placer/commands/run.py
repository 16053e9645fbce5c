"""``placer run HW WL PLAN``: build the plan with PyTorch, train it, and print measured vs predicted."""
from __future__ import annotations

import argparse
import json
import math
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from placer.commands import _args
from placer.commands._common import add_what_if, check_devices_exist, with_batch, with_gpus
from placer.cost import PHASES
from placer.units import fmt_bytes, fmt_seconds


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("hardware", metavar="HW", help="hardware spec the prediction is made for (YAML/JSON)")
    p.add_argument("workload", metavar="WL", help="workload spec (YAML/JSON)")
    p.add_argument("plan", metavar="PLAN", help="plan JSON (placer solve, or written by hand)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    p.add_argument("--steps", type=_args.steps, default=50, metavar="N",
                   help=f"timed training steps, 1..{_args.MAX_STEPS:,} (default 50)")
    p.add_argument("--warmup", type=_args.nonneg_steps, default=10, metavar="N",
                   help="untimed warm-up steps first, >= 0 (default 10)")
    p.add_argument("--phase-steps", type=_args.nonneg_steps, default=None, metavar="N",
                   help="steps of the separate, synchronized per-phase pass, >= 0 (default min(steps, 20))")
    p.add_argument("--scale", type=_args.scale, default=1.0, metavar="S",
                   help="divide every table's rows by S >= 1; the plan and the prediction are scaled to match "
                        "(the plan must still fit the hardware spec unscaled)")
    p.add_argument("--seed", type=_args.seed, default=0, metavar="N",
                   help=f"seed of weights and batches, 0..{_args.MAX_SEED} (default 0)")
    p.add_argument("--host-read", default="auto", choices=("auto", "uva", "cpu_gather_copy"),
                   help="how the GPU reads host rows (default auto: uva when it works, else cpu_gather_copy)")
    p.add_argument("--threads", type=_args.threads, default=None, metavar="N",
                   help=f"torch CPU threads, 1..{_args.MAX_THREADS} (default: torch's choice)")
    p.add_argument("--pool", type=_args.pool, default=None, metavar="N",
                   help=f"batches generated ahead, 1..{_args.MAX_POOL_BATCHES} (default <= 8)")
    p.add_argument("--nproc", type=_args.processes, default=None, metavar="N",
                   help="run N processes with torch.distributed (gloo on cpu, NCCL on cuda): plan GPU i on rank "
                        "i mod N, the real all-to-all between them (default: one process, no torch.distributed)")
    p.add_argument("--ids", nargs="+", default=None, metavar="DATA",
                   help="train on real ids: batches of consecutive samples of these files (the formats of placer "
                        "profile) instead of ids drawn from the workload's access models; the first pool x batch "
                        "samples are loaded and cycled; ids are taken modulo the rows under --scale")
    p.add_argument("--ids-format", default=None, choices=("criteo-tsv", "dlrm-torch", "npy"),
                   help="format of the --ids files (default: from the file name; see placer profile --help)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_what_if(p)


def run(args) -> int:
    from placer.errors import SpecError
    from placer.plan import load_plan
    from placer.runner.run import RunConfig, run_plan
    from placer.specs import load_hardware, load_workload

    if args.threads is not None and args.threads < 1:
        raise SpecError("--threads must be >= 1")
    hw = load_hardware(args.hardware)
    wl = load_workload(args.workload)
    plan = load_plan(args.plan)
    batch, gpus = getattr(args, "batch", None), getattr(args, "gpus", None)
    if (batch is not None or gpus is not None) and getattr(args, "nproc", None) is not None:
        raise SpecError("--batch / --gpus with --nproc: the ranks read the spec files as they are; edit the "
                        "workload or hardware spec instead, or drop --nproc", field="--batch" if batch else "--gpus")
    if batch is not None:
        wl = with_batch(wl, batch)
    if gpus is not None:
        from placer.topology import Topology

        hw = with_gpus(hw, gpus)
        check_devices_exist(plan, Topology(hw, wl.dense.dtype), gpus, file=args.plan)
    config = RunConfig(device=args.device, steps=args.steps, warmup=args.warmup, scale=args.scale, seed=args.seed,
                       host_read=args.host_read, phase_steps=args.phase_steps, pool_batches=args.pool,
                       threads=args.threads)
    if getattr(args, "ids", None):
        if getattr(args, "nproc", None) is not None:
            raise SpecError("--ids with --nproc: real ids are read by one process only for now; drop --nproc",
                            field="--ids")
        from placer.data.samples import load_samples
        from placer.runner.run import POOL_MAX_BATCHES

        config.samples = load_samples(args.ids, args.ids_format, wl, (args.pool or POOL_MAX_BATCHES) * wl.batch_size)
    _warn_if_oversubscribed(args)
    if getattr(args, "nproc", None) is not None:
        from placer.runner.distributed import emit, launch

        code, result = launch(args, args.nproc)
        if code == 0:
            emit(result, args)
        return code
    result = run_plan(hw, wl, plan, config, plan_file=args.plan)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=1, default=_jsonable) + "\n")
    else:
        print_result(result, Console(highlight=False, soft_wrap=True))
    return 0


def _warn_if_oversubscribed(args) -> None:
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


def _jsonable(x):
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return str(x)


def _ratio(m, p) -> str:
    if not p or m is None:
        return "-"
    return f"{m / p:,.2f}x"


def print_result(r: dict, console: Console) -> None:
    m, p = r["measured"], r["predicted"]
    console.print(f"placer run: [bold]{escape(r['workload'])}[/] with plan {escape(r['plan_method'])}, predicted "
                  f"for {escape(r['hardware'])}; ran on {escape(r['device'])} ({escape(r['device_name'])}), torch "
                  f"{escape(r['torch_version'])}; host reads: {r['host_read_mechanism']}; {r['steps']} steps after "
                  f"{r['warmup']} warm-up" + (f"; rows / {r['scale']:g}" if r["scale"] != 1 else ""))
    if r.get("nproc"):
        console.print(f"{r['nproc']} processes ({r['backend']}); plan GPU i on rank i mod {r['nproc']}"
                      + (f", up to {r['devices_folded']} plan GPUs per rank: a rank's step is their summed work"
                         if r.get("devices_folded", 1) > 1 else ""))
    elif r.get("devices_folded", 1) > 1:
        console.print(f"[yellow]note:[/] the plan's {r['devices_folded']} GPUs all ran on this one device, one "
                      "after another: the measured step is their summed work")
    t = Table(title_justify="left")
    t.add_column("")
    t.add_column("measured", justify="right")
    t.add_column("predicted", justify="right")
    t.add_column("measured / predicted", justify="right")
    t.add_row("step time (median)", fmt_seconds(m["step_time_s"]), fmt_seconds(p["step_time_s"]),
              _ratio(m["step_time_s"], p["step_time_s"]))
    t.add_row("throughput, samples/s", f"{m['throughput_samples_per_s']:,.0f}",
              f"{p['throughput_samples_per_s']:,.0f}",
              _ratio(m["throughput_samples_per_s"], p["throughput_samples_per_s"]))
    for ph in PHASES:
        mv, pv = m["phases_s"].get(ph, 0.0), p["phases_s"].get(ph, 0.0)
        if mv or pv:
            t.add_row(f"  {ph}", fmt_seconds(mv), fmt_seconds(pv), _ratio(mv, pv))
    t.add_row("  sum of phases (synchronized pass)", fmt_seconds(m["phases_sum_s"]), fmt_seconds(p["step_time_s"]),
              _ratio(m["phases_sum_s"], p["step_time_s"]))
    peak_dev = m.get("peak_device_bytes")
    t.add_row("peak device memory", fmt_bytes(peak_dev) if peak_dev is not None else "(CPU run)",
              "", "")
    t.add_row("peak host memory (RSS)", fmt_bytes(m["peak_host_bytes"]), "", "")
    t.add_row("tables: device / host", f"{fmt_bytes(m['device_table_bytes'])} / {fmt_bytes(m['host_table_bytes'])}",
              "", "")
    if m.get("loss_first") is not None:
        t.add_row("loss first -> last steps", f"{m['loss_first']:.4f} -> {m['loss_last']:.4f}", "", "")
    console.print(t)
    err = r.get("relative_error")
    if err is not None:
        console.print(f"relative error of the step time: {err:+.1%}  (bottleneck predicted: "
                      f"{escape(str(p.get('bottleneck')))})")
    ops = m.get("ops")
    if ops:
        t = Table(title="per op kind and stream (synchronized pass, per step)", title_justify="left")
        for col in ("op kind", "stream", "measured", "priced", "measured / priced"):
            t.add_column(col, justify="left" if col in ("op kind", "stream") else "right")
        for row in sorted(ops, key=lambda x: -max(x["measured_s"], x["priced_s"])):
            t.add_row(row["kind"], escape(row["stream"]), fmt_seconds(row["measured_s"]), fmt_seconds(row["priced_s"]),
                      _ratio(row["measured_s"], row["priced_s"]))
        console.print(t)
    if r.get("hardware_note"):
        console.print(f"[yellow]note:[/] {escape(r['hardware_note'])}")
