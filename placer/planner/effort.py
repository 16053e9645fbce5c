"""What the planner's work costs in nominal seconds, and the limits a solver gets from a budget (budget.py).

In a work budget the clock moves only by what the stages charge: counted effort (simplex iterations, branch-and-
bound nodes, tables visited, options priced) times a rate in nominal seconds. The rates are the wall seconds that
effort took on the reference machine (the project's 2-core VM), fitted to the solves of production-856 @
dgx-h100-16node and mlperf-dlrm-v2 @ dgx-h100-2node (a plan solved under a work limit records both per stage:
solver.stage_work in units, solver.stage_times_s in wall seconds); they need not be exact, only deterministic and
roughly proportional to the time, so that a work limit of N units searches about as far as N milliseconds do there.

For the solvers, ``lp_limits``, ``cbc_limits`` and ``mip_limits`` turn the nominal seconds a stage may spend into
the solver's own options: a time limit in a time budget; iteration or node limits (and no time limit) in a work
budget. The ``*_work`` functions give the nominal seconds of what a solve did, to charge.
"""
from __future__ import annotations

import math
import re

from placer.planner.budget import Budget

#: HiGHS: nominal seconds per LP solve; per dual simplex (or crossover) iteration, SIMPLEX_S_AT_10K at 10,000
#: nonzeros in the constraint matrix, growing as (nonzeros / 10,000) ** SIMPLEX_GROWTH (an iteration touches a
#: sparse part of it); per interior point iteration per nonzero. Measured: simplex 75 iterations on 13,886
#: nonzeros 5 ms (67 us each), 1,626 on 326,708 0.65 s and the branch-and-bound splits' re-solves on 326,874
#: 0.3-0.4 ms each; IPM 45 iterations (and 29 of crossover) on 281,229 nonzeros 1.37 s (1.0e-7), 30 on 13,885
#: 0.061 s (1.5e-7).
LP_CALL_S = 1e-3
SIMPLEX_S_AT_10K = 5.6e-5
SIMPLEX_GROWTH = 0.55
IPM_S_PER_NONZERO = 1.1e-7
#: CBC (a subprocess via PuLP): nominal seconds per call (start, files), per nonzero (written, read, presolved),
#: per simplex iteration per nonzero, and per branch-and-bound node per nonzero (its iterations counted apart).
#: Measured: 281,233 nonzeros, 5 nodes, 395 iterations 0.91 s; 11,258 nonzeros, 49 iterations 0.095 s.
CBC_CALL_S = 0.06
CBC_S_PER_NONZERO = 2.5e-6
CBC_ITERATION_S_PER_NONZERO = 2e-9
CBC_NODE_S_PER_NONZERO = 2e-8
#: HiGHS branch and bound: nominal seconds per node per nonzero, and for the root per nonzero.
MIP_NODE_S_PER_NONZERO = 1e-7
MIP_ROOT_S_PER_NONZERO = 2e-6
#: Stage 2 (assign.py): nominal seconds per scoring of a kind's candidate devices, per (candidate device, own load
#: or memory) scored, per (candidate device, fused group) checked, and per resource load of a placement priced
#: exactly. Measured against the wall time of the assignment: 1.0x on production-856 @ dgx-h100-16node, 0.5x on
#: mlperf-dlrm-v2 @ dgx-h100-2node before the per-call term.
SCORE_CALL_S = 2e-5
SCORE_S_PER_ENTRY = 2e-7
GROUP_S_PER_ENTRY = 4e-7
PRICING_S_PER_LOAD = 1e-6
#: Stage 2's searches: nominal seconds per pair of tables compared (swap.py, in numpy since be0e6b9: 3.3x faster
#: than pair by pair), per partner GPU of a repacking (repack.py), and per potential computed (rekind.py), per
#: resource load.
SWAP_S_PER_PAIR = 7.5e-7
REPACK_S_PER_PARTNER = 1e-4
POTENTIAL_S_PER_LOAD = 1e-8
#: The local tie-break (tiebreak_local.py): nominal seconds per option priced.
TIE_BREAK_OPTION_S = 2e-3
#: What the two-stage planner does before its search (the cost model, the option kinds), deterministic, charged
#: per (table, GPU) pair so that a work limit splits like a time limit: production-856 @ dgx-h100-16node, 109,568
#: pairs, 2.1 s + 6.5 s.
SETUP_S_PER_PAIR = 8e-5

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
