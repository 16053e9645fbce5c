"""Solve a Problem (problem.py) as a mixed-integer program with PuLP: CBC (default) or HiGHS.

Honest status: 'optimal' only when the solver proved optimality within the requested relative gap;
a time-limited incumbent is 'feasible', reported with the gap to the best valid lower bound known
(the solver's own bound where it reports one, else the LP relaxation, never less than the resource bound).
Times are scaled to milliseconds and memory to GiB inside the model to keep coefficients near 1.
"""
from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import time
from dataclasses import dataclass

import highspy
import numpy as np
import pulp

from placer.errors import SolverError
from placer.limits import MAX_TIME_LIMIT_S
from placer.planner import effort
from placer.planner.budget import Budget
from placer.planner.highs_banner import swallow_banner
from placer.planner.problem import GroupCounts, Problem
from placer.planner.progress import CbcLogTerminal, Tracker, highs_callback
from placer.planner.schedule import SCHEDULE
from placer.process import Watchdog

TIME_SCALE = 1e3  # seconds -> milliseconds in the model
MEM_SCALE = 2.0**-30  # bytes -> GiB in the model
SOLVERS = ("cbc", "highs")
# CBC prunes a node whose bound is within its cutoff increment (default 1e-5, here in ms) of the incumbent, so
# with gap 0 it could stop on a choice up to 1e-5 ms worse than the optimum (hypothesis found 0.133721 vs
# 0.133711 ms); an exact solve asks for a finer increment, below the rows' feasibility tolerance (1e-7 ms)
EXACT_CBC_OPTIONS = ["increment 1e-9"]


@dataclass
class IlpResult:
    chosen: list[int] | None  # one option id per group, or None when no solution
    status: str  # optimal | feasible | infeasible | no_solution
    objective_s: float | None
    lower_bound_s: float
    wall_s: float
    num_variables: int
    num_constraints: int
    warm_start: str
    backend: str


def _set_start(problem: Problem, prob: pulp.LpProblem, x, y, chosen: list[int]) -> None:
    """Initial values of every variable for a start: the options, and the phase times, level and count
    variables that follow from them. (CBC 2.10 still crashes on some starts of models with peak levels;
    the two-stage planner gives starts only to models without them.)"""
    picked = set(chosen)
    for i, var in enumerate(x):
        var.setInitialValue(1.0 if i in picked else 0.0)
    for var, seconds in zip(y, problem.phase_times(chosen)):
        var.setInitialValue(float(seconds) * TIME_SCALE)
    named = {v.name: v for v in prob.variables() if v.name[0] in "wzusoc"}
    for n, lv in enumerate(problem.levels):
        reached = False
        for j in reversed(range(len(lv.members))):  # the chain: reaching a level reaches every lower one
            reached = reached or any(int(i) in picked for ids in lv.members[j] for i in ids)
            named[f"w{n}_{j}"].setInitialValue(1.0 if reached else 0.0)
    xs = np.zeros(problem.num_options)
    xs[chosen] = 1.0
    for n, row in enumerate(problem.counts):
        named[f"z{n}"].setInitialValue(float(np.ceil(float(row.counts @ xs[row.ids]) / row.slots - 1e-9)))
    for n, fg in enumerate(problem.fixed_groups):
        named[f"u{n}"].setInitialValue(fg.used(xs))
    spread = problem.spread_values(xs)
    for ph, seconds in enumerate(spread):
        if f"s{ph}" in named:
            named[f"s{ph}"].setInitialValue(float(seconds) * TIME_SCALE)
    for n, gc in enumerate(problem.group_counts):  # the cheaper side of 'over', as phase_times takes it
        average = problem.load_row_value(gc.row, xs)
        over = (max(average, gc.over_s(spread[gc.phase], problem.fixed_charges(xs).get(gc.row, 0.0)))
                < average + gc.counted_s(xs, problem.fixed_groups))
        named[f"o{n}"].setInitialValue(1.0 if over else 0.0)
        for j, t in enumerate(gc.types):
            u = problem.fixed_groups[t.every].used(xs) if t.every >= 0 else 0.0
            named[f"c{n}_{j}"].setInitialValue(0.0 if over else t.needed(xs, gc.level_s, gc.slots, u))


