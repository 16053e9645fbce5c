"""Bounds of what the commands and the Python API accept, each written once (the bounds of the numbers in a
spec are in ``placer/specs/limits.py``; a count both know, such as GPUs or the batch, is taken from there).

argtypes.py turns these into argparse types (the CLI exits 2 before any work); planner/solve.py checks a
SolveConfig against the same numbers, so an API caller and a CLI user meet the same limits.
"""
from __future__ import annotations

from placer.specs.limits import MAX_BATCH as SPEC_MAX_BATCH
from placer.specs.limits import MAX_TOTAL_GPUS

#: the solver's time limit, seconds: one day (longer solves are not what this tool is for)
MAX_TIME_LIMIT_S = 86_400.0
#: the solver's work limit, work units (nominal milliseconds, planner/budget.py): a nominal day
MAX_WORK_LIMIT = 86_400_000.0
#: seeds: what numpy's and torch's generators take everywhere
MAX_SEED = 2**32 - 1
#: torch or solver threads
MAX_THREADS = 1024
#: timed steps of a run (a typo such as 10**12 would otherwise run for ever)
MAX_STEPS = 10_000_000
#: batches a run generates ahead
MAX_POOL_BATCHES = 4096
#: rank processes of a run or a calibration
MAX_PROCESSES = 256
#: what-if GPU counts (--gpus): no larger than a spec may describe
MAX_GPUS = MAX_TOTAL_GPUS
#: the rows divisor of a run (--scale)
MAX_SCALE = 1e12
#: what-if global batch (--batch): no larger than a workload may declare
MAX_BATCH = SPEC_MAX_BATCH
