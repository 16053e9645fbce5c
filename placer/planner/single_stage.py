"""The single-stage ILP solve as a pipeline (solve_run.py): every table's options on every device, one branch and
bound over them warm-started from the best baseline, the tie-break, the plan.

PIPELINE, in order: the least work first (the cheapest baseline where the limit cannot hold the search), the two
stages for a large symmetric machine (two_stage_solve.py), the options' own time, the menu (options, baselines,
the problem), the branch and bound, the tie-break (fewest lookups from slow memory at the same step), the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from placer.cost import PHASES, CostModel
from placer.errors import PlacerError
from placer.options import OptionConfig, all_options
from placer.plan import Placement, Plan, SolverInfo
from placer.planner import ilp, infeasible, least_work, tiebreak, two_stage_solve
from placer.planner.baselines import BASELINES
from placer.planner.budget import Budget
from placer.planner.constrained import check_menus, colocated_menus, equal_rows
from placer.planner.fit import with_fit_levels
from placer.planner.problem import Problem, build_problem
from placer.planner.schedule import SCHEDULE
from placer.planner.solve_run import (SolveRun, after_solve_s, cheapest_or_extended, each_feasible_baseline,
                                      limit_note, limit_text, make_plan, work_record)
from placer.planner.symmetry import Symmetry
from placer.planner.tuning import LEAST_WORK_S, OPTIONS_S_PER_PAIR, WHAT_IF_S_PER_PAIR

#: A homogeneous machine is planned in two stages (planner/two_stage.py) above this many GPUs, or above this many
#: (table, GPU) pairs: there the full ILP does not get near its optimum in a minute (measured on dgx-h100 with
#: production-856, 6,848 pairs: full ILP 55.4 ms at a 15.7% gap, two stages 53.4 ms at 11.7%; synthetic-1000:
#: 27.5 ms at 18.8% vs 26.6 ms at 3.4%; 30 s each).
FULL_ILP_MAX_GPUS = 8
FULL_ILP_MAX_PAIRS = 2000
#: The tie-break (planner/tiebreak.py) runs after a proven-optimal solve, or one whose gap is at most this
#: (or twice the gap tolerance): further from the bound, step time still matters more than where lookups go.
TIE_BREAK_MAX_GAP = 0.01


@dataclass
class SingleStage(SolveRun):
    """A single-stage solve's state: the menu (``cfg``, ``options`` per table, ``costs``, the ``problem``), the
    baselines that fit, the warm start (the best of them: ``best`` = (objective, chosen, name)), the solver's
    ``result`` and the tie-break's record ``tie``."""

    cfg: OptionConfig | None = None
    options: dict[str, list[Placement]] = field(default_factory=dict)
    costs: list[list] = field(default_factory=list)
    problem: Problem | None = None
    best: tuple | None = None
    result: ilp.IlpResult | None = None
    tie: dict | None = None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.model.wl.tables]

    @property
    def warm(self) -> list | None:
        return self.best[1] if self.best else None


def _least_work_first(run: SingleStage) -> Plan | None:
    """Said before the work started (solve._solve, least_work.py): where the least work exceeds what the limit
    leaves, the cheapest baseline's plan, the limit named as cut (or, none fitting, the ILP past the limit)."""
    if (not run.budget.deterministic and least_work.least_work_s(run.model) > run.budget.left()
            and run.baselines_apply):
        return cheapest_or_extended(run, "the time limit left less than the least work")
    return None


def _two_stages_if_large(run: SingleStage) -> Plan | None:
    """Above FULL_ILP_MAX_GPUS GPUs or FULL_ILP_MAX_PAIRS pairs, on a symmetric machine: the two-stage pipeline."""
    gpus = len(run.model.topo.gpus)
    if run.model.wl.constraints.narrows_devices:  # pinned or co-located tables: the stages treat GPUs alike
        return None
    if gpus > FULL_ILP_MAX_GPUS or (gpus > 1 and gpus * len(run.model.wl.tables) > FULL_ILP_MAX_PAIRS):
        sym = Symmetry.of(run.model.topo)
        if sym is not None:
            return two_stage_solve.solve(run, sym)
    return None