def _build(problem: Problem, relax: bool = False):
    """The PuLP model; ``relax``: every variable continuous."""
    prob = pulp.LpProblem("placement", pulp.LpMinimize)
    cat = pulp.LpContinuous if relax else pulp.LpBinary
    x = [pulp.LpVariable(f"x{i}", lowBound=0, upBound=1, cat=cat) for i in range(problem.num_options)]
    y = [pulp.LpVariable(f"y{p}", lowBound=0) for p in range(problem.num_phases)]
    prob += pulp.lpSum(y)  # fixed_s is added outside: solvers report objectives without constants
    for gi, group in enumerate(problem.groups):
        prob += pulp.LpAffineExpression([(x[i], 1.0) for i in group]) == 1, f"one_{gi}"
    fixed_terms: dict[tuple[int, str], list] = {}  # (phase, resource) -> [(u, -seconds)]
    used = []  # u of every fixed group, in problem.fixed_groups order
    for n, fg in enumerate(problem.fixed_groups):
        u = pulp.LpVariable(f"u{n}", lowBound=0, upBound=1)
        used.append(u)
        for j, ids in enumerate(fg.members):
            prob += pulp.LpAffineExpression([(u, 1.0)] + [(x[i], -1.0) for i in ids]) >= 0, f"uses_{n}_{j}"
        for key, seconds in fg.charges.items():
            fixed_terms.setdefault(key, []).append((u, -seconds * TIME_SCALE))
    spread = {}  # phase -> s_phase, the loads every member carries alike (problem.spread)
    for ph, (ids, coef) in problem.spread.items():
        spread[ph] = pulp.LpVariable(f"s{ph}", lowBound=0)
        prob += (pulp.LpAffineExpression([(spread[ph], 1.0)] + [(x[i], -c * TIME_SCALE) for i, c in zip(ids, coef)])
                 >= 0), f"spread_{ph}"
    for n, gc in enumerate(problem.group_counts):
        _group_count_rows(prob, n, gc, x, y, used, spread, relax, fixed_terms)
    rows = list(problem.load_rows) + [k for k in fixed_terms if k not in problem.load_rows]
    for n, (phase, _res) in enumerate(rows):
        ids, coef = problem.load_rows.get((phase, _res), ((), ()))
        base = problem.load_base.get((phase, _res), 0.0) * TIME_SCALE
        expr = pulp.LpAffineExpression([(x[i], -c * TIME_SCALE) for i, c in zip(ids, coef)] + [(y[phase], 1.0)]
                                       + fixed_terms.get((phase, _res), [])
                                       + ([(spread[phase], -1.0)] if (phase, _res) in problem.spread_rows
                                          and phase in spread else []))
        prob += expr >= base, f"load_{n}"
    for p in range(problem.num_phases):  # phases whose busiest resource carries only base load
        floor = max((v for (ph, r), v in problem.load_base.items() if ph == p), default=0.0) * TIME_SCALE
        if floor:
            prob += y[p] >= floor, f"base_{p}"
    for n, lv in enumerate(problem.levels):
        w = [pulp.LpVariable(f"w{n}_{j}", lowBound=0, upBound=1) for j in range(len(lv.steps_s))]
        prob += (pulp.LpAffineExpression([(y[lv.phase], 1.0)] + [(wj, -d * TIME_SCALE) for wj, d in zip(w, lv.steps_s)])
                 >= lv.floor_s * TIME_SCALE), f"level_{n}"
        for j in range(len(w) - 1):
            prob += w[j] - w[j + 1] >= 0, f"chain_{n}_{j}"
        for j, per_group in enumerate(lv.members):
            for g, ids in enumerate(per_group):
                prob += pulp.LpAffineExpression([(w[j], 1.0)] + [(x[i], -1.0) for i in ids]) >= 0, f"reach_{n}_{j}_{g}"
    for n, row in enumerate(problem.counts):
        z = pulp.LpVariable(f"z{n}", lowBound=0, cat=pulp.LpContinuous if relax else pulp.LpInteger)
        prob += (pulp.LpAffineExpression([(y[row.phase], 1.0), (z, -row.size_s * TIME_SCALE)]
                                         + [(x[i], -c * TIME_SCALE) for i, c in zip(row.spread_ids, row.spread_coefs)])
                 >= row.base_s * TIME_SCALE), f"count_{n}"
        prob += (pulp.LpAffineExpression([(z, float(row.slots))]
                                         + [(x[i], -float(c)) for i, c in zip(row.ids, row.counts)])
                 >= 0), f"slots_{n}"
    for n, (m, (ids, b)) in enumerate(problem.mem_rows.items()):
        prob += (pulp.LpAffineExpression([(x[i], v * MEM_SCALE) for i, v in zip(ids, b)])
                 <= problem.mem_capacity[m] * MEM_SCALE), f"mem_{n}"
    for n, (a, b) in enumerate(problem.equal):  # co-located tables: the same device set (Problem.equal)
        prob += pulp.LpAffineExpression([(x[i], 1.0) for i in a] + [(x[i], -1.0) for i in b]) == 0, f"same_{n}"
    return prob, x, y


