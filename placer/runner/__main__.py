"""``python -m placer.runner HW WL PLAN [options]``: the runner as a module, for torchrun.

- Under torchrun (WORLD_SIZE set): one rank of a distributed run (``placer.runner.distributed``):
  ``torchrun --nproc-per-node N -m placer.runner HW WL PLAN --device cpu --json``; rank 0 prints the result.
- Without it: the same as ``placer run`` (one process, or ``--nproc N`` local processes).

Options are ``placer run``'s (placer/run_cli.py) but its --batch / --gpus what-ifs. Exit codes: 0 ok, 1 a bug,
2 bad input, 3 the plan does not fit.
"""
from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console
from rich.markup import escape

from placer.errors import PlacerError
from placer.run_cli import add_arguments
from placer.run_cli import run as run_command


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m placer.runner",
                                description="run a plan with PyTorch (one rank of a torchrun job when WORLD_SIZE "
                                            "is set) and measure it against the prediction")
    add_arguments(p)
    p.add_argument("--result-file", default=None, help=argparse.SUPPRESS)  # the launcher's: rank 0 writes JSON
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    rank = os.environ.get("RANK")
    try:
        if "WORLD_SIZE" in os.environ:
            from placer.runner.distributed import worker_main

            return worker_main(args)
        return run_command(args)
    except PlacerError as exc:
        prefix = f"[rank {rank}] " if rank is not None else ""
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(prefix + str(exc))}", markup=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
