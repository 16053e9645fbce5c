"""The LP relaxation of a Problem (problem.py) in HiGHS, built as a sparse matrix and kept for re-solves.

The same rows as ilp._build with every variable continuous: options x in [0, 1], phase times y >= 0 (ms),
peak-level variables w in [0, 1], pigeonhole counts z >= 0. Re-solving after a change of bounds (an option
forbidden or forced, a phase time boxed) starts from the last basis, which is what branch and bound on the
bound (bound_tree.py) needs: a child LP takes a fraction of the root's time.
Times are milliseconds and memory GiB inside, as in ilp.py; results come back in seconds.
"""
from __future__ import annotations

import highspy
import numpy as np
import scipy.sparse as sp

from placer.planner import effort
from placer.planner.budget import Budget
from placer.planner.highs_banner import new_highs
from placer.planner.ilp import MEM_SCALE, TIME_SCALE
from placer.planner.problem import CountRow, PeakLevels, Problem

INF = highspy.kHighsInf


class _Rows:
    """Sparse rows collected as (row, column, value) triplets with their bounds."""

    def __init__(self):
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, cols, vals, lo: float, hi: float = INF) -> None:
        cols = np.asarray(cols, dtype=np.int64)
        self.r.append(np.full(len(cols), len(self.lo), dtype=np.int64))
        self.c.append(cols)
        self.v.append(np.asarray(vals, dtype=np.float64))
        self.lo.append(lo)
        self.hi.append(hi)

    def matrix(self, num_cols: int) -> sp.csr_matrix:
        return sp.csr_matrix((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                             shape=(len(self.lo), num_cols))


def _level_rows(lv: PeakLevels, y: int, w0: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """The rows of one phase's peak levels, whose w variables are columns ``w0``... (the phase times from
    column ``y``): y_phase >= floor + sum_j step_j w_j, the chain w_j >= w_{j+1}, and w_j >= each group's
    options that reach level j. As (columns, values, lower bound), in ms."""
    count = len(lv.steps_s)
    out = [(np.concatenate([[y + lv.phase], np.arange(w0, w0 + count)]),
            np.concatenate([[1.0], -np.asarray(lv.steps_s) * TIME_SCALE]), lv.floor_s * TIME_SCALE)]
    out += [(np.array([w0 + j, w0 + j + 1]), np.array([1.0, -1.0]), 0.0) for j in range(count - 1)]
    for j, per_group in enumerate(lv.members):
        for ids in per_group:
            out.append((np.concatenate([[w0 + j], ids]), np.concatenate([[1.0], -np.ones(len(ids))]), 0.0))
    return out


class Relaxation:
    """The LP relaxation of ``problem``, solved and re-solved in one HiGHS instance."""

    def __init__(self, problem: Problem):
        self.problem = problem
        n, phases = problem.num_options, problem.num_phases
        self.n, self.phases = n, phases
        y = n  # first phase-time column
        rows = _Rows()
        for group in problem.groups:
            rows.add(group, np.ones(len(group)), 1.0, 1.0)
        num_cols = n + phases
        upper_extra: list[float] = []
        fixed_terms: dict[tuple[int, str], list[tuple[int, float]]] = {}  # row -> [(u column, -seconds)]
        for fg in problem.fixed_groups:  # u_f in [0, 1], at least each table's share of the options using f
            u = num_cols
            num_cols += 1
            upper_extra.append(1.0)
            for ids in fg.members:
                rows.add(np.concatenate([[u], ids]), np.concatenate([[1.0], -np.ones(len(ids))]), 0.0)
            for key, seconds in fg.charges.items():
                fixed_terms.setdefault(key, []).append((u, -seconds * TIME_SCALE))

        def load_row(key, ids, coef, extra_cols=(), extra_vals=()):
            terms = fixed_terms.get(key, [])
            cols = np.concatenate([[y + key[0]], list(extra_cols), [c for c, _ in terms], ids])
            vals = np.concatenate([[1.0], list(extra_vals), [v for _, v in terms], -coef * TIME_SCALE])
            rows.add(cols, vals, problem.load_base.get(key, 0.0) * TIME_SCALE)

        empty = (np.zeros(0, dtype=np.int64), np.zeros(0))
        for key in list(problem.load_rows) + [k for k in fixed_terms if k not in problem.load_rows]:
            if key in problem.spread_rows and key[0] in problem.spread:
                continue  # added with its s_phase below
            load_row(key, *problem.load_rows.get(key, empty))
        y_floor = np.zeros(phases)
        for (ph, _), v in problem.load_base.items():
            y_floor[ph] = max(y_floor[ph], v * TIME_SCALE)
        for lv in problem.levels:
            upper_extra += [1.0] * len(lv.steps_s)
            for cols, vals, lo in _level_rows(lv, y, num_cols):
                rows.add(cols, vals, lo)
            num_cols += len(lv.steps_s)
        spread_col = {}  # phase -> its column s_phase = the loads every member carries alike (problem.spread)
        for ph, (ids, coef) in problem.spread.items():
            spread_col[ph] = num_cols
            num_cols += 1
            upper_extra.append(INF)
            rows.add(np.concatenate([[spread_col[ph]], ids]), np.concatenate([[1.0], -coef * TIME_SCALE]), 0.0)
        for key in sorted(problem.spread_rows):  # sorted: a frozenset iterates in hash order (types.RowKey: by name)
            if key[0] in spread_col:
                load_row(key, *problem.load_rows[key], extra_cols=[spread_col[key[0]]], extra_vals=[-1.0])
        self.count_cols: list[int] = []  # the count variable z of each pigeonhole row, in problem.counts order
        for row in problem.counts:
            z = num_cols
            num_cols += 1
            upper_extra.append(INF)
            self.count_cols.append(z)
            for cols, vals, lo in self._count_rows(row, z):
                rows.add(cols, vals, lo)
        for m, (ids, b) in problem.mem_rows.items():
            rows.add(ids, b * MEM_SCALE, -INF, problem.mem_capacity[m] * MEM_SCALE)
        a = rows.matrix(num_cols)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = num_cols, a.shape[0]
        cost = np.zeros(num_cols)
        cost[y:y + phases] = 1.0
        lp.col_cost_ = cost
        self.col_lower = np.zeros(num_cols)
        self.col_lower[y:y + phases] = y_floor
        self.col_upper = np.concatenate([np.ones(n), np.full(phases, INF), upper_extra])
        lp.col_lower_, lp.col_upper_ = self.col_lower, self.col_upper
        lp.row_lower_, lp.row_upper_ = np.asarray(rows.lo), np.asarray(rows.hi)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = a.indptr, a.indices, a.data
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = num_cols, a.shape[0]
        self.highs = new_highs()
        self.highs.passModel(lp)
        self.nonzeros = int(a.nnz)  # grows with add_counts; what a simplex iteration costs scales with it
        self.solved_once = False
        self.iterations = 0

    def _count_rows(self, row: CountRow, z: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """The two rows of a pigeonhole count with its count variable in column ``z``: (columns, values,
        lower bound)."""
        return [(np.concatenate([[self.n + row.phase, z], row.spread_ids]),
                 np.concatenate([[1.0, -row.size_s * TIME_SCALE], -row.spread_coefs * TIME_SCALE]),
                 row.base_s * TIME_SCALE),
                (np.concatenate([[z], row.ids]), np.concatenate([[float(row.slots)], -row.counts.astype(float)]), 0.0)]

    def add_levels(self, levels: list[PeakLevels]) -> None:
        """Add peak levels (problem.PeakLevels: the caller adds them to the problem too) without losing the
        basis: the next solve starts the dual simplex from the last optimum (production-856 on 128 GPUs: 0.7 s,
        where the interior point method on the same LP built afresh took 2.9 s)."""
        rows = _Rows()
        for lv in levels:
            w0 = self._add_cols(len(lv.steps_s), 1.0)
            for cols, vals, lo in _level_rows(lv, self.n, w0):
                rows.add(cols, vals, lo)
        self._add_rows(rows)

    def add_counts(self, counts: list[CountRow]) -> None:
        """Add pigeonhole rows (as the problem gains them) without losing the basis, as add_levels does."""
        rows = _Rows()
        for row in counts:
            z = self._add_cols(1, INF)
            self.count_cols.append(z)
            for cols, vals, lo in self._count_rows(row, z):
                rows.add(cols, vals, lo)
        self._add_rows(rows)

    def _add_cols(self, count: int, upper: float) -> int:
        """Append ``count`` columns in [0, ``upper``] of zero cost and no entries yet; returns the first one."""
        first = len(self.col_lower)
        self.highs.addCols(count, np.zeros(count), np.zeros(count), np.full(count, upper), 0,
                           np.zeros(count, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        self.col_lower = np.append(self.col_lower, np.zeros(count))
        self.col_upper = np.append(self.col_upper, np.full(count, upper))
        return first

    def _add_rows(self, rows: _Rows) -> None:
        """Append ``rows`` (over the columns there are now) to the model in one call."""
        if not rows.lo:
            return
        a = rows.matrix(len(self.col_lower))
        self.highs.addRows(a.shape[0], np.asarray(rows.lo), np.asarray(rows.hi), a.nnz,
                           a.indptr[:-1].astype(np.int32), a.indices.astype(np.int32), a.data)
        self.nonzeros += int(a.nnz)

    def solve(self, budget: Budget | float, upper: np.ndarray | None = None, lower: np.ndarray | None = None,
              phase_box: tuple[np.ndarray, np.ndarray] | None = None,
              count_box: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray | None, float | None]:
        """(value of every option, optimal value in s) under option bounds ``lower``/``upper`` (arrays of
        num_options in [0, 1]; default [0, 1]), phase times in ``phase_box`` = (lowest, highest) s per phase
        (default: from the base loads up) and pigeonhole counts in ``count_box`` = (lowest, highest) per count
        row (default: 0 up), within ``budget`` (or that many wall seconds): what it has left, as a time limit
        or, in a work budget, as iteration limits (effort.py), charged with the iterations done. (None, inf)
        if infeasible, (None, None) if not solved within the budget. The first solve
        uses the interior point method (with crossover, so later solves have a basis); later ones warm-start
        the dual simplex from the last basis."""
        h, n, phases = self.highs, self.n, self.phases
        lo = self.col_lower.copy()
        hi = self.col_upper.copy()
        if upper is not None:
            hi[:n] = upper
        if lower is not None:
            lo[:n] = lower
        if phase_box is not None:
            lo[n:n + phases] = np.maximum(lo[n:n + phases], phase_box[0] * TIME_SCALE)
            hi[n:n + phases] = np.where(np.isfinite(phase_box[1]), phase_box[1] * TIME_SCALE, INF)
        if count_box is not None:
            cols = np.asarray(self.count_cols, dtype=np.int64)
            lo[cols] = count_box[0]
            hi[cols] = np.where(np.isfinite(count_box[1]), count_box[1], INF)
        h.changeColsBounds(len(lo), np.arange(len(lo), dtype=np.int32), lo, hi)
        if not isinstance(budget, Budget):
            budget = Budget(float(budget))
        for option, value in effort.lp_limits(budget, budget.left(), self.nonzeros).items():
            h.setOptionValue(option, h.getRunTime() + value if option == "time_limit" else value)  # HiGHS counts
            # the time of all runs, and the iterations of this one
        h.setOptionValue("solver", "simplex" if self.solved_once else "ipm")
        h.run()
        info = h.getInfo()
        budget.charge(effort.lp_work(self.nonzeros, info.simplex_iteration_count, info.ipm_iteration_count,
                                     info.crossover_iteration_count))
        status = h.getModelStatus()
        if status == highspy.HighsModelStatus.kInfeasible:
            return None, float("inf")
        if status != highspy.HighsModelStatus.kOptimal:
            budget.note_ran_out()  # stopped by its time or iteration limit
            return None, None
        self.solved_once = True
        self.iterations += info.simplex_iteration_count
        values = np.clip(np.asarray(h.getSolution().col_value[:n]), 0.0, 1.0)
        return values, info.objective_function_value / TIME_SCALE + self.problem.fixed_s

    def counts(self) -> np.ndarray:
        """The pigeonhole counts z of the last solve, in problem.counts order."""
        return np.asarray(self.highs.getSolution().col_value)[np.asarray(self.count_cols, dtype=np.int64)]

    def phase_times(self) -> np.ndarray:
        """The phase times (s) of the last solve."""
        return np.asarray(self.highs.getSolution().col_value[self.n:self.n + self.phases]) / TIME_SCALE
