"""``placer show FILE [--plot PNG]``: a readable description of a hardware spec or workload."""
from __future__ import annotations

import argparse

from rich.console import Console

from placer.commands._common import add_allow_implausible, allow_implausible
from placer.commands._output import check_plot_path, save_figure
from placer.errors import SpecError
from placer.specs.detect import detect_kind
from placer.specs.loading import read_document


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="hardware spec or workload (YAML or JSON)")
    p.add_argument("--plot", metavar="PNG", help="draw the topology graph or the workload's size/skew chart")
    add_allow_implausible(p)


def run(args) -> int:
    from placer import report_specs

    if args.plot is not None:
        check_plot_path(args.plot, "--plot")
    console = Console(highlight=False, soft_wrap=False, markup=False, width=max(Console().width, 140))
    kind = detect_kind(read_document(args.file), args.file)
    if kind == "hardware":
        from placer.specs.hardware import load_hardware

        spec = load_hardware(args.file, allow_implausible=allow_implausible(args))
        topo = report_specs.show_hardware(spec, console)
        if args.plot is not None:
            path = save_figure(lambda: report_specs.plot_hardware(spec, args.plot, topo), args.plot, "--plot")
            console.print(f"wrote {path}")
    elif kind == "workload":
        from placer.specs.workload import load_workload

        wl = load_workload(args.file)
        report_specs.show_workload(wl, console)
        if args.plot is not None:
            path = save_figure(lambda: report_specs.plot_workload(wl, args.plot), args.plot, "--plot")
            console.print(f"wrote {path}")
    else:
        raise SpecError("placer show describes hardware specs and workloads; for a plan use placer check",
                        file=args.file)
    return 0
