"""``placer run HW WL PLAN``: build the plan with PyTorch, train it, and print measured vs predicted (the run itself:
placer/run_cli.py, shared with ``python -m placer.runner``)."""
from __future__ import annotations

import argparse

from placer import run_cli
from placer.commands._common import add_what_if, check_devices_exist, with_batch, with_gpus


def add_arguments(p: argparse.ArgumentParser) -> None:
    run_cli.add_arguments(p)
    add_what_if(p)


def run(args) -> int:
    return run_cli.run(args, what_if=_what_if)


def _what_if(args, hw, wl, plan):
    """--batch / --gpus applied to the loaded specs (refused with --nproc: the ranks read the files)."""
    from placer.errors import SpecError

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
    return hw, wl