def _group_count_rows(prob: pulp.LpProblem, n: int, gc: GroupCounts, x: list, y: list, used: list, spread: dict,
                      relax: bool, fixed_terms: dict) -> None:
    """GroupCounts ``gc`` (problem.py) in the model: its binary o{n} ('some stream's own load is over the level'),
    the row it sits in, and per group type its count c{n}_{j} with its row; the counts' fixed costs join the
    class-average row through ``fixed_terms`` (as the every-GPU groups' u, ``used``, do)."""
    over = pulp.LpVariable(f"o{n}", lowBound=0, upBound=1, cat=pulp.LpContinuous if relax else pulp.LpBinary)
    on_every = list(fixed_terms.get(gc.row, []))  # the every-GPU groups' fixed costs on one stream: sum charge u
    prob += (pulp.LpAffineExpression([(y[gc.phase], 1.0), (over, -gc.level_s * TIME_SCALE)] + on_every
                                     + ([(spread[gc.phase], -1.0)] if gc.phase in spread else []))
             >= gc.base_s * TIME_SCALE), f"over_{n}"
    for j, t in enumerate(gc.types):
        count = pulp.LpVariable(f"c{n}_{j}", lowBound=0, cat=pulp.LpContinuous if relax else pulp.LpInteger)
        room = (gc.level_s - t.fixed_s) * TIME_SCALE
        terms = [(count, room), (over, min(t.most_s, float(t.loads_s.sum())) * TIME_SCALE)]
        terms += [(x[i], -v * TIME_SCALE) for i, v in zip(t.ids, t.loads_s)]
        if t.every >= 0:
            terms.append((used[t.every], gc.slots * gc.level_s * TIME_SCALE))
        prob += pulp.LpAffineExpression(terms) >= 0, f"groups_{n}_{j}"
        fixed_terms.setdefault(gc.row, []).append((count, -t.fixed_s / gc.slots * TIME_SCALE))


def lp_relaxation_bound(problem: Problem, time_limit_s: float = 30.0, budget: Budget | None = None) -> float | None:
    """Optimal value of the LP relaxation (a valid lower bound on the step time), or None if not solved."""
    return relaxation(problem, time_limit_s, budget)[1]


def relaxation(problem: Problem, time_limit_s: float = 30.0, budget: Budget | None = None
               ) -> tuple[np.ndarray | None, float | None]:
    """(value of every option, optimal value in s) of the LP relaxation; (None, None) if not solved to
    optimality. Within ``budget`` (default: ``time_limit_s`` of wall time); a work budget sets no limit on
    an LP (it ends on its own) and is charged its iterations."""
    budget = budget if budget is not None else Budget(_finite_limit(time_limit_s))
    prob, x, _ = _build(problem, relax=True)
    _run_cbc(prob, budget, budget.left())
    if pulp.LpStatus[prob.status] != "Optimal" or prob.sol_status != pulp.LpSolutionOptimal:
        return None, None
    values = np.array([v.varValue if v.varValue is not None else 0.0 for v in x])
    return values, float(pulp.value(prob.objective)) / TIME_SCALE + problem.fixed_s


