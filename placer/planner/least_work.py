"""The least work a solve does, and the line that says so before it starts where the time limit cannot hold it.

Under ``--time-limit L`` a solve ends within L (plus the pricing of its plan) where it can. Some work it cannot
skip: the cost model (with the dense step traced, program/dense.py, where no trace is at hand), the cheapest
plan (greedy_size's, priced; for a forced form, the first plan of its own search) and the report. Where that is
more than L leaves, one line on stderr says so before the work starts, with its estimate, and the command
returns that plan when it is done (the ILP, and the skew what-ifs where no time is left for them, named as cut).
The estimate's constants are tuning.py's (LEAST_WORK_*, TRACE_*), re-measured by validation/tune_planner.py.
"""
from __future__ import annotations

import sys

from placer.cost import CostModel
from placer.forms.storage import FORCED_FORMS
from placer.planner.tuning import (LEAST_WORK_GPUS, LEAST_WORK_S, LEAST_WORK_S_PER_GPU, LEAST_WORK_S_PER_PAIR,
                                   TRACE_IMPORT_S, TRACE_S_PER_FEATURE, WHAT_IF_S_PER_PAIR)

#: A forced form's least work beyond the ILP's: its search's option kinds and stages up to a first plan (no
#: baseline holds a form). Measured alone: criteo-terabyte-node-local @ dgx-h100-2node, node_local at 1 s, its
#: first plan 3.2 s after the cost model.
FORCED_FIRST_PLAN_S = 3.5


def pairs(model: CostModel) -> int:
    """(table, GPU) pairs, GPUs counted up to LEAST_WORK_GPUS: what the least work and the what-ifs grow with."""
    return len(model.wl.tables) * min(len(model.topo.gpus), LEAST_WORK_GPUS)


def trace_s(model: CostModel) -> float:
    """Seconds of the dense trace still to make: 0 where it is at hand (this process, the disk cache); else
    torch's imports (where not yet done) and the traced step per feature."""
    if model.builder.dense_traced():
        return 0.0
    imported = "torch._dynamo" in sys.modules
    return (0.0 if imported else TRACE_IMPORT_S) + TRACE_S_PER_FEATURE * len(model.wl.resolved_features)


def least_work_s(model: CostModel, method: str = "ilp") -> float:
    """Estimated seconds of the least work a solve with ``method`` does (the module docstring)."""
    least = trace_s(model) + LEAST_WORK_S + first_plan_s(model)
    return least + (FORCED_FIRST_PLAN_S if method in FORCED_FORMS else 0.0)


def first_plan_s(model: CostModel) -> float:
    """Estimated seconds of the cheapest plan alone (greedy_size's, priced): what a solve whose two stages gave
    nothing still does before it can answer, where the baselines' child had no core to run on meanwhile."""
    return LEAST_WORK_S_PER_PAIR * pairs(model) + LEAST_WORK_S_PER_GPU * len(model.topo.gpus)


def what_ifs_s(model: CostModel) -> float:
    """Estimated seconds of a plan's skew what-ifs (placer/skew.py: the plan priced twice afresh)."""
    return WHAT_IF_S_PER_PAIR * pairs(model)


def say_if_short(model: CostModel, method: str, limit_s: float, left_s: float) -> bool:
    """Print the line (module docstring) where the least work of ``method`` exceeds ``left_s``, the seconds the
    --time-limit of ``limit_s`` leaves; return whether it did."""
    least = least_work_s(model, method)
    if least <= left_s:
        return False
    tables, gpus = len(model.wl.tables), len(model.topo.gpus)
    traced = "" if trace_s(model) == 0 else "the dense step's trace, "
    if method == "ilp":
        what = (f"{traced}the cost model, the greedy_size baseline and its pricing for {tables:,} tables on {gpus:,} "
                "GPUs); the command returns that baseline's plan when it is done, without the ILP")
    elif method in FORCED_FORMS:
        what = (f"{traced}the cost model and the forced {method} search's first plan for {tables:,} tables on "
                f"{gpus:,} GPUs; no baseline holds a form); the command returns that plan when it is done")
    else:
        what = (f"{traced}the cost model, the {method} plan and its pricing for {tables:,} tables on {gpus:,} GPUs); "
                "the command returns that plan when it is done")
    print(f"placer: the --time-limit of {limit_s:g} s leaves {max(left_s, 0.0):.1f} s, less than the least work "
          f"here takes (about {least:.0f} s: {what}", file=sys.stderr, flush=True)
    return True
