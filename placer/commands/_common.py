"""Arguments and loading shared by the commands that take a hardware spec and a workload."""
from __future__ import annotations

import argparse
import time

from placer import argtypes as _args
from placer.options import OptionConfig
from placer.planner.ilp import SOLVERS
from placer.planner.solve import METHODS, SolveConfig


def add_hw_wl(p: argparse.ArgumentParser) -> None:
    p.add_argument("hardware", metavar="HW", help="hardware spec (YAML/JSON)")
    p.add_argument("workload", metavar="WL", help="workload spec (YAML/JSON)")
    add_allow_implausible(p)


def add_trainer(p: argparse.ArgumentParser) -> None:
    """--trainer: how a step is priced (and so what the ILP optimizes): placer's runner, or TorchRec's
    DistributedModelParallel with FBGEMM's fused kernels (program/torchrec_build.py)."""
    p.add_argument("--trainer", default=None, choices=("placer", "torchrec"),
                   help="what trains the job: placer's runner, or TorchRec's DistributedModelParallel (one fused "
                        "kernel per sharding type, the ids' and embeddings' all-to-alls; only the forms TorchRec "
                        "runs are planned); default: the workload's trainer field, else placer")


def with_trainer(wl, args):
    """The workload with --trainer applied (unchanged without the flag)."""
    trainer = getattr(args, "trainer", None)
    return wl if trainer is None else wl.model_copy(update={"trainer": trainer})


def add_allow_implausible(p: argparse.ArgumentParser) -> None:
    """--allow-implausible: accept hardware values that look like a unit mistake (placer/specs/plausible.py)."""
    p.add_argument("--allow-implausible", action="store_true",
                   help="accept hardware values that are most likely a unit mistake (hbm_GiB 40960: MiB?), "
                        "refused otherwise; they are still reported as warnings")


def allow_implausible(args) -> bool:
    return bool(getattr(args, "allow_implausible", False))


#: --time-limit when none is given, s
DEFAULT_TIME_LIMIT_S = 60.0