def complete_relaxation(problem: Problem, values: np.ndarray, time_limit_s: float = 30.0,
                        free: set[int] = frozenset(), budget: Budget | None = None) -> list[int] | None:
    """A solution near the relaxation's: the groups it sets integrally stay as they are (except those in
    ``free``), and a small MIP chooses the rest (a rounding that respects memory and balances the loads).
    None if that MIP finds nothing within ``budget`` (default: ``time_limit_s`` of wall time). Peak levels are
    left out: at integer points they add nothing."""
    budget = budget if budget is not None else Budget(_finite_limit(time_limit_s))
    prob, x, _ = _build(dataclasses.replace(problem, levels=[]))
    for gi, group in enumerate(problem.groups):
        if gi not in free and values[group].max() >= 1 - 1e-6:
            for i in group:
                x[i].lowBound = x[i].upBound = 1.0 if values[i] >= 1 - 1e-6 else 0.0
    _run_cbc(prob, budget, max(1.0, budget.left()), gapRel=0.001)
    chosen = _decode(problem, x)
    return chosen if chosen is not None and problem.fits(chosen) else None


def _nonzeros(prob: pulp.LpProblem) -> int:
    """Nonzeros of the model's constraint matrix (what a solve's work scales with)."""
    return sum(len(c) for c in prob.constraints.values())


def run_mip(prob: pulp.LpProblem, backend: str, budget: Budget, seconds: float, **options) -> None:
    """Solve ``prob`` with ``backend`` (cbc | highs) for at most ``seconds`` of ``budget`` (a time limit, or in
    a work budget a node limit), charging ``budget`` the work the solver reports. ``options``: PuLP's
    (gapRel, threads, warmStart for CBC)."""
    if backend == "cbc":
        _run_cbc(prob, budget, seconds, **options)
        return
    options.pop("warmStart", None)
    nonzeros = _nonzeros(prob)
    limits = effort.mip_limits(budget, seconds, nonzeros)
    _solve(prob, pulp.HiGHS(msg=False, timeLimit=limits.pop("time_limit", None), **limits, **options))
    budget.charge(effort.mip_work(nonzeros, prob.solverModel.getInfo().mip_node_count))
    if prob.solverModel.getModelStatus() in _HIGHS_LIMITS:
        budget.note_ran_out()  # stopped by its time, node or iteration limit


def _solve(prob: pulp.LpProblem, solver) -> None:
    """``prob.solve(solver)``, but a HiGHS MIP stopped by its node or solution limit (a work budget's limit:
    PuLP 3.3 has no status for it and raises KeyError) keeps HiGHS's best solution, if any, as integer feasible
    (not proven), as a MIP stopped by its time limit does."""
    swallow_banner()  # PuLP's HiGHS class makes a highspy.Highs before it can silence it
    try:
        prob.solve(solver)
    except KeyError:
        model = getattr(prob, "solverModel", None)
        if not isinstance(solver, pulp.HiGHS) or model is None or model.getModelStatus() not in _HIGHS_LIMITS:
            raise
        solution = model.getSolution()
        found = bool(solution.value_valid)
        for var in prob.variables():
            var.varValue = solution.col_value[var.index] if found else None
        prob.status = pulp.LpStatusNotSolved
        prob.sol_status = pulp.LpSolutionIntegerFeasible if found else pulp.LpSolutionNoSolutionFound


def _run_cbc(prob: pulp.LpProblem, budget: Budget, seconds: float, **options) -> str:
    """Solve ``prob`` with CBC, limited to ``seconds`` of ``budget`` (a time limit, or in a work budget a node
    limit: effort.cbc_limits), and charge ``budget`` the work CBC reports; returns CBC's log."""
    nonzeros = _nonzeros(prob)
    limits = effort.cbc_limits(budget, seconds, nonzeros)
    fd, log_path = tempfile.mkstemp(prefix="placer-cbc-", suffix=".log")
    os.close(fd)
    try:
        prob.solve(pulp.PULP_CBC_CMD(msg=False, logPath=log_path, **limits, **options))
        text = open(log_path, encoding="utf-8", errors="replace").read()
    finally:
        os.unlink(log_path)
    budget.charge(effort.cbc_work(text, nonzeros))
    result = _CBC_RESULT.search(text)
    if result and result.group(1).startswith("Stopped"):
        budget.note_ran_out()  # "Stopped on time limit", "... on node limit", ...
    return text


