"""What the planner's work costs in nominal seconds, and the limits a solver gets from a budget (budget.py).

In a work budget the clock moves only by what the stages charge: counted effort (simplex iterations, branch-and-
bound nodes, tables visited, options priced) times a rate in nominal seconds. The rates are the wall seconds that
effort took on the reference machine (two cores, docs/solver.md), fitted to the solves of production-856 @
dgx-h100-16node and mlperf-dlrm-v2 @ dgx-h100-2node (a plan solved under a work limit records both per stage:
solver.stage_work in units, solver.stage_times_s in wall seconds); they need not be exact, only deterministic and
roughly proportional to the time, so that a work limit of N units searches about as far as N milliseconds do there.
The rates are tuning.py's (``python3 validation/tune_planner.py effort`` re-derives them).

For the solvers, ``lp_limits``, ``cbc_limits`` and ``mip_limits`` turn the nominal seconds a stage may spend into
the solver's own options: a time limit in a time budget; iteration or node limits (and no time limit) in a work
budget. The ``*_work`` functions give the nominal seconds of what a solve did, to charge.
"""
from __future__ import annotations

import math
import re

from placer.planner.budget import Budget
from placer.planner.tuning import (LP_CALL_S, SIMPLEX_S_AT_10K, SIMPLEX_GROWTH, IPM_S_PER_NONZERO, CBC_CALL_S,
                                   CBC_S_PER_NONZERO, CBC_ITERATION_S_PER_NONZERO, CBC_NODE_S_PER_NONZERO,
                                   MIP_NODE_S_PER_NONZERO, MIP_ROOT_S_PER_NONZERO, SCORE_CALL_S, SCORE_S_PER_ENTRY,
                                   GROUP_S_PER_ENTRY, PRICING_S_PER_LOAD, SWAP_S_PER_PAIR, REPACK_S_PER_PARTNER,
                                   POTENTIAL_S_PER_LOAD, TIE_BREAK_OPTION_S, SETUP_S_PER_PAIR)  # noqa: F401

#: The rates above (nominal seconds per unit of counted effort; the other modules read them as effort.NAME) are
#: fitted constants: tuning.py holds them with their measurements and the command that re-derives them.

#: Most iterations or nodes handed to a solver (its integer options overflow past 2**31 - 1).
_MAX_COUNT = 2**31 - 2
#: The longest wall time a solve in a work budget may take before the watchdog (ilp.py) stops it, as a multiple
#: of the nominal seconds it was given, plus a minute: a solve that far behind its nominal rate is stuck.
WATCHDOG_FACTOR = 20.0


def _count(seconds: float, per_unit_s: float) -> int:
    """How many units of ``per_unit_s`` nominal seconds fit in ``seconds`` (at least 1, at most _MAX_COUNT)."""
    if not seconds > 0 or per_unit_s <= 0:
        return 1
    return int(min(_MAX_COUNT, max(1.0, math.floor(seconds / per_unit_s))))


def lp_limits(budget: Budget, seconds: float, nonzeros: int) -> dict[str, float | int]:
    """HiGHS options for an LP that may spend ``seconds`` (nominal in a work budget) of ``budget``."""
    if not budget.deterministic:
        return {"time_limit": max(0.1, float(seconds))}
    return {"simplex_iteration_limit": _count(seconds, simplex_iteration_s(nonzeros)),
            "ipm_iteration_limit": _count(seconds, IPM_S_PER_NONZERO * max(nonzeros, 1))}


def simplex_iteration_s(nonzeros: int) -> float:
    """Nominal seconds of one simplex iteration on a constraint matrix of ``nonzeros`` nonzeros."""
    return SIMPLEX_S_AT_10K * (max(nonzeros, 1) / 1e4) ** SIMPLEX_GROWTH


def lp_work(nonzeros: int, simplex: int, ipm: int = 0, crossover: int = 0) -> float:
    """Nominal seconds of an LP solve that took those iterations."""
    return (LP_CALL_S + (simplex + crossover) * simplex_iteration_s(nonzeros)
            + ipm * IPM_S_PER_NONZERO * max(nonzeros, 1))


def cbc_limits(budget: Budget, seconds: float, nonzeros: int) -> dict[str, float | int | None]:
    """PuLP CBC options (timeLimit, maxNodes) for a solve that may spend ``seconds`` of ``budget``."""
    if not budget.deterministic:
        return {"timeLimit": max(1.0, float(seconds)), "maxNodes": None}
    left = seconds - CBC_CALL_S - CBC_S_PER_NONZERO * nonzeros
    return {"timeLimit": None, "maxNodes": _count(left, CBC_NODE_S_PER_NONZERO * max(nonzeros, 1))}


_NODES = re.compile(r"^Enumerated nodes:\s*(\d+)", re.MULTILINE)
_ITERATIONS = re.compile(r"^Total iterations:\s*(\d+)", re.MULTILINE)


def cbc_work(log_text: str, nonzeros: int) -> float:
    """Nominal seconds of a CBC solve from its log (its node and iteration counts; none found: the call alone)."""
    nodes = _NODES.search(log_text)
    iterations = _ITERATIONS.search(log_text)
    return (CBC_CALL_S + CBC_S_PER_NONZERO * nonzeros
            + max(nonzeros, 1) * (CBC_NODE_S_PER_NONZERO * (int(nodes.group(1)) if nodes else 0)
                                  + CBC_ITERATION_S_PER_NONZERO * (int(iterations.group(1)) if iterations else 0)))


def mip_limits(budget: Budget, seconds: float, nonzeros: int) -> dict[str, float | int]:
    """HiGHS options for a MIP that may spend ``seconds`` of ``budget``."""
    if not budget.deterministic:
        return {"time_limit": max(0.1, float(seconds))}
    left = seconds - MIP_ROOT_S_PER_NONZERO * nonzeros
    return {"mip_max_nodes": _count(left, MIP_NODE_S_PER_NONZERO * max(nonzeros, 1))}


def mip_work(nonzeros: int, nodes: int) -> float:
    """Nominal seconds of a HiGHS MIP solve that explored ``nodes`` nodes."""
    return max(nonzeros, 1) * (MIP_ROOT_S_PER_NONZERO + MIP_NODE_S_PER_NONZERO * max(nodes, 0))


def watchdog_s(budget: Budget, seconds: float) -> float:
    """Wall seconds after which a CBC solve given ``seconds`` of ``budget`` is stopped as stuck."""
    return seconds * (WATCHDOG_FACTOR if budget.deterministic else 1.5) + (60.0 if budget.deterministic else 10.0)
