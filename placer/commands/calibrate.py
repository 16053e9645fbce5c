"""``placer calibrate --device cuda|cpu -o FILE [--workload WL ...]``: measure what each op of the step program
costs on this machine, as functions of size, and write a hardware spec with them (``op_costs``)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from placer import argtypes as _args
from placer.commands._output import check_output_path, write_text


#: GPUs per node calibrate writes at most (a node template; the spec's own schema bounds apply too)
MAX_CALIBRATE_GPUS = 64
#: passes of a full calibration by default (calibrate/passes.py: the median of three rejects one disturbed pass)
FULL_PASSES = 3
MAX_PASSES = 9


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="hardware spec YAML to write")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (seconds, noisier)")
    p.add_argument("--workload", action="append", default=[], metavar="WL",
                   help="also time the GEMMs of this workload's dense step at their exact shapes, and the step "
                        "itself as a check of its price (repeatable)")
    p.add_argument("--gpus", type=_args.int_range(1, MAX_CALIBRATE_GPUS, "a GPU count"), default=1, metavar="N",
                   help=f"GPUs per node to write, 1..{MAX_CALIBRATE_GPUS} (the one measured device replicated; "
                        "default 1)")
    p.add_argument("--nproc", type=_args.int_range(2, MAX_CALIBRATE_GPUS, "a process count"), default=None,
                   metavar="N", help="--device cpu only: a machine of N rank processes as `placer run --nproc N` "
                                     "runs them (one torch thread each): one rank measured while N-1 others work, "
                                     "then the gloo all-to-all and all-reduce between N processes; writes N 'GPUs' "
                                     "linked by that all-to-all")
    p.add_argument("--trainer", default="placer", choices=("placer", "torchrec"),
                   help="torchrec: also time FBGEMM's fused embedding kernels (TBE forward and fused backward, "
                        "op_costs.torchrec) for steps priced as TorchRec runs them (needs fbgemm-gpu or "
                        "fbgemm-gpu-cpu; exit 2 without); default placer: the runner's ops only")
    p.add_argument("--passes", type=_args.int_range(1, MAX_PASSES, "a pass count"), default=None, metavar="K",
                   help=f"time every benchmark K times, one whole pass after another, and keep each number's median "
                        f"with its spread between passes in its comment, 1..{MAX_PASSES} (default {FULL_PASSES}, "
                        f"with --quick 1)")
    p.add_argument("--name", default=None, help="spec name (default <hostname>-cpu|gpu-calibrated)")
    p.add_argument("--threads", type=_args.threads, default=None, metavar="N",
                   help=f"torch CPU threads, 1..{_args.MAX_THREADS} (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")


def fit_tbe(cal, device, quick: bool, workloads) -> None:
    """op_costs.torchrec (calibrate/tbe.py): the backward of each of the workloads' embedding optimizers (rowwise
    Adagrad without workloads)."""
    from placer.calibrate import tbe
    from placer.calibrate.timing import sizes_for
    from placer.calibrate.writer import op_costs

    optimizers = sorted({w.optimizer.name for w in workloads}) or ["rowwise_adagrad"]
    tbe.fit(cal, device, sizes_for(device, quick), op_costs(cal, "device"), optimizers=optimizers)


def run(args) -> int:
    import torch

    from placer.calibrate import calibrate, to_yaml
    from placer.calibrate.passes import combine
    from placer.calibrate.ranks import BusyNeighbours, measure_collectives
    from placer.calibrate.ranks import apply as apply_collectives
    from placer.calibrate.writer import checked as checked_samples
    from placer.errors import PlacerError, SpecError
    from placer.runner.run import resolve_device
    from placer.specs import load_hardware, load_workload

    if args.gpus < 1:
        raise SpecError("--gpus must be >= 1")
    if args.threads is not None and args.threads < 1:
        raise SpecError("--threads must be >= 1")
    check_output_path(args.output, "-o/--output")  # before the measurements, which take a minute
    device = resolve_device(args.device)
    if getattr(args, "trainer", "placer") == "torchrec":
        from placer.calibrate import tbe

        if (why := tbe.missing()) is not None:
            raise SpecError(why, field="--trainer")
    nproc = getattr(args, "nproc", None)
    if nproc is not None:
        if device.type != "cpu":
            raise SpecError(f"--nproc {nproc} calibrates CPU rank processes: use it with --device cpu")
        if args.gpus != 1:
            raise SpecError("--nproc N writes N 'GPUs' itself: leave --gpus out")
        if args.threads not in (None, 1):
            raise SpecError(f"--nproc {nproc}: every rank runs one torch thread (placer run --nproc); leave --threads "
                            "out or give 1")
        args.threads, args.gpus = 1, nproc
    if not args.json:
        from placer.run_cli import warn_if_oversubscribed

        warn_if_oversubscribed(args)  # several torch threads on a busy CPU: times 10-100x off, rates noise
    workloads = [load_workload(w) for w in args.workload]
    threads_before = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    say = None if args.json else (lambda msg: err.print(f"[dim]measuring {escape(msg)}...[/]"))
    passes = args.passes or (1 if args.quick else FULL_PASSES)
    done = []
    try:
        with BusyNeighbours(nproc - 1 if nproc else 0):
            for k in range(passes):
                step = say if passes == 1 or not say else (lambda msg, k=k: say(f"pass {k + 1}/{passes}: {msg}"))
                cal = calibrate(device, quick=args.quick, workloads=workloads, gpus=args.gpus, progress=step)
                if getattr(args, "trainer", "placer") == "torchrec":
                    if step:
                        step("FBGEMM's TBE forward and fused backward")
                    fit_tbe(cal, device, args.quick, workloads)
                done.append(cal)
        cal = combine(done)
    finally:
        torch.set_num_threads(threads_before)
    if nproc:
        if say:
            say(f"gloo all-to-all and all-reduce between {nproc} processes")
        apply_collectives(cal, measure_collectives(nproc, quick=args.quick))
        if getattr(args, "trainer", "placer") == "torchrec":
            from placer.calibrate import dmp

            if say:
                say(f"DistributedModelParallel's own step cost on {nproc} ranks (synthetic models)")
            dmp.fit(cal, to_yaml(cal, name=args.name, gpus=args.gpus), nproc)
    text = to_yaml(cal, name=args.name, gpus=args.gpus)
    out = Path(args.output)
    write_text(out, text, "-o/--output")
    try:
        load_hardware(out, allow_implausible=True)  # what we write must be a valid spec (measured: no unit mistake)
    except PlacerError as exc:
        raise PlacerError(f"calibrate wrote a spec that does not validate (a bug): {exc}") from None
    checked = checked_samples(cal)
    if args.json:
        data = {"output": str(out), "device": str(device), "device_name": cal.device_name,
                "torch_version": cal.torch_version, "date": cal.date, "quick": cal.quick, "wall_s": cal.wall_s,
                "threads": cal.threads, "unified_memory": cal.unified, "host_read_mechanism": cal.host_read_mechanism,
                "workloads": cal.workloads, "notes": cal.all_notes,
                "collectives": cal.ranks.to_json() if cal.ranks else None,
                "values": {k: {"value": m.value, "how": m.how} for k, m in cal.values.items()},
                "peak_TFLOPs": {k: {"value": m.value, "how": m.how} for k, m in cal.peaks.items()},
                "samples": [{"kind": s.kind, "side": s.side, "sizes": s.sizes, "measured_s": s.seconds,
                             "priced_s": p, "defines": list(s.defines), "about": s.about, "exact": s.exact,
                             "what": s.what} for s, p in checked]}
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return 0
    console = Console(highlight=False, soft_wrap=True)
    t = Table(title=f"calibrated {escape(cal.device_name)} in {cal.wall_s:.1f} s -> {escape(str(out))}",
              title_justify="left")
    for col, justify in (("op", "left"), ("side", "left"), ("timed", "right"), ("measured / priced", "right"),
                         ("defines", "left")):
        t.add_column(col, justify=justify)
    kinds: dict[tuple[str, str, bool], list] = {}
    for s, p in checked:
        kinds.setdefault((s.kind, s.side, bool(s.defines)), []).append(s.seconds / p)
    for (kind, side, defines), ratios in sorted(kinds.items()):
        span = f"{min(ratios):.2f} .. {max(ratios):.2f}"
        t.add_row(kind, side, str(len(ratios)), span, "yes" if defines else "check")
    console.print(t)
    if cal.ranks:
        console.print(f"between the {cal.ranks.world} ranks: all-to-all {escape(cal.ranks.all_to_all.describe())}; "
                      f"all-reduce {escape(cal.ranks.all_reduce.describe())}")
    console.print("[dim]defining samples price back to their measured time; checks show how far the cost model's "
                  "formula is from other sizes (comments in the YAML name each).[/]")
    return 0
