"""Branch and bound for the lower bound alone: raise the relaxation's bound by splitting where it mixes.

The relaxation of stage 1 (stage1.py) is a mixture: e.g. 61% of a plan where one table's column-wise block
sets a 2.2 ms forward phase, 39% of one where that table is row-wise over all GPUs and the exchange is
heavier. Every integer plan lies on one side of a split, so the least bound over the leaves of a tree of
splits is a valid lower bound, and it rises where the mixture was hiding a real choice. Splits tried:

* a table: its option with the largest relaxed value forced / forbidden;
* a phase time: y_p <= L (which forbids every option whose own peak in p exceeds L) / y_p >= L;
* a pigeonhole count (problem.CountRow) whose relaxed value z is fractional: z <= floor(z) / z >= ceil(z)
  (in the relaxation z is the plain average N / m, which hides the rounding up that the row stands for).

At each node the candidates are ranked by how much their mixture hides (below), the best two are tried by
solving both children (strong branching, warm-started from the last basis), and the split whose weaker child
rises most is kept. Nodes are taken best-first (the least bound), so the tree's bound is always the least open
node's. CBC's own branch and bound on this model does not move its bound in a minute (measured on
production-856 on 128 GPUs): it branches on single options, which the levels make nearly irrelevant.
"""
from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass

import numpy as np

from placer.planner.budget import Budget
from placer.planner.lp import Relaxation
from placer.planner.problem import Problem
from placer.planner.schedule import SCHEDULE


@dataclass
class _Node:
    bound_s: float
    lower: np.ndarray  # per option, 0 or 1
    upper: np.ndarray  # per option, 0 or 1
    box_lo: np.ndarray  # per phase, s
    box_hi: np.ndarray  # per phase, s (inf: open)
    count_lo: np.ndarray  # per pigeonhole row, its count's lowest value
    count_hi: np.ndarray  # ... and highest (inf: open)
    values: np.ndarray | None = None  # the node's relaxed option values (None: not solved, bound from the parent)
    times: np.ndarray | None = None  # the node's relaxed phase times, s
    counts: np.ndarray | None = None  # the node's relaxed pigeonhole counts


@dataclass
class TreeResult:
    bound_s: float  # least bound over open leaves, leaves left out within the gap, and the incumbent
    chosen: list[int] | None  # the best integral leaf (one option per group), if any beat the incumbent
    objective_s: float | None  # its objective (problem.objective)
    nodes: int  # nodes split
    lp_solves: int
    wall_s: float