class _StoreGiven(argparse.Action):
    """Stores the option's value and notes that the command line gave it (``limit_given``): a value equal to the
    default, given, is not 'the default'."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def limit_given(args) -> bool:
    """Whether the command line gave --time-limit (add_solver_options), whatever its value."""
    return bool(getattr(args, "time_limit_given", False))


def limit_line(limit_s: float, remaining_s: float | None = None, what: str = "time limit",
               source: str | None = None, given: bool | None = None) -> str:
    """'time limit 60 s (the default; --time-limit S to change): ends by 10:31:05' for stderr: the limit, whether
    it is the default (or ``source``), and the wall-clock time it ends at (``remaining_s`` from now, default the
    whole limit). ``given``: whether the command line gave it (``limit_given``); None: judged by its value."""
    left = limit_s if remaining_s is None else max(0.0, remaining_s)
    end = time.strftime("%H:%M:%S", time.localtime(time.time() + left))
    if source is None:
        default = not given if given is not None else limit_s == DEFAULT_TIME_LIMIT_S
        source = "the default; --time-limit S to change" if default else "--time-limit"
    return f"{what} {limit_s:g} s ({source}): ends by {end}"


def add_solver_options(p: argparse.ArgumentParser, method: bool = True) -> None:
    if method:
        p.add_argument("--method", default="ilp", choices=METHODS,
                       help="planner (default ilp; qr, tt, int8, node_local: the ILP with every table that allows "
                            "that form held to it)")
    p.add_argument("--solver", default="cbc", choices=SOLVERS, help="MILP backend (default cbc)")
    p.set_defaults(time_limit_given=False)
    p.add_argument("--time-limit", type=_args.time_limit, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                   action=_StoreGiven,
                   help=f"time limit, s: > 0 and at most {_args.MAX_TIME_LIMIT_S:g} (default 60); for solve, "
                        "of the whole command (loading, solving, pricing the plan)")
    p.add_argument("--gap", type=_args.gap, default=0.005, metavar="G",
                   help="relative gap to stop at, in [0, 1) (default 0.005)")
    p.add_argument("--threads", type=_args.threads, default=None, metavar="N",
                   help=f"solver threads, 1..{_args.MAX_THREADS} (default: solver's choice)")
    p.add_argument("--seed", type=_args.seed, default=0, metavar="N",
                   help=f"seed of the random baseline, 0..{_args.MAX_SEED} (default 0)")
    p.add_argument("--no-fp16", action="store_true", help="never offer fp16 storage")


#: the shipped workloads (workloads/*.yaml) that allow each forced form, named where a workload allows none
#: (tests/test_forced_methods.py checks this against the files)
SHIPPED_ALLOWING = {
    "qr": ("mlperf-dlrm-v1-qr", "mlperf-dlrm-v2-qr", "mlperf-dlrm-v2-tt"),
    "tt": ("mlperf-dlrm-v2-tt",),
    "int8": ("mlperf-dlrm-v1-frozen-int8",),
    "node_local": ("criteo-terabyte-node-local",),
}


def check_forced_method(wl, method: str, flag: str = "--method") -> None:
    """SpecError naming ``flag`` (exit 2) before anything is solved when ``method`` is a forced form (qr, tt, int8,
    node_local) that no table of ``wl`` allows, naming the shipped workloads that allow it."""
    from placer.errors import SpecError
    from placer.forms.storage import FORCED_FORMS, STORAGE, allowing

    if method not in FORCED_FORMS or allowing(wl, method):
        return
    shipped = ", ".join(f"workloads/{name}.yaml" for name in SHIPPED_ALLOWING.get(method, ()))
    where = " (on several nodes, e.g. hardware_specs/dgx-h100-2node.yaml)" if method == "node_local" else ""
    raise SpecError(f"no table of workload {wl.name!r} allows {method} (tables[].{STORAGE[method].field}): the forced "
                    f"method {method} is the ILP with those tables held to it"
                    + (f"; shipped workloads that allow it: {shipped}{where}" if shipped else ""), field=flag)


def add_what_if(p: argparse.ArgumentParser) -> None:
    """--batch and --gpus: price a plan for another global batch or GPU count without editing the specs."""
    p.add_argument("--batch", type=_args.batch, default=None, metavar="N",
                   help=f"what-if: the workload's global batch_size replaced by N, 1..{_args.MAX_BATCH:,} (the plan "
                        "is re-priced for it, with a warning)")
    p.add_argument("--gpus", type=_args.gpus, default=None, metavar="N",
                   help="what-if: the hardware's first node template replicated to N GPUs (whole nodes, as placer "
                        "sweep does); refused when the plan uses a device the N GPUs do not have")


def dense_dtypes() -> tuple[str, ...]:
    """The dense dtypes a workload may name (specs/workload.py DenseSpec.dtype)."""
    from typing import get_args

    from placer.specs.workload import DenseSpec

    return get_args(DenseSpec.model_fields["dtype"].annotation)


def add_dense_dtype(p: argparse.ArgumentParser) -> None:
    """--dense-dtype: price (or plan) with the dense model at another dtype without editing the workload."""
    p.add_argument("--dense-dtype", default=None, choices=dense_dtypes(), metavar="DTYPE",
                   help=f"what-if: the workload's dense.dtype replaced by DTYPE, one of {', '.join(dense_dtypes())} "
                        "(the dense model's GEMMs at that precision: bf16 / fp16 under autocast, tf32 matmuls); "
                        "said on stderr, and a plan made with it records the changed workload")


def with_dense_dtype(wl, dtype: str | None):
    """``wl`` with its dense.dtype replaced (--dense-dtype), its sha256 changed so that a plan made with it names
    the change (placer check, simulate); unchanged for None or the workload's own dtype. SpecError naming
    --dense-dtype for a dtype a workload may not name."""
    from placer.errors import SpecError

    if dtype is None or dtype == wl.dense.dtype:
        return wl
    if dtype not in dense_dtypes():
        raise SpecError(f"unknown dense dtype {dtype!r}; choose from {', '.join(dense_dtypes())}",
                        field="--dense-dtype")
    dense = wl.dense.model_copy(update={"dtype": dtype})
    return wl.model_copy(update={"dense": dense, "sha256": _what_if_sha(wl.sha256, f"dense.dtype={dtype}")})


def dense_dtype_note(wl, dtype: str | None) -> str | None:
    """The stderr line that says --dense-dtype replaced the workload's dtype (``wl`` the workload as loaded), or
    None where it changes nothing."""
    if dtype is None or dtype == wl.dense.dtype:
        return None
    return (f"what-if: --dense-dtype {dtype}: {wl.name}'s dense.dtype {wl.dense.dtype} replaced by {dtype} "
            f"(the workload file unchanged)")


def apply_dense_dtype(wl, args):
    """``wl`` with the command's --dense-dtype applied (unchanged without it), the change said on stderr."""
    import sys

    dtype = getattr(args, "dense_dtype", None)
    note = dense_dtype_note(wl, dtype)
    if note is not None:
        print(note, file=sys.stderr, flush=True)
    return with_dense_dtype(wl, dtype)