_CBC_BOUND = re.compile(r"^Lower bound:\s*([-+0-9.eE]+)", re.MULTILINE)
_CBC_RESULT = re.compile(r"^Result - (.*)$", re.MULTILINE)
#: HiGHS statuses of a MIP stopped by a limit before it finished
_HIGHS_LIMITS = frozenset({highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit,
                           highspy.HighsModelStatus.kSolutionLimit})
_CBC_MIPSTART = re.compile(r"MIPStart provided solution with cost ([-+0-9.eE]+)")


def _highs_solver(problem: Problem, limits: dict, gap: float, threads: int | None, warm_start: list[int] | None,
                  msg: bool, tracker: Tracker | None, highs_options: dict | None) -> pulp.HiGHS:
    """PuLP's HiGHS for ``solve``: ``limits`` (effort.mip_limits), the warm start as an objective cutoff at its
    step time, and ``tracker`` hearing HiGHS's incumbents and bounds as it finds them (progress.highs_callback)."""
    extra = {}
    if warm_start is not None:
        start = (problem.objective(warm_start) - problem.fixed_s) * TIME_SCALE
        extra["objective_bound"] = start * (1 + 1e-7) + 1e-9
    if tracker is not None:
        extra.update(highs_callback(tracker, lambda v: v / TIME_SCALE + problem.fixed_s))
    limits = dict(limits)
    return pulp.HiGHS(msg=msg, timeLimit=limits.pop("time_limit", None), gapRel=gap, threads=threads,
                      **limits, **extra, **(highs_options or {}))