def _options_time(run: SingleStage) -> Plan | None:
    """The options of every table on every device and every baseline come before the search, unbounded (8.6 s for
    production-856 @ cpu-server, whose 5 s limit then ended after 16 s): where they cannot fit in what the limit
    leaves, the cheapest baseline instead."""
    if run.budget.deterministic or run.tried_baseline:
        return None
    pairs = len(run.model.wl.tables) * len(run.model.topo.gpus)
    if (LEAST_WORK_S + (OPTIONS_S_PER_PAIR + 2 * WHAT_IF_S_PER_PAIR) * pairs > run.budget.left()
            and run.baselines_apply):
        return cheapest_or_extended(run, "the time limit left no time for the options")
    return None


def _menu(run: SingleStage) -> None:
    """The options, the baselines that fit (each one's choice on the menu: ILP <= each baseline), the problem, and
    the warm start: the best baseline that fits."""
    model = run.model
    run.tracker.update("options and baselines")
    with run.budget.stage("options and baselines"):
        infeasible.check_dense(model)
        run.cfg = with_fit_levels(model, run.config.options)
        run.options = all_options(model.topo, model.wl, run.cfg)
        if model.rules.groups:  # co-located tables: the device sets all of a group's tables have
            colocated_menus(model.rules, run.options)
        check_menus(model, run.options, run.cfg)  # exit 3 naming the constraints that leave a table nothing
        baselines = (dict(each_feasible_baseline(model, run.config.seed, BASELINES)) if run.baselines_apply
                     else {})
        for placements in baselines.values():
            for p in placements:
                if p not in run.options[p.table]:
                    run.options[p.table].append(p)
        run.costs = [[model.placement_cost(p) for p in run.options[n]] for n in run.names]
        problem = run.problem = _problem(run)
        infeasible.explain_infeasible(model, problem, run.names, run.cfg)
        for name, placements in baselines.items():
            chosen = [problem.groups[ti][run.options[run.names[ti]].index(p)] for ti, p in enumerate(placements)]
            obj = problem.objective(chosen)
            if problem.fits(chosen) and (run.best is None or obj < run.best[0]):
                run.best = (obj, chosen, name)


def _branch_and_bound(run: SingleStage) -> None:
    """The solver over the problem, warm-started, for SCHEDULE.search_s; where it finds nothing, the warm start
    stands (InfeasibleError where the problem has no solution, PlacerError where none was found in time)."""
    config, budget, problem, warm = run.config, run.budget, run.problem, run.warm
    run.tracker.update(f"{config.solver}: branch and bound", incumbent_s=run.best[0] if run.best else None,
                       bound_s=problem.simple_lower_bound())
    if not budget.deterministic and warm is not None and budget.left() < SCHEDULE.single_search_min_s:
        # no time left for the search (CBC overruns a 1 s limit on large models: 6.5 s on production-856 @
        # cpu-server): the best baseline stands, the search named as cut
        budget.note_ran_out("branch and bound")
        result = ilp.IlpResult(list(warm), "feasible", problem.objective(warm), problem.simple_lower_bound(), 0.0,
                               0, 0, "not searched: the time limit was spent", config.solver)
    else:
        with budget.stage("branch and bound"):
            result = ilp.solve(problem, backend=config.solver, gap=config.gap, threads=config.threads,
                               warm_start=warm, msg=config.msg, tracker=run.tracker,
                               budget=budget.child(search_s(run.model, budget)))
    if result.chosen is None:
        if result.status == "infeasible":
            raise infeasible.after_solver(run.model, problem, run.cfg)
        if warm is None:
            raise PlacerError(f"{config.solver} found no solution within {limit_text(config)} "
                              f"(try a longer {'--work-limit' if config.work_limit is not None else '--time-limit'})")
        result.chosen, result.objective_s = warm, problem.objective(warm)  # the best baseline stands
        result.status = "feasible"
    run.result = result


def _tie_break_step(run: SingleStage) -> None:
    """The tie-break after a proven-optimal solve or one within TIE_BREAK_MAX_GAP (or twice the gap tolerance)."""
    result = run.result
    first_gap = (result.objective_s - result.lower_bound_s) / result.objective_s if result.objective_s else 0.0
    if result.status == "optimal" or first_gap <= max(2 * run.config.gap, TIE_BREAK_MAX_GAP):
        run.tracker.update("tie-break: fewest lookups from slow memory")
        with run.budget.stage("tie-break"):
            run.problem, run.tie = _tie_break(run, run.budget.child(
                SCHEDULE.tie_break_s(run.budget, keep_s=after_solve_s(run.model))))


