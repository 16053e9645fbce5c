"""Stage 1's whole MIP, solved by HiGHS in a forked child while the parent goes on (two_stage.py).

Stage 1 (stage1.py) rounds its relaxation and raises the relaxation's bound by splitting it (bound_tree.py), which
stalls short of the aggregated problem's optimum; HiGHS's branch and bound on the same rows less the peak levels
(pigeonhole counts included), started from the rounding as an objective cutoff, proves the optimum outright where
it has the time. Measured on production-856 @ dgx-h100-16node (one core of two, the MPS of stage 1's
problem after a 30 s stage 1): HiGHS 1.15 proved 22.556 ms in 17.7 s without the levels and in 30-34 s with them
(cuts at the root 16 s, strong branching 11 s, then 5-7 nodes; the same optimum under three seeds, with and
without restarts and heuristics), where the bound tree stops at 22.499 ms and the rounding chooses 22.612 ms;
stage 2 (12 s) made 22.848 ms of its choice and 22.893 ms of the rounding's. So the child runs beside the bound
tree and stage 2 on the rounding's choice, on the second core, and its choice goes through stage 2 when it is
better; its bound counts whether or not it finished (HiGHS's dual bound is valid at any stop, and the problem
without levels is a relaxation of stage 1's). The child's problem also counts the fused groups that options on
single GPUs open (stage1_groups.py: rows that hold for every plan, not a relaxation of stage 1's but stronger):
there HiGHS proved 22.603 ms instead of 22.556 ms in 19 s on one core (16 s without them), and at --time-limit
60 the child answered after about 20 s of its 28.

Only under a time limit: under a work limit (budget.py) a plan must not depend on how far a child got, and HiGHS's
root (where most of its time goes) has no deterministic limit short of its node count.
"""
from __future__ import annotations

import dataclasses

from placer.executor import TimedChild
from placer.planner import ilp
from placer.planner.budget import Budget
from placer.planner.problem import GroupCounts, Problem
from placer.planner.schedule import SCHEDULE

#: HiGHS's relative gap in the child: its bound is what matters, and once the tree closes it closes fully.
GAP = 1e-4
#: HiGHS options in the child: no restart after the root (17.7 s where the default took 20.2 s, same optimum).
OPTIONS = {"mip_allow_restart": False}
#: The share of its window the parent's work (stage 2 on stage 1's own choice) keeps even when the child's answer
#: comes sooner, and the seconds the parent waits past the child's own limit: schedule.py's (the child is started
#: only with at least SCHEDULE.mip_min_s for it).
WINDOW_FLOOR = SCHEDULE.mip_window_floor
GRACE_S = SCHEDULE.mip_grace_s


class BesideMip(TimedChild):
    """HiGHS on stage 1's ``problem`` from ``start`` (one option id per group) in a forked child, given
    ``seconds`` of wall time. ``running`` is False where no child could be had (not Linux, no process)."""

    def __init__(self, problem: Problem, start: list[int], seconds: float, counts: list[GroupCounts] = ()):
        # HiGHS: 17.7 s without the levels, 34 s with; ``counts`` (stage1_groups.py) join the rows
        self.problem = dataclasses.replace(problem, levels=[], group_counts=list(counts))
        super().__init__(lambda: ilp.solve(self.problem, backend="highs", gap=GAP, warm_start=start,
                                           budget=Budget(seconds), highs_options=OPTIONS),
                         "placer-stage1-mip", seconds, GRACE_S)

    def window(self, parent: Budget) -> Budget:
        """A child of ``parent`` (wall clock) for what the parent does while it waits: it ends when the child's
        limit does, or once the child's answer is there if half of it has passed (WINDOW_FLOOR)."""
        return _UntilReady(self, SCHEDULE.mip_window_s(self.seconds_left(), parent), stages=parent.stages,
                           clock=parent.clock,
                           stage_work=parent.stage_work, shared=parent.shared)


class _UntilReady(Budget):
    """A Budget that is spent once ``mip``'s answer is there (BesideMip.window); ``cut`` tells whether that
    ended it before its time."""

    def __init__(self, mip: BesideMip, seconds: float, **kwargs):
        super().__init__(seconds, **kwargs)
        self.mip = mip
        self.cut = False

    def _remaining(self) -> float:
        left = super()._remaining()
        if left > 0 and left < (1 - WINDOW_FLOOR) * self.seconds and self.mip.ready():
            self.cut = True
            return 0.0
        return left
