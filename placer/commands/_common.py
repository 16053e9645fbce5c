"""Arguments and loading shared by the commands that take a hardware spec and a workload."""
from __future__ import annotations

import argparse

from placer.commands import _args
from placer.options import OptionConfig
from placer.planner.ilp import SOLVERS
from placer.planner.solve import METHODS, SolveConfig


def add_hw_wl(p: argparse.ArgumentParser) -> None:
    p.add_argument("hardware", metavar="HW", help="hardware spec (YAML/JSON)")
    p.add_argument("workload", metavar="WL", help="workload spec (YAML/JSON)")


def add_solver_options(p: argparse.ArgumentParser, method: bool = True) -> None:
    if method:
        p.add_argument("--method", default="ilp", choices=METHODS, help="planner (default ilp)")
    p.add_argument("--solver", default="cbc", choices=SOLVERS, help="MILP backend (default cbc)")
    p.add_argument("--time-limit", type=_args.time_limit, default=60.0, metavar="S",
                   help=f"solver time limit, s: > 0 and at most {_args.MAX_TIME_LIMIT_S:g} (default 60)")
    p.add_argument("--gap", type=_args.gap, default=0.005, metavar="G",
                   help="relative gap to stop at, in [0, 1) (default 0.005)")
    p.add_argument("--threads", type=_args.threads, default=None, metavar="N",
                   help=f"solver threads, 1..{_args.MAX_THREADS} (default: solver's choice)")
    p.add_argument("--seed", type=_args.seed, default=0, metavar="N",
                   help=f"seed of the random baseline, 0..{_args.MAX_SEED} (default 0)")
    p.add_argument("--no-fp16", action="store_true", help="never offer fp16 storage")


def load_pair(args):
    """(Topology, Workload) from the command's HW and WL arguments."""
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(args.workload)
    return Topology(load_hardware(args.hardware), wl.dense.dtype), wl


def solve_config(args, method: str | None = None) -> SolveConfig:
    """The SolveConfig of the parsed arguments (argparse's types have checked their ranges: _args.py; checked
    again here for callers that build the namespace themselves)."""
    from placer.errors import SpecError

    checks = (("--time-limit", args.time_limit, _args.time_limit), ("--gap", args.gap, _args.gap),
              ("--seed", args.seed, _args.seed), ("--threads", args.threads, _args.threads))
    for flag, value, parse in checks:
        if value is None and flag == "--threads":
            continue
        try:
            parse(str(value))
        except argparse.ArgumentTypeError as exc:
            raise SpecError(str(exc), field=flag) from None
    return SolveConfig(method=method or getattr(args, "method", "ilp"), solver=args.solver,
                       time_limit_s=args.time_limit, gap=args.gap, threads=args.threads, seed=args.seed,
                       options=OptionConfig(fp16=not args.no_fp16))
