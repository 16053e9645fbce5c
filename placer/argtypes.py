"""argparse ``type=`` functions for every numeric argument of every subcommand (and of ``python -m
placer.runner``, which shares ``placer run``'s): finite, in range.

A value out of range raises argparse.ArgumentTypeError, so argparse prints the usage and
``argument --seed: ...`` and the CLI exits 2 (bad input) before any work starts. The limits are in
placer/limits.py, with their units:

- solver time limit: seconds, finite, > 0 and at most MAX_TIME_LIMIT_S (one day);
- solver work limit: work units (nominal milliseconds, planner/budget.py), > 0 and at most MAX_WORK_LIMIT;
- seeds: integers in [0, 2**32) (what numpy's and torch's generators take everywhere);
- thread counts: integers in [1, MAX_THREADS];
- counts of steps, batches, processes, GPUs: integers with a lower bound and a generous upper bound (a typo
  like 10**12 steps would otherwise run for ever instead of failing).
"""
from __future__ import annotations

import argparse
import math

from placer.limits import (MAX_BATCH, MAX_GPUS, MAX_POOL_BATCHES, MAX_PROCESSES, MAX_SCALE, MAX_SEED, MAX_STEPS,
                           MAX_THREADS, MAX_TIME_LIMIT_S, MAX_WORK_LIMIT)


def _parse_int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _parse_float(text: str) -> float:
    try:
        x = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


def int_range(lo: int, hi: int, what: str = "") -> callable:
    """An integer in [lo, hi]; ``what`` (with units) goes into the message."""
    def parse(text: str) -> int:
        n = _parse_int(text)
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{n} is out of range: {what + ' ' if what else ''}"
                                             f"must be an integer in [{lo}, {hi:,}]")
        return n
    parse.__name__ = "integer"
    return parse


def float_range(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False, what: str = "") -> callable:
    """A finite number in [lo, hi] (an end excluded when ``lo_open`` / ``hi_open``)."""
    def parse(text: str) -> float:
        x = _parse_float(text)
        ok = (x > lo if lo_open else x >= lo) and (x < hi if hi_open else x <= hi)
        if not ok:
            span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
            raise argparse.ArgumentTypeError(f"{x:g} is out of range: {what + ' ' if what else ''}"
                                             f"must be a finite number in {span}")
        return x
    parse.__name__ = "number"
    return parse


def check(parse, value, flag: str):
    """``parse(str(value))`` for a value that did not come through argparse (the Python API, a namespace built
    by hand): the same range, a SpecError naming ``flag`` instead of argparse's usage message."""
    from placer.errors import SpecError

    try:
        return parse(str(value))
    except argparse.ArgumentTypeError as exc:
        raise SpecError(str(exc), field=flag) from None


#: solver time limit, seconds
time_limit = float_range(0.0, MAX_TIME_LIMIT_S, lo_open=True, what="the time limit in seconds")
#: solver work limit, work units (nominal milliseconds)
work_limit = float_range(0.0, MAX_WORK_LIMIT, lo_open=True, what="the work limit in work units")
#: relative MIP gap, a fraction
gap = float_range(0.0, 1.0, hi_open=True, what="the relative gap")
seed = int_range(0, MAX_SEED, "a seed")
threads = int_range(1, MAX_THREADS, "a thread count")
steps = int_range(1, MAX_STEPS, "a step count")
nonneg_steps = int_range(0, MAX_STEPS, "a step count")
pool = int_range(1, MAX_POOL_BATCHES, "a batch count")
processes = int_range(1, MAX_PROCESSES, "a process count")
gpus = int_range(1, MAX_GPUS, "a GPU count")
#: global batch (samples per step over all devices) of the --batch what-if
batch = int_range(1, MAX_BATCH, "a global batch size")
#: rows divisor of ``placer run --scale``: 1 runs the tables as they are
scale = float_range(1.0, MAX_SCALE, what="the rows divisor")
#: samples/s
throughput = float_range(0.0, 1e18, lo_open=True, what="a throughput in samples/s")
