"""``placer calibrate --device cuda|cpu -o FILE``: measure this machine and write a hardware spec."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="hardware spec YAML to write")
    p.add_argument("--quick", action="store_true", help="smaller buffers and fewer repeats (seconds, noisier)")
    p.add_argument("--gpus", type=int, default=1, metavar="N",
                   help="GPUs per node to write (the one measured device replicated; default 1)")
    p.add_argument("--name", default=None, help="spec name (default <hostname>-cpu|gpu-calibrated)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")


def run(args) -> int:
    import torch

    from placer.calibrate import calibrate, to_yaml
    from placer.errors import PlacerError, SpecError
    from placer.runner.run import resolve_device
    from placer.specs import load_hardware

    if args.gpus < 1:
        raise SpecError("--gpus must be >= 1")
    if args.threads is not None:
        if args.threads < 1:
            raise SpecError("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    cal = calibrate(device, quick=args.quick,
                    progress=None if args.json else (lambda msg: err.print(f"[dim]measuring {escape(msg)}...[/]")))
    text = to_yaml(cal, name=args.name, gpus=args.gpus)
    out = Path(args.output)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write {out}: {exc.strerror}") from None
    try:
        load_hardware(out)  # what we write must be a valid spec
    except PlacerError as exc:
        raise PlacerError(f"calibrate wrote a spec that does not validate (a bug): {exc}") from None
    if args.json:
        data = {"output": str(out), "device": str(device), "device_name": cal.device_name,
                "torch_version": cal.torch_version, "date": cal.date, "quick": cal.quick, "wall_s": cal.wall_s,
                "host_read_mechanism": cal.host_read_mechanism,
                "values": {k: {"value": m.value, "how": m.how} for k, m in cal.values.items()},
                "peak_TFLOPs": {k: {"value": m.value, "how": m.how} for k, m in cal.peaks.items()}}
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return 0
    console = Console(highlight=False, soft_wrap=True)
    t = Table(title=f"calibrated {escape(cal.device_name)} in {cal.wall_s:.1f} s -> {escape(str(out))}",
              title_justify="left")
    t.add_column("field")
    t.add_column("value", justify="right")
    t.add_column("how")
    for k, m in cal.values.items():
        t.add_row(k, f"{m.value:,.4g}", escape(m.how))
    for k, m in cal.peaks.items():
        t.add_row(f"peak_TFLOPs.{k}", f"{m.value:,.4g}", escape(m.how))
    console.print(t)
    return 0
