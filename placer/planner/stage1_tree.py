"""Stage 1's bound tree (bound_tree.py) in a forked child beside stage 2, where stage 1's MIP does not run there.

Under a short time limit the option kinds leave stage 1 a few seconds: the rounding, then the bound tree, which
raises the relaxation's bound by most of what the plan's gap is measured against, then stage 2 on both cores
(half of its portfolio in a child, stage2.py). Measured on production-856 @ dgx-h100-16node at --time-limit 30
(two cores, 5 runs, alone; docs/solver.md): where the kinds took 7.8-8.0 s, stage 1 had 9.2-9.4 s and the tree
raised the bound from 21.66 to 22.45-22.48 ms (gap 2.1-2.2%); where they took 10.4-11.0 s, stage 1 had 6.6 s, the
tree little or none of it, and the gap was 4.7% and 6.0% (bounds 21.97 and 21.66 ms). Stage 2's second variant
on the second core gains a few hundredths of a millisecond at most; the tree gains up to 0.8 ms of bound. So
where the MIP child (stage1_mip.py) is not started, the tree runs in a child from the rounding until stage 2's
end, and the parent goes straight to stage 2 with its whole portfolio, one variant after another.

Only under a time limit: under a work limit (budget.py) the plan and bound must not depend on how far a child got.
"""
from __future__ import annotations

from placer.executor import TimedChild, cores
from placer.planner.bound_tree import BoundTree
from placer.planner.budget import Budget
from placer.planner.lp import Relaxation
from placer.planner.problem import Problem
from placer.planner.schedule import SCHEDULE

#: The child's tree stops this many seconds before the time it was given ends (its last LP, the pipe); the parent
#: waits GRACE_S past the child's own limit for its answer; less than MIN_SECONDS is not worth a child (its tree
#: would not get past a split or two). All three are schedule.py's.
EARLY_S = SCHEDULE.tree_early_s
GRACE_S = SCHEDULE.tree_grace_s
MIN_SECONDS = SCHEDULE.tree_child_min_s


class BesideTree(TimedChild):
    """BoundTree(problem, relaxation).run(incumbent_s, ...) in a forked child given ``seconds`` of wall time.
    ``running`` is False where no child was started (not Linux, one core, too little time, no process);
    ``result()`` is its TreeResult, or None."""

    def __init__(self, problem: Problem, relaxation: Relaxation, incumbent_s: float, seconds: float):
        within = max(0.0, seconds - EARLY_S)
        super().__init__(lambda: BoundTree(problem, relaxation).run(incumbent_s, Budget(within)),
                         "placer-stage1-tree", seconds, GRACE_S,
                         start=seconds >= MIN_SECONDS and cores() >= 2)