class BoundTree:
    """Best-first splitting of ``problem``'s relaxation (peak levels and count rows included)."""

    def __init__(self, problem: Problem, relaxation: Relaxation | None = None, candidates: int = 2,
                 patience: int = 3, min_gain: float = 1e-4):
        self.problem = problem
        self.lp = relaxation or Relaxation(problem)
        self.peaks = problem.table_peaks()
        # strong branching on the best 2 candidates, not 3: production-856 on 128 GPUs reached 8.592 ms after 7 s
        # of splits instead of 26 (4 LPs a split instead of 6); synthetic-1000 and production-856 on 256 GPUs
        # ended at the same bound with fewer LPs
        self.candidates = candidates
        # stop once ``patience`` splits in a row raised the bound by less than ``min_gain`` (relative): on
        # synthetic-1000 on 256 GPUs the rounding is within 0.1% of the relaxation and a minute of splits
        # moved the bound by 0.1%, time that stage 2 uses better; production-856 on 128 GPUs reaches 8.5924 ms
        # at split 6 and 0.0001 ms more in the next 10 splits (so 3, not 10: that time goes to fill.py's MIP)
        self.patience, self.min_gain = patience, min_gain
        self.solves = 0

    def _solve(self, node: _Node, budget: Budget) -> None:
        """Solve ``node``'s LP in place (bound and values) within ``budget``; when that runs out first it keeps
        its parent's bound."""
        upper = node.upper * np.all(self.peaks <= node.box_hi[:, None] * (1 + 1e-12), axis=0)
        if np.any(node.lower > upper):  # an option forced and forbidden at once: no plan here
            node.bound_s, node.values = float("inf"), None
            return
        if not budget.allows(SCHEDULE.split_min_s):
            return
        self.solves += 1
        values, bound = self.lp.solve(budget, upper=upper, lower=node.lower, phase_box=(node.box_lo, node.box_hi),
                                      count_box=(node.count_lo, node.count_hi))
        if bound is not None:
            node.bound_s = max(node.bound_s, bound)
            node.values = values
            if values is not None:
                node.times, node.counts = self.lp.phase_times(), self.lp.counts()

    def _splits(self, node: _Node) -> list[tuple[_Node, _Node]]:
        """The children of the most promising splits of ``node`` (unsolved)."""
        v, y, peaks, groups = node.values, node.times, self.peaks, self.problem.groups
        out: list[tuple[float, tuple[_Node, _Node]]] = []
        # tables: how far the group's relaxed mix is from integral, times how much its options' peaks differ
        for gi, g in enumerate(groups):
            vg = v[g]
            top = int(np.argmax(vg))
            if vg[top] >= 1 - 1e-6:
                continue
            mean = peaks[:, g] @ vg
            hidden = float((np.abs(peaks[:, g] - mean[:, None]) @ vg).sum())
            force, forbid = self._child(node), self._child(node)
            force.lower[g[top]] = 1.0
            force.upper[g] = 0.0
            force.upper[g[top]] = 1.0
            forbid.upper[g[top]] = 0.0
            out.append((hidden * min(vg[top], 1 - vg[top]), (force, forbid)))
        # phase times: the relaxed weight of options whose peak is above the phase time
        for ph in range(self.problem.num_phases):
            above = (peaks[ph] > y[ph] * (1 + 1e-9)) & (v > 1e-9)
            if not above.any():
                continue
            pk, wt = peaks[ph, above], v[above]
            order = np.argsort(pk)
            cum = np.cumsum(wt[order])
            level = float(pk[order][np.searchsorted(cum, cum[-1] / 2)])  # the weighted median peak above y
            cut = level * (1 - 1e-9)
            low, high = self._child(node), self._child(node)
            low.box_hi[ph] = min(low.box_hi[ph], cut)
            high.box_lo[ph] = max(high.box_lo[ph], cut)
            out.append((float(wt @ (pk - y[ph])), (low, high)))
        # pigeonhole counts: how much rounding the count up would add to its phase
        for i, (row, z) in enumerate(zip(self.problem.counts, node.counts)):
            if z - np.floor(z) <= 1e-6 or np.ceil(z) - z <= 1e-6:
                continue
            low, high = self._child(node), self._child(node)
            low.count_hi[i] = np.floor(z)
            high.count_lo[i] = np.ceil(z)
            out.append((row.size_s * float(np.ceil(z) - z), (low, high)))
        out.sort(key=lambda t: -t[0])
        return [pair for _, pair in out[:self.candidates]]

    @staticmethod
    def _child(node: _Node) -> _Node:
        return _Node(node.bound_s, node.lower.copy(), node.upper.copy(), node.box_lo.copy(), node.box_hi.copy(),
                     node.count_lo.copy(), node.count_hi.copy())

    def run(self, incumbent_s: float, budget: Budget, gap: float = 0.0) -> TreeResult:
        """Split until ``budget`` is spent, the tree proves ``incumbent_s`` within ``gap``, nothing
        is left to split, or the bound stalls (``patience``). The root is the relaxation as given (instant if its
        last solve was the root)."""
        t0 = time.perf_counter()
        phases, n = self.problem.num_phases, self.problem.num_options
        counts = len(self.problem.counts)
        root = _Node(0.0, np.zeros(n), np.ones(n), np.zeros(phases), np.full(phases, np.inf), np.zeros(counts),
                     np.full(counts, np.inf))
        self._solve(root, budget)
        if root.values is None:
            return TreeResult(self.problem.simple_lower_bound(), None, None, 0, self.solves, time.perf_counter() - t0)
        chosen, objective = None, None
        tie = itertools.count()
        heap = [(root.bound_s, next(tie), root)]
        split = 0
        prune_at = incumbent_s * (1 - gap)
        dropped = np.inf  # the least bound of the children left out for being within the gap of the incumbent
        last_gain = (root.bound_s, 0)  # (bound, split at which it last rose by min_gain)
        while heap and heap[0][0] < prune_at and not budget.expired():
            bound, _, node = heapq.heappop(heap)
            if node.values is None:  # its LP timed out: nothing more can be learnt in time
                heapq.heappush(heap, (bound, next(tie), node))
                break
            if all(node.values[g].max() >= 1 - 1e-6 for g in self.problem.groups):  # a plan of stage 1
                leaf = [int(g[int(np.argmax(node.values[g]))]) for g in self.problem.groups]
                value = self.problem.objective(leaf)
                if value < incumbent_s:
                    chosen, objective, incumbent_s = leaf, value, value
                    prune_at = incumbent_s * (1 - gap)
            pairs = self._splits(node)
            if not pairs:  # integral, counts too: the LP's value is the plan's
                continue
            best, best_score = None, -np.inf
            for a, b in pairs:
                self._solve(a, budget)
                self._solve(b, budget)
                if a.values is None and a.bound_s == node.bound_s and b.values is None and b.bound_s == node.bound_s:
                    continue  # neither child solved (time is up)
                score = min(a.bound_s, b.bound_s) + 1e-3 * max(a.bound_s, b.bound_s)
                if score > best_score:
                    best, best_score = (a, b), score
            if best is None:
                heapq.heappush(heap, (node.bound_s, next(tie), node))
                break
            split += 1
            for child in best:
                if child.bound_s < prune_at:
                    heapq.heappush(heap, (child.bound_s, next(tie), child))
                else:
                    dropped = min(dropped, child.bound_s)
            now = min(heap[0][0] if heap else np.inf, incumbent_s, dropped)
            if now > last_gain[0] * (1 + self.min_gain):
                last_gain = (now, split)
            elif split - last_gain[1] >= self.patience:  # the bound has stalled: leave the time to others
                break
        bound = min(heap[0][0] if heap else np.inf, incumbent_s, dropped)
        return TreeResult(float(bound), chosen, objective, split, self.solves, time.perf_counter() - t0)
