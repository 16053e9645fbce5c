"""The planner's fitted constants: each entry its value, its unit, what it is for, and the command that re-derives
it by measurement (``TABLE``). The modules that use them import them from here; the split of a limit among the
stages (shares, floors, reserves, graces) is schedule.py's.

Re-deriving: ``python3 validation/tune_planner.py GROUP`` measures a group on the reference machine (two
cores, run alone: timing is a benchmark), prints a table of the current and the measured values and
writes JSON with the command, commit, machine, versions and date; ``--tiny`` runs it on the tiny workload in
seconds (to check that it runs, not to fit). The figures quoted below are the measurements the values were set
from; where they were made by hand, the script's group is what reproduces them now.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fitted:
    """One fitted constant: its value, unit, what it is for and the command that re-derives it."""

    name: str
    value: float
    unit: str
    what: str
    script: str


#: Every fitted constant by name (the module-level names below hold the same values).
TABLE: dict[str, Fitted] = {}

_SCRIPT = "validation/tune_planner.py"


def _fit(name: str, value: float, unit: str, group: str, what: str) -> float:
    TABLE[name] = Fitted(name, value, unit, what, f"python3 {_SCRIPT} {group}")
    return value


# ---- what a solve costs around its search (solve.py), measured on the reference machine: `tune_planner.py least-work`,
# `what-if`, `options`, `after-solve`

#: The least work of a solve under a time limit (the cost model, greedy_size and its pricing) is estimated as
#: LEAST_WORK_S + LEAST_WORK_S_PER_PAIR per (table, GPU) pair, GPUs counted up to LEAST_WORK_GPUS (greedy_size
#: tries every GPU up to 8, then picks by symmetry), + LEAST_WORK_S_PER_GPU per GPU (routes, found once per node
#: position: topology.NodeSymmetry; they were a search per GPU, 28 s on 1,024 GPUs). Measured loaded:
#: production-856 @ dgx-h100 3.0 s, @ dgx-h100-16node 5.6 s, synthetic-1000 @ dgx-h100-32node 10.9 s, 10,000
#: small tables @ dgx-h100 28 s; tiny @ 1,024 GPUs 2.6 s alone after the routing change (issue 47).
LEAST_WORK_S = _fit("LEAST_WORK_S", 1.5, "s", "least-work", "fixed part of the least work of a solve")
LEAST_WORK_S_PER_PAIR = _fit("LEAST_WORK_S_PER_PAIR", 3.5e-4, "s per (table, GPU) pair", "least-work",
                             "least work per pair, GPUs counted up to LEAST_WORK_GPUS")
LEAST_WORK_GPUS = int(_fit("LEAST_WORK_GPUS", 16, "GPUs", "least-work",
                           "GPUs counted per table in the least work and the what-ifs"))
LEAST_WORK_S_PER_GPU = _fit("LEAST_WORK_S_PER_GPU", 2.5e-3, "s per GPU", "least-work",
                            "least work of the routes and the per-GPU ops")
#: The dense trace where no trace is at hand (program/dense.py, trace_cache.py): torch's import and its
#: optimizer's (torch._dynamo), then the traced step per feature. Measured alone, a fresh process each: tiny
#: (7 features) 4.18 s, criteo-kaggle-dlrm (26) 3.89 s, production-856 (856) 5.09 s, synthetic-1000 (1,000)
#: 5.06 s; traced again in the same process 0.06, 0.08, 1.09 and 2.22 s (issue 47).
TRACE_IMPORT_S = _fit("TRACE_IMPORT_S", 4.0, "s", "trace", "torch's imports before the first dense trace")
TRACE_S_PER_FEATURE = _fit("TRACE_S_PER_FEATURE", 2e-3, "s per feature", "trace",
                           "the dense trace per feature")
#: The skew what-ifs (placer/skew.py, two pricings afresh) per (table, GPU) pair, GPUs counted up to
#: LEAST_WORK_GPUS. Measured loaded: production-856 @ dgx-h100 1.6-1.85 s, @ dgx-h100-16node 3.4 s,
#: synthetic-1000 @ dgx-h100-32node 5.8 s, 10,000 small tables @ dgx-h100 23 s.
WHAT_IF_S_PER_PAIR = _fit("WHAT_IF_S_PER_PAIR", 2.8e-4, "s per (table, GPU) pair", "what-if",
                          "the skew what-ifs, skipped where the limit cannot hold them")
#: The single-stage ILP's options and baselines before its search: production-856 @ cpu-server (1,712 pairs)
#: 8.6 s loaded. With LEAST_WORK_S and 2 x WHAT_IF_S_PER_PAIR per pair, what must fit in the limit before the
#: ILP is tried; else the cheapest baseline.
OPTIONS_S_PER_PAIR = _fit("OPTIONS_S_PER_PAIR", 5e-3, "s per (table, GPU) pair", "options",
                          "the single-stage ILP's options and baselines")
#: Kept of a large solve's limit for what follows the solve (the plan priced again with its report, its skew
#: what-ifs): AFTER_SOLVE_S + AFTER_SOLVE_S_PER_PAIR per pair, at most AFTER_SOLVE_MAX_S. Measured alone from the
#: solve's end to the command's exit on the reference machine: about 2.1 s on production-856 @ dgx-h100 (6,848
#: pairs), 3.6-4.6 s on production-856 @ dgx-h100-16node (109,568), 2.9-3.3 s on synthetic-1000 @
#: dgx-h100-32node (256,000): it follows the plan's shards more than the pairs, hence the cap.
AFTER_SOLVE_S = _fit("AFTER_SOLVE_S", 2.0, "s", "after-solve", "fixed part of what follows the solve")
AFTER_SOLVE_S_PER_PAIR = _fit("AFTER_SOLVE_S_PER_PAIR", 1.6e-5, "s per (table, GPU) pair", "after-solve",
                              "what follows the solve, per pair")
AFTER_SOLVE_MAX_S = _fit("AFTER_SOLVE_MAX_S", 4.2, "s", "after-solve", "the most kept for what follows the solve")

# ---- priorities of the children beside the two stages: `tune_planner.py nice`

#: The baselines' child beside a two-stage solve (its result is read only at the end). Not 19: beside two busy
#: processes a child at 19 starved and a work-limited solve waited minutes for it; alone, 19 gave the option kinds
#: 1.5 s back (7.0 -> 5.5 s).
BASELINES_NICE = int(_fit("BASELINES_NICE", 10, "niceness", "nice", "the baselines' child beside the two stages"))
#: Stage 2's child (half of its portfolio): more than the baselines' child, whose plans the command waits for
#: (synthetic-1000 @ dgx-h100-32node, 60 s: at niceness 0 the command waited 4.9 s for the baselines after stage 2
#: and ended after 58.7 s; at 15, 0.0 s and 53.9 s).
STAGE2_CHILD_NICE = int(_fit("STAGE2_CHILD_NICE", 15, "niceness", "nice", "stage 2's child"))

# ---- the work meter's rates (effort.py): nominal seconds per unit of counted effort, the wall seconds that effort
# took on the reference machine, fitted to the solves of production-856 @ dgx-h100-16node and mlperf-dlrm-v2 @
# dgx-h100-2node (solver.stage_work against solver.stage_times_s): `tune_planner.py effort`

#: HiGHS: per LP solve; per dual simplex (or crossover) iteration at 10,000 nonzeros, growing as (nonzeros /
#: 10,000) ** SIMPLEX_GROWTH; per interior point iteration per nonzero. Measured: simplex 75 iterations on 13,886
#: nonzeros 5 ms, 1,626 on 326,708 0.65 s; IPM 45 iterations (and 29 of crossover) on 281,229 nonzeros 1.37 s.
LP_CALL_S = _fit("LP_CALL_S", 1e-3, "s per LP solve", "effort", "HiGHS LP call")
SIMPLEX_S_AT_10K = _fit("SIMPLEX_S_AT_10K", 5.6e-5, "s per iteration", "effort", "simplex iteration at 10k nonzeros")
SIMPLEX_GROWTH = _fit("SIMPLEX_GROWTH", 0.55, "exponent", "effort", "simplex iteration's growth with nonzeros")
IPM_S_PER_NONZERO = _fit("IPM_S_PER_NONZERO", 1.1e-7, "s per iteration per nonzero", "effort",
                         "interior point iteration")
#: CBC (a subprocess via PuLP): per call, per nonzero (written, read, presolved), per simplex iteration per
#: nonzero, per node per nonzero. Measured: 281,233 nonzeros, 5 nodes, 395 iterations 0.91 s; 11,258 nonzeros,
#: 49 iterations 0.095 s.
CBC_CALL_S = _fit("CBC_CALL_S", 0.06, "s per call", "effort", "CBC call")
CBC_S_PER_NONZERO = _fit("CBC_S_PER_NONZERO", 2.5e-6, "s per nonzero", "effort", "CBC model in and out")
CBC_ITERATION_S_PER_NONZERO = _fit("CBC_ITERATION_S_PER_NONZERO", 2e-9, "s per iteration per nonzero", "effort",
                                   "CBC simplex iteration")
CBC_NODE_S_PER_NONZERO = _fit("CBC_NODE_S_PER_NONZERO", 2e-8, "s per node per nonzero", "effort", "CBC node")
#: HiGHS branch and bound: per node per nonzero, and for the root per nonzero.
MIP_NODE_S_PER_NONZERO = _fit("MIP_NODE_S_PER_NONZERO", 1e-7, "s per node per nonzero", "effort", "HiGHS MIP node")
MIP_ROOT_S_PER_NONZERO = _fit("MIP_ROOT_S_PER_NONZERO", 2e-6, "s per nonzero", "effort", "HiGHS MIP root")
#: Stage 2 (assign.py): per scoring of a kind's candidate devices, per (candidate device, own load or memory)
#: scored, per (candidate device, fused group) checked, per resource load of a placement priced exactly.
#: Measured against the wall time of the assignment: 1.0x on production-856 @ dgx-h100-16node.
SCORE_CALL_S = _fit("SCORE_CALL_S", 2e-5, "s per scoring", "effort", "stage 2: one scoring of a kind's devices")
SCORE_S_PER_ENTRY = _fit("SCORE_S_PER_ENTRY", 2e-7, "s per entry", "effort", "stage 2: a (device, load) scored")
GROUP_S_PER_ENTRY = _fit("GROUP_S_PER_ENTRY", 4e-7, "s per entry", "effort", "stage 2: a (device, group) checked")
PRICING_S_PER_LOAD = _fit("PRICING_S_PER_LOAD", 1e-6, "s per load", "effort", "stage 2: exact pricing")
#: Stage 2's searches: per pair of tables compared (swap.py, in numpy), per partner GPU of a repacking
#: (repack.py), per potential computed per resource load (rekind.py).
SWAP_S_PER_PAIR = _fit("SWAP_S_PER_PAIR", 7.5e-7, "s per pair", "effort", "swaps")
REPACK_S_PER_PARTNER = _fit("REPACK_S_PER_PARTNER", 1e-4, "s per partner GPU", "effort", "repacking")
POTENTIAL_S_PER_LOAD = _fit("POTENTIAL_S_PER_LOAD", 1e-8, "s per load", "effort", "kind changes")
#: The local tie-break (tiebreak_local.py): per option priced.
TIE_BREAK_OPTION_S = _fit("TIE_BREAK_OPTION_S", 2e-3, "s per option", "effort", "local tie-break")
#: The two-stage planner's setup (the cost model, the option kinds), charged per (table, GPU) pair so that a work
#: limit splits like a time limit: production-856 @ dgx-h100-16node, 109,568 pairs, 2.1 s + 6.5 s.
SETUP_S_PER_PAIR = _fit("SETUP_S_PER_PAIR", 8e-5, "s per (table, GPU) pair", "effort", "two-stage setup")

# ---- the models' fitted parameters

#: stage1_groups.py: the level of a stream's own load in GroupCounts, as a multiple of the average stream's under
#: the start's choice. Measured with stage 1's MIP as stage1_mip.py runs it (HiGHS 1.16, production-856 @
#: dgx-h100-16node, the rounding's choice as start): 22.556 ms without the counts (16 s on one core); with the
#: backward phase's group types counted, 22.608 ms at level 1.1, 22.606 at 1.15, 22.602-22.604 at 1.2, in 23-40 s;
#: one level at 1.01 gave only 22.565 ms. `tune_planner.py group-level`
GROUP_LEVEL = _fit("GROUP_LEVEL", 1.2, "x the average stream's own load", "group-level",
                   "the level of GroupCounts: a higher one is a weaker row, a lower one lets plans escape over it")
#: tiebreak.py: the weight of the step time (normalised by the first plan's) in the second objective, beside
#: the share of lookups from slow memory (in %): small enough that any fewer slow lookups win, large enough to
#: break ties between plans with as many. `tune_planner.py step-weight`
STEP_WEIGHT = _fit("STEP_WEIGHT", 1e-4, "per unit of normalised step time", "step-weight",
                   "the tie-break's weight of the step time")