def _what_if_sha(sha256: str | None, change: str) -> str | None:
    """A digest for a spec changed in memory: differs from its file's, so the plan check names the change."""
    import hashlib

    return hashlib.sha256(f"{sha256}+{change}".encode()).hexdigest() if sha256 else None


def with_batch(wl, batch: int):
    """``wl`` with its global batch_size replaced, validated again; unchanged when ``batch`` is its own."""
    from pydantic import ValidationError

    from placer.specs.loading import validation_to_spec_error
    from placer.specs.workload import Workload

    _args.check(_args.batch, batch, "--batch")
    if batch == wl.batch_size:
        return wl
    try:
        new = Workload.model_validate({**wl.model_dump(), "batch_size": int(batch)})
    except ValidationError as exc:
        raise validation_to_spec_error(exc, wl.source_path) from None
    return new.model_copy(update={"source_path": wl.source_path,
                                  "sha256": _what_if_sha(wl.sha256, f"batch_size={batch}")})


def with_gpus(spec, gpus: int):
    """``spec`` with its first node template replicated to ``gpus`` GPUs (placer.sweep.spec_for_gpus: whole
    nodes, SpecError naming --gpus otherwise); unchanged when it already has that many in one node group."""
    from placer.sweep import spec_for_gpus

    _args.check(_args.gpus, gpus, "--gpus")
    if gpus == spec.num_gpus and len(spec.nodes) == 1:
        return spec
    new = spec_for_gpus(spec, int(gpus))
    return new.model_copy(update={"sha256": _what_if_sha(spec.sha256, f"gpus={gpus}")})


def check_devices_exist(plan, topology, gpus: int | None, file: str | None = None) -> None:
    """After --gpus: refuse (exit 2) a plan that uses a device the resized machine lacks, naming the first."""
    from placer.errors import SpecError

    if gpus is None:
        return
    have = set(topology.gpus) | set(topology.hosts)
    for p in plan.placements:
        for s in p.shards:
            if s.device not in have:
                raise SpecError(f"--gpus {gpus}: the plan places table {p.table!r} on {s.device}, which a machine "
                                f"of {gpus} GPUs does not have (re-plan for it: placer solve, or placer sweep)",
                                file=file, field="--gpus")


def load_pair(args):
    """(Topology, Workload) from the command's HW and WL arguments, with the --batch / --gpus / --dense-dtype
    what-ifs applied when the command has them."""
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    # HW first, as on the command line: swapped files are named in order
    hw = load_hardware(args.hardware, allow_implausible=allow_implausible(args))
    if getattr(args, "gpus", None) is not None:
        hw = with_gpus(hw, args.gpus)
    wl = with_trainer(load_workload(args.workload), args)
    if getattr(args, "batch", None) is not None:
        wl = with_batch(wl, args.batch)
    wl = apply_dense_dtype(wl, args)
    return Topology(hw, wl.dense.dtype), wl


def solve_config(args, method: str | None = None) -> SolveConfig:
    """The SolveConfig of the parsed arguments (argparse's types have checked their ranges: argtypes.py; checked
    again here for callers that build the namespace themselves)."""
    checks = (("--time-limit", args.time_limit, _args.time_limit), ("--gap", args.gap, _args.gap),
              ("--seed", args.seed, _args.seed), ("--threads", args.threads, _args.threads))
    work_limit = getattr(args, "work_limit", None)  # solve's only
    checks += (("--work-limit", work_limit, _args.work_limit),)
    for flag, value, parse in checks:
        if value is not None or flag not in ("--threads", "--work-limit"):
            _args.check(parse, value, flag)
    return SolveConfig(method=method or getattr(args, "method", "ilp"), solver=args.solver,
                       time_limit_s=args.time_limit, work_limit=work_limit, gap=args.gap, threads=args.threads,
                       seed=args.seed,
                       options=OptionConfig(fp16=not args.no_fp16))