def solve(problem: Problem, *, backend: str = "cbc", time_limit_s: float = 60.0, gap: float = 0.005,
          threads: int | None = None, warm_start: list[int] | None = None, msg: bool = False,
          tracker: Tracker | None = None, budget: Budget | None = None,
          highs_options: dict | None = None) -> IlpResult:
    """Solve the placement ILP within ``budget`` (default: ``time_limit_s`` of wall time; a work budget gives
    the solver a node limit and is charged the work it reports, effort.py). ``warm_start`` is a feasible
    choice (one option id per group). ``tracker`` hears the solver's incumbents and bounds while it runs (in
    seconds of step time). ``highs_options``: more HiGHS options (name -> value) for backend "highs"."""
    if backend not in SOLVERS:
        raise SolverError(f"unknown solver {backend!r}; choose one of {', '.join(SOLVERS)}")
    budget = budget if budget is not None else Budget(_finite_limit(time_limit_s))
    gap = gap if np.isfinite(gap) and 0 <= gap < 1 else 0.005  # callers validate; a bad value never proves optimality
    t0 = time.perf_counter()
    prob, x, y = _build(problem)
    warm = "none"
    if warm_start is not None:
        _set_start(problem, prob, x, y, warm_start)
        warm = "given to cbc" if backend == "cbc" else "highs objective cutoff at its step time"
    log_path = None
    time_limit_s = _finite_limit(budget.left())  # the limit covers building the model
    nonzeros = _nonzeros(prob)
    watcher = None
    if backend == "cbc":
        fd, log_path = tempfile.mkstemp(prefix="placer-cbc-", suffix=".log")
        os.close(fd)
        if tracker is not None and not msg:  # CBC's log through a terminal: each line as it comes (progress.py)
            watcher = CbcLogTerminal(log_path, tracker, lambda v: v / TIME_SCALE + problem.fixed_s)
        solver = pulp.PULP_CBC_CMD(msg=msg, gapRel=gap, threads=threads, warmStart=warm_start is not None,
                                   logPath=None if msg else watcher.solver_path if watcher else log_path,
                                   options=EXACT_CBC_OPTIONS if gap == 0 else [],
                                   **effort.cbc_limits(budget, time_limit_s, nonzeros))
    else:
        limits = effort.mip_limits(budget, time_limit_s, nonzeros)
        solver = _highs_solver(problem, limits, gap, threads, warm_start, msg, tracker, highs_options)
    watchdog = Watchdog(effort.watchdog_s(budget, time_limit_s), "cbc") if backend == "cbc" else None
    try:
        _solve(prob, solver)
    except pulp.PulpSolverError as exc:
        if watchdog is None or not watchdog.fired:
            raise SolverError(f"{backend} failed: {exc}") from None
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if watcher is not None:
            watcher.stop()
    if watchdog is not None and watchdog.fired:  # CBC ran far past its own limit and was stopped
        if log_path and os.path.exists(log_path):
            os.unlink(log_path)
        budget.note_ran_out()
        return IlpResult(None, "no_solution", None, problem.simple_lower_bound(), time.perf_counter() - t0,
                         len(x) + len(y), len(prob.constraints), warm + "; cbc stopped by the watchdog", backend)
    solver_bound = None
    cbc_result = ""
    if backend == "cbc" and log_path:
        text = open(log_path, encoding="utf-8", errors="replace").read()
        os.unlink(log_path)
        budget.charge(effort.cbc_work(text, nonzeros))
        m = _CBC_BOUND.search(text)
        solver_bound = float(m.group(1)) / TIME_SCALE + problem.fixed_s if m else None
        r = _CBC_RESULT.search(text)
        cbc_result = r.group(1) if r else ""
        if warm_start is not None:
            w = _CBC_MIPSTART.search(text)
            warm = (f"accepted by cbc ({float(w.group(1)) / TIME_SCALE + problem.fixed_s:.6g} s)" if w
                    else "given to cbc, not accepted")
    elif backend == "highs":
        try:
            info = prob.solverModel.getInfo()
            budget.charge(effort.mip_work(nonzeros, info.mip_node_count))
            bound = float(info.mip_dual_bound)
            solver_bound = bound / TIME_SCALE + problem.fixed_s if np.isfinite(bound) else None
        except Exception:  # older highspy: no info object
            solver_bound = None

    chosen = _decode(problem, x)
    sol_status = prob.sol_status
    proven = sol_status == pulp.LpSolutionOptimal and not cbc_result.startswith("Stopped")
    if chosen is None or not problem.fits(chosen):
        infeasible = pulp.LpStatus[prob.status] == "Infeasible" or sol_status == pulp.LpSolutionInfeasible
        if backend == "highs" and warm_start is not None:
            # the cutoff excluded every solution: none beats the start by more than the cutoff's slack
            chosen, proven = list(warm_start), infeasible
        else:
            if not infeasible:
                budget.note_ran_out()  # stopped by its limit before it found a plan
            return IlpResult(None, "infeasible" if infeasible else "no_solution", None,
                             problem.simple_lower_bound(), time.perf_counter() - t0, len(x) + len(y),
                             len(prob.constraints), warm,
                             backend)
    objective = problem.objective(chosen)
    bounds = [problem.simple_lower_bound()]
    if solver_bound is not None:
        bounds.append(solver_bound)
    if proven:  # the solver stopped because no node could beat the incumbent by more than the gap tolerance
        bounds.append((objective - problem.fixed_s) * (1 - gap) + problem.fixed_s)
    elif solver_bound is None:
        lp = lp_relaxation_bound(problem, budget=budget.child(SCHEDULE.bound_lp_s(time_limit_s)))
        if lp is not None:
            bounds.append(lp)
    lower = min(max(bounds), objective)
    if not proven:
        budget.note_ran_out()  # stopped by its limit before it proved the plan within the gap
    return IlpResult(chosen, "optimal" if proven else "feasible", objective, lower, time.perf_counter() - t0,
                     len(x) + len(y), len(prob.constraints), warm, backend)


#: Longest time limit handed to a solver, seconds (SolveConfig rejects longer ones; internal callers compute theirs).
MAX_LIMIT_S = MAX_TIME_LIMIT_S


def _finite_limit(seconds: float) -> float:
    """A time limit a solver and a timer accept: nan -> 60 s, clamped to [1, MAX_LIMIT_S] seconds."""
    seconds = float(seconds)
    if seconds != seconds:
        return 60.0
    return min(max(seconds, 1.0), MAX_LIMIT_S)


def _decode(problem: Problem, x) -> list[int] | None:
    values = np.array([v.varValue if v.varValue is not None else np.nan for v in x])
    if np.isnan(values).all():
        return None
    values = np.nan_to_num(values)
    return [int(g[int(np.argmax(values[g]))]) for g in problem.groups]
