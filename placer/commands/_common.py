"""Arguments and loading shared by the commands that take a hardware spec and a workload."""
from __future__ import annotations

import argparse

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
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="solver time limit, s (default 60)")
    p.add_argument("--gap", type=float, default=0.005, metavar="G", help="relative gap to stop at (default 0.005)")
    p.add_argument("--threads", type=int, default=None, help="solver threads (default: solver's choice)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random baseline (default 0)")
    p.add_argument("--no-fp16", action="store_true", help="never offer fp16 storage")


def load_pair(args):
    """(Topology, Workload) from the command's HW and WL arguments."""
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(args.workload)
    return Topology(load_hardware(args.hardware), wl.dense.dtype), wl


def solve_config(args, method: str | None = None) -> SolveConfig:
    from placer.errors import SpecError

    if args.time_limit <= 0:
        raise SpecError("--time-limit must be positive")
    if not 0 <= args.gap < 1:
        raise SpecError("--gap must be in [0, 1)")
    return SolveConfig(method=method or getattr(args, "method", "ilp"), solver=args.solver,
                       time_limit_s=args.time_limit, gap=args.gap, threads=args.threads, seed=args.seed,
                       options=OptionConfig(fp16=not args.no_fp16))