def _the_plan(run: SingleStage) -> Plan:
    """The chosen options as the plan, with the solver's record."""
    config, budget, result, warm_name = run.config, run.budget, run.result, run.best[2] if run.best else None
    offset = {n: run.problem.groups[i][0] for i, n in enumerate(run.names)}
    placements = [run.options[n][oid - offset[n]] for n, oid in zip(run.names, result.chosen)]
    gap = (result.objective_s - result.lower_bound_s) / result.objective_s if result.objective_s else 0.0
    run.tracker.update("done", incumbent_s=result.objective_s, bound_s=result.lower_bound_s)
    info = SolverInfo(
        backend=config.solver, status=result.status, objective_step_time_s=result.objective_s,
        lower_bound_step_time_s=result.lower_bound_s, gap=max(gap, 0.0), gap_tolerance=config.gap,
        time_limit_s=config.time_limit_s, wall_s=budget.wall_elapsed(), num_variables=result.num_variables,
        num_constraints=result.num_constraints, tie_break=run.tie,
        warm_start=f"{warm_name}, {result.warm_start}" if warm_name else "none",
        note=("optimal = proven within gap_tolerance of the solver's bound" if result.status == "optimal"
              else f"{budget.limit_name} reached: feasible, gap to the best valid lower bound") + limit_note(budget),
        stage_times_s=dict(budget.stages), **work_record(config, budget))
    return make_plan(run.model, "ilp", placements, info)


#: The single-stage solve, step by step (solve_run.through runs it).
PIPELINE = (("least work", _least_work_first), ("two stages", _two_stages_if_large),
            ("options' time", _options_time), ("options and baselines", _menu),
            ("branch and bound", _branch_and_bound), ("tie-break", _tie_break_step), ("plan", _the_plan))


def _problem(run: SingleStage) -> Problem:
    """The problem of the run's menu and costs, with the rows that keep co-located tables on one device set."""
    model = run.model
    problem = build_problem(run.costs, model.base_cost, sum(model.fixed_latency_s.values()), model.usable_memory,
                            len(PHASES))
    if model.rules.groups:
        problem.equal = equal_rows(model.rules, run.options, problem.groups, run.names)
    return problem


def search_s(model: CostModel, budget: Budget) -> float:
    """The single-stage branch and bound's seconds (SCHEDULE.search_s): under a time limit, what the limit leaves
    after the options and baselines less after_solve_s, so that the command ends within its limit (it ran the whole
    limit from its own start, then the tie-break and pricing: 30 s cases ended at up to 32.6 s); under a work
    limit, what is left of it."""
    return SCHEDULE.search_s(budget, after_solve_s(model))


def _tie_break(run: SingleStage, budget: Budget) -> tuple[Problem, dict]:
    """The single-stage tie-break (planner/tiebreak.py) of the run's result (its ``chosen`` and ``objective_s``
    updated in place): (the problem, with the levels that fill the first plan's free HBM; the tie-break's
    record). The run's options and costs gain those levels."""
    model, problem, result, options, names = run.model, run.problem, run.result, run.options, run.names
    first = [options[n][oid - problem.groups[i][0]] for i, (n, oid) in enumerate(zip(names, result.chosen))]
    fill = {n: model.rules.allowed(ps) for n, ps in tiebreak.fill_options(model, first).items()}
    if fill:  # levels that fill the first plan's free HBM: appended, so every chosen option keeps its place
        pos = [oid - problem.groups[i][0] for i, oid in enumerate(result.chosen)]
        for i, n in enumerate(names):
            options[n].extend(fill.get(n, []))
            run.costs[i].extend(model.placement_cost(q) for q in fill.get(n, []))
        problem = _problem(run)
        result.chosen = [problem.groups[i][k] for i, k in enumerate(pos)]
    result.chosen, tie = tiebreak.tie_break(
        model, problem, [options[n] for n in names], result.chosen, result.lower_bound_s, run.config.gap,
        backend=run.config.solver, threads=run.config.threads, ceiling_s=run.best[0] if run.best else None,
        budget=budget)
    result.objective_s = problem.objective(result.chosen)
    tie["fill_levels_added"] = sum(len(v) for v in fill.values())
    return problem, tie
