"""``placer check FILE...``: validate any spec or plan file, one summary line each."""
from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from placer.commands._common import add_allow_implausible
from placer.errors import PlacerError
from placer.specs.detect import detect_kind
from placer.specs.loading import read_document
from placer.units import fmt_bytes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="hardware spec, workload or plan (YAML or JSON)")
    p.add_argument("--hardware", help="hardware spec to check plans against")
    p.add_argument("--workload", help="workload to check plans against")
    add_allow_implausible(p)


def summarize_hardware(path: str, allow_implausible: bool = False) -> str:
    from placer.specs.hardware import load_hardware
    from placer.topology import Topology

    spec = load_hardware(path, allow_implausible=allow_implausible)
    s = Topology(spec).summary()
    links = ", ".join(f"{n} {k}" for k, n in sorted(s["links"].items()))
    return (f"hardware {spec.name}: {s['nodes']} node(s), {s['gpus']} GPU(s), HBM {fmt_bytes(s['hbm_bytes'])}, "
            f"host DRAM {fmt_bytes(s['dram_bytes'])}, links: {links}")


def summarize_workload(path: str) -> str:
    from placer.specs.workload import load_workload

    wl = load_workload(path)
    rows = sum(t.rows for t in wl.tables)
    notes = "".join(f"\n  note: {n}" for n in wl.options_not_planned())
    return (f"workload {wl.name}: {len(wl.tables)} tables, {len(wl.resolved_features)} features, "
            f"{rows:,} rows, {fmt_bytes(wl.total_bytes(with_optimizer=False))} weights, "
            f"{fmt_bytes(wl.total_bytes())} with {wl.optimizer.name} state, {_dense_optimizer(wl)}batch "
            f"{wl.batch_size}{notes}")


def _dense_optimizer(wl) -> str:
    """'dense adam, ' where the dense model's optimizer is not the tables' (else nothing)."""
    dense = wl.resolved_dense_optimizer
    return "" if wl.dense_optimizer is None else f"dense {dense.name} lr {dense.lr:g}, "


def summarize_plan(path: str, args) -> str:
    from placer.plan_price import check_plan_file

    return check_plan_file(path, getattr(args, "hardware", None), getattr(args, "workload", None),
                           allow_implausible=getattr(args, "allow_implausible", False))


def run(args) -> int:
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    worst = 0
    for path in args.files:
        try:
            kind = detect_kind(read_document(path), path)
            if kind == "hardware":
                line = summarize_hardware(path, getattr(args, "allow_implausible", False))
            elif kind == "workload":
                line = summarize_workload(path)
            else:
                line = summarize_plan(path, args)
            out.print(f"[green]ok[/]  {escape(path)}: {escape(line)}")
        except PlacerError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}")
            worst = max(worst, exc.exit_code)
    return worst
