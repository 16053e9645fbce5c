"""Make a plan: options -> costs -> (baselines, ILP) -> Plan with its prediction and solver account."""
from __future__ import annotations

import math
import numbers
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

from placer.cost import PHASES, CostModel
from placer.errors import InfeasibleError, PlacerError, SolverError, SpecError
from placer.executor import BackgroundParts
from placer.forms import storage
from placer.forms.storage import FORCED_FORMS, STORAGE
from placer.limits import MAX_TIME_LIMIT_S, MAX_WORK_LIMIT
from placer.options import OptionConfig, all_options
from placer.plan import Placement, Plan, SolverInfo, SpecRef
from placer.plan_check import check_plan
from placer.planner import effort, ilp, infeasible, least_work, tiebreak, tiebreak_local
from placer.planner.fit import with_fit_levels
from placer.planner.baselines import BASELINES, EXTERNAL, run_baseline
from placer.planner.trainers import for_trainer
from placer.planner.budget import WORK_UNIT_S, Budget
from placer.planner.problem import Problem, build_problem
from placer.planner.schedule import SCHEDULE
from placer.planner.progress import Reporter, Tracker
from placer.planner.symmetry import Symmetry
from placer.planner.tuning import BASELINES_NICE, LEAST_WORK_S, OPTIONS_S_PER_PAIR, WHAT_IF_S_PER_PAIR
from placer.planner.two_stage import solve_two_stage
from placer.simulate import predict
from placer.skew import robustness
from placer.specs.workload import Workload
from placer.topology import Topology

METHODS = ("ilp",) + BASELINES + FORCED_FORMS + EXTERNAL  # EXTERNAL: torchrec, when installed (torchrec_io/planner.py)


@dataclass(frozen=True)
class SolveConfig:
    """How to plan: ``method`` (ilp or a baseline), ``solver`` (cbc | highs), ``time_limit_s`` (seconds, in
    (0, MAX_TIME_LIMIT_S], placer/limits.py: the wall time of ``solve``, pricing the plan and its skew what-ifs
    included, counted from ``started_s`` where given: a ``time.perf_counter()`` reading, the CLI's start),
    ``work_limit`` (work units in (0, MAX_WORK_LIMIT], or None: instead of the time limit, a deterministic budget
    of the ILP's search, budget.py:
    the same inputs give the same plan on any machine, in whatever time that takes), ``gap`` (relative,
    [0, 1)), ``threads`` (>= 1, None: the solver's default), ``seed`` (>= 0, for the random baseline). Checked
    on construction: a bad field raises SpecError naming it."""

    method: str = "ilp"
    solver: str = "cbc"
    time_limit_s: float = 60.0
    work_limit: float | None = None
    gap: float = 0.005
    threads: int | None = None
    seed: int = 0
    options: OptionConfig = OptionConfig()
    msg: bool = False
    progress: Reporter | None = None  # hears the stage, incumbent and bound while solving (progress.py)
    started_s: float | None = None

    def __post_init__(self):
        check_solve_config(self)




def check_solve_config(c: "SolveConfig") -> None:
    """Raise SpecError naming the parameter when a SolveConfig field is out of range (units: seconds for
    time_limit_s, a fraction for gap)."""
    def bad(field: str, message: str):
        raise SpecError(message, field=field)

    if c.method not in METHODS:
        bad("method", f"unknown method {c.method!r}; choose one of {', '.join(METHODS)}")
    if c.solver not in ilp.SOLVERS:
        bad("solver", f"unknown solver {c.solver!r}; choose one of {', '.join(ilp.SOLVERS)}")
    if not _real(c.time_limit_s) or not 0 < c.time_limit_s <= MAX_TIME_LIMIT_S:
        bad("time_limit_s", f"time limit must be a number of seconds in (0, {MAX_TIME_LIMIT_S:g}], "
                            f"got {c.time_limit_s!r}")
    if c.work_limit is not None and (not _real(c.work_limit) or not 0 < c.work_limit <= MAX_WORK_LIMIT):
        bad("work_limit", f"work limit must be a number of work units in (0, {MAX_WORK_LIMIT:g}], "
                          f"got {c.work_limit!r}")
    if not _real(c.gap) or not 0 <= c.gap < 1:
        bad("gap", f"relative gap must be a fraction in [0, 1), got {c.gap!r}")
    if c.threads is not None and (not _integer(c.threads) or c.threads < 1):
        bad("threads", f"threads must be a whole number >= 1 (or None for the solver's default), got {c.threads!r}")
    if not _integer(c.seed) or c.seed < 0:
        bad("seed", f"seed must be a whole number >= 0, got {c.seed!r}")
    if c.started_s is not None and not _real(c.started_s):
        bad("started_s", f"started_s must be a time.perf_counter() reading or None, got {c.started_s!r}")
    if not isinstance(c.options, OptionConfig):
        bad("options", f"options must be an OptionConfig, got {type(c.options).__name__}")


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _integer(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _refs(topo: Topology, wl: Workload) -> tuple[SpecRef, SpecRef]:
    return SpecRef(name=topo.spec.name, sha256=topo.spec.sha256), SpecRef(name=wl.name, sha256=wl.sha256)


def make_plan(model: CostModel, method: str, placements: list[Placement], solver: SolverInfo) -> Plan:
    """The plan of ``placements`` made by ``method``, checked as a plan file is (plan_check.check_plan: every table
    placed once, its rows and columns covered exactly once, on devices of the right kind), then priced. A plan
    that fails the check is a bug of that method, not the user's: SolverError naming the method and the fault."""
    hw, wl = _refs(model.topo, model.wl)
    plan = Plan(hardware=hw, workload=wl, method=method, placements=placements, solver=solver)
    try:
        check_plan(plan, model.topo, model.wl, check_hashes=False)
    except SpecError as exc:
        raise SolverError(f"the {method} planner made a plan that does not hold: {exc} (a bug in placer; "
                          "please report it with the hardware and workload files)") from None
    return plan.model_copy(update={"predicted": predict(model, plan)})


def solve(topology: Topology, workload: Workload, config: SolveConfig = SolveConfig()) -> Plan:
    """Plan ``workload`` on ``topology`` with ``config.method``. Raises InfeasibleError when nothing fits."""
    return _solve(topology, workload, config)


def _solve(topology: Topology, workload: Workload, config: SolveConfig) -> Plan:
    config = for_trainer(workload, config)  # only the forms the workload's trainer runs (planner/trainers.py)
    model = CostModel(topology, workload)
    if config.work_limit is None:  # said before the work: the least work cannot fit in what the limit leaves
        least_work.say_if_short(model, config.method, config.time_limit_s,
                                Budget(config.time_limit_s, start=config.started_s).left())
    if config.method in FORCED_FORMS:
        plan = solve_forced(model, config)
    elif config.method != "ilp":
        if config.method not in BASELINES + EXTERNAL:
            raise PlacerError(f"unknown method {config.method!r}; choose one of {', '.join(METHODS)}")
        t0 = time.perf_counter()
        infeasible.check_dense(model)
        if config.method == "torchrec":  # TorchRec's own planner, bounded by the time limit
            from placer.torchrec_io.planner import describe, torchrec_plan

            trec = torchrec_plan(model, time_limit_s=config.time_limit_s)
            placements = trec.placements
            info = SolverInfo(backend="torchrec", status="heuristic", wall_s=time.perf_counter() - t0,
                              time_limit_s=config.time_limit_s, note=describe(trec))
        else:
            placements = run_baseline(config.method, model, seed=config.seed)
            info = SolverInfo(backend="heuristic", status="heuristic", wall_s=time.perf_counter() - t0)
        plan = make_plan(model, config.method, placements, info)
        plan = plan.model_copy(update={"solver": info.model_copy(
            update={"objective_step_time_s": plan.predicted["step_time_s"]})})
    else:
        plan = solve_ilp(model, config)
    if config.work_limit is not None:
        return with_robustness(model, plan)
    # the what-ifs are within the limit (SolveConfig.time_limit_s), for every method; they price the plan twice
    # afresh (23 s for 10,000 tables on 8 GPUs): where what the limit leaves cannot hold them, the plan goes
    # without them
    left = Budget(config.time_limit_s, start=config.started_s)._remaining()
    need = least_work.what_ifs_s(model)
    if left < need:
        return plan.model_copy(update={"robustness": {
            "skipped": f"the --time-limit of {config.time_limit_s:g} s left {max(left, 0.0):.1f} s, less than the "
                       f"skew what-ifs take here (about {need:.1f} s): run placer whatif on the plan for them"}})
    return with_robustness(model, plan)


def solve_forced(model: CostModel, config: SolveConfig) -> Plan:
    """The ILP with every table that allows the form ``config.method`` (forms.FORCED_FORMS) held to options of
    that form, without the baselines (none uses a form); the plan's method is the form. SpecError naming --method
    where no table allows it."""
    form = config.method
    allowed = storage.allowing(model.wl, form)
    if not allowed:
        raise SpecError(f"no table of workload {model.wl.name!r} allows {form} (tables[].{STORAGE[form].field}): the "
                        f"forced method {form} is the ILP with those tables held to it", field="--method")
    forced = replace(config, method="ilp", options=replace(config.options, forced_form=form))
    plan = solve_ilp(model, forced)
    held = sum(storage.uses(p, form) for p in plan.placements if p.table in set(allowed))
    said = (f"forced {form}: {held} of the {len(allowed)} tables that allow it hold it" if held else
            f"forced {form}: the menu has no {form} option for the {len(allowed)} tables that allow it on this "
            "machine (node_local needs several nodes), so the plan is the ILP's")
    solver = plan.solver.model_copy(update={"note": f"{said}; {plan.solver.note}" if plan.solver.note else said})
    return plan.model_copy(update={"method": form, "solver": solver})


def _offers_node_local(model: CostModel, cfg: OptionConfig) -> bool:
    """Whether the menu holds node-local replicas (a table allows them, several nodes) and no form is forced."""
    return (cfg.node_local and cfg.forced_form is None and len(model.topo.nodes) > 1
            and any(t.node_local for t in model.wl.tables))


def _baselines_apply(config: SolveConfig) -> bool:
    """Whether the baselines may be the plan or its warm start: not where a form is forced (they use none)."""
    return config.options.forced_form is None


def with_robustness(model: CostModel, plan: Plan) -> Plan:
    """``plan`` (priced by ``model``: make_plan's 'predicted' dict) with its 'robustness' block: step time at
    skew x0.8, x1, x1.2 (placer/skew.py)."""
    try:
        block = robustness(model, plan, base_s=plan.predicted["step_time_s"])
        return plan.model_copy(update={"robustness": block})
    except (SpecError, ValueError) as exc:  # a what-if must never cost the user the plan
        return plan.model_copy(update={"robustness": {"error": str(exc)}})


#: A homogeneous machine is planned in two stages (planner/two_stage.py) above this many GPUs, or above this many
#: (table, GPU) pairs: there the full ILP does not get near its optimum in a minute (measured on dgx-h100 with
#: production-856, 6,848 pairs: full ILP 55.4 ms at a 15.7% gap, two stages 53.4 ms at 11.7%; synthetic-1000:
#: 27.5 ms at 18.8% vs 26.6 ms at 3.4%; 30 s each).
FULL_ILP_MAX_GPUS = 8
FULL_ILP_MAX_PAIRS = 2000
#: The tie-break (planner/tiebreak.py) runs after a proven-optimal solve, or one whose gap is at most this
#: (or twice the gap tolerance): further from the bound, step time still matters more than where lookups go.
TIE_BREAK_MAX_GAP = 0.01
#: The baselines' child runs at niceness tuning.BASELINES_NICE beside a two-stage solve.


def solve_ilp(model: CostModel, config: SolveConfig) -> Plan:
    # its stages' wall seconds go to the plan: solver.stage_times_s
    budget = (Budget.of_work(config.work_limit, wall_start=config.started_s) if config.work_limit is not None
              else Budget(config.time_limit_s, start=config.started_s))
    tracker = Tracker(config.progress)
    tried_baseline = False  # the cheapest baseline tried first (the time limit too short), and none fit
    if not budget.deterministic:
        # said before the work started (_solve, least_work.py); the plan is the cheapest baseline's, the limit
        # named as cut
        if least_work.least_work_s(model) > budget.left() and _baselines_apply(config):
            plan = _cheapest_plan(model, config, budget, tracker, "the time limit left less than the least work")
            if plan is not None:
                return plan
            budget, tried_baseline = _no_baseline_fits(config, budget), True
    gpus = len(model.topo.gpus)
    if gpus > FULL_ILP_MAX_GPUS or (gpus > 1 and gpus * len(model.wl.tables) > FULL_ILP_MAX_PAIRS):
        sym = Symmetry.of(model.topo)
        if sym is not None:
            return _solve_two_stage(model, sym, config, budget, tracker, tried_baseline)
    if not budget.deterministic and not tried_baseline:
        # the options of every table on every device and every baseline come before the search, unbounded (8.6 s
        # for production-856 @ cpu-server, whose 5 s limit then ended after 16 s): where they cannot fit in what
        # the limit leaves, the cheapest baseline instead
        pairs = len(model.wl.tables) * gpus
        if (LEAST_WORK_S + (OPTIONS_S_PER_PAIR + 2 * WHAT_IF_S_PER_PAIR) * pairs > budget.left()
                and _baselines_apply(config)):
            plan = _cheapest_plan(model, config, budget, tracker, "the time limit left no time for the options")
            if plan is not None:
                return plan
            budget = _no_baseline_fits(config, budget)
    tracker.update("options and baselines")
    with budget.stage("options and baselines"):
        infeasible.check_dense(model)
        cfg = with_fit_levels(model, config.options)
        options = all_options(model.topo, model.wl, cfg)
        baselines = _feasible_baselines(model, config.seed) if _baselines_apply(config) else {}
        for _, placements in baselines.items():  # every baseline's choice is on the menu: ILP <= each baseline
            for p in placements:
                if p not in options[p.table]:
                    options[p.table].append(p)
        names = [t.name for t in model.wl.tables]
        costs = [[model.placement_cost(p) for p in options[n]] for n in names]
        problem = build_problem(costs, model.base_cost, sum(model.fixed_latency_s.values()), model.usable_memory,
                                len(PHASES))
        infeasible.explain_infeasible(model, problem, names, cfg)
        warm, warm_name = None, None
        best = None
        for name, placements in baselines.items():
            chosen = [problem.groups[ti][options[names[ti]].index(p)] for ti, p in enumerate(placements)]
            obj = problem.objective(chosen)
            if problem.fits(chosen) and (best is None or obj < best[0]):
                best = (obj, chosen, name)
        if best:
            _, warm, warm_name = best
    tracker.update(f"{config.solver}: branch and bound", incumbent_s=best[0] if best else None,
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
                               warm_start=warm, msg=config.msg, tracker=tracker,
                               budget=budget.child(_search_s(model, budget)))
    if result.chosen is None:
        if result.status == "infeasible":
            raise infeasible.after_solver(model, problem, cfg)
        if warm is None:
            raise PlacerError(f"{config.solver} found no solution within {_limit_text(config)} "
                              f"(try a longer {'--work-limit' if config.work_limit is not None else '--time-limit'})")
        result.chosen, result.objective_s = warm, problem.objective(warm)  # the best baseline stands
        result.status = "feasible"
    tie = None
    first_gap = (result.objective_s - result.lower_bound_s) / result.objective_s if result.objective_s else 0.0
    if result.status == "optimal" or first_gap <= max(2 * config.gap, TIE_BREAK_MAX_GAP):
        tracker.update("tie-break: fewest lookups from slow memory")
        with budget.stage("tie-break"):
            problem, tie = _tie_break(model, config, problem, options, costs, result, best[0] if best else None,
                                      budget.child(SCHEDULE.tie_break_s(budget, keep_s=after_solve_s(model))))
    offset = {n: problem.groups[i][0] for i, n in enumerate(names)}
    placements = [options[n][oid - offset[n]] for n, oid in zip(names, result.chosen)]
    gap = (result.objective_s - result.lower_bound_s) / result.objective_s if result.objective_s else 0.0
    tracker.update("done", incumbent_s=result.objective_s, bound_s=result.lower_bound_s)
    info = SolverInfo(
        backend=config.solver, status=result.status, objective_step_time_s=result.objective_s,
        lower_bound_step_time_s=result.lower_bound_s, gap=max(gap, 0.0), gap_tolerance=config.gap,
        time_limit_s=config.time_limit_s, wall_s=budget.wall_elapsed(), num_variables=result.num_variables,
        num_constraints=result.num_constraints, tie_break=tie,
        warm_start=f"{warm_name}, {result.warm_start}" if warm_name else "none",
        note=("optimal = proven within gap_tolerance of the solver's bound" if result.status == "optimal"
              else f"{budget.limit_name} reached: feasible, gap to the best valid lower bound") + _limit_note(budget),
        stage_times_s=dict(budget.stages), **_work_record(config, budget))
    return make_plan(model, "ilp", placements, info)


def _no_baseline_fits(config: SolveConfig, budget: Budget) -> Budget:
    """The budget the ILP gets where no baseline fits (the ILP is then the least work: it may split tables, or
    prove that nothing fits): at least SCHEDULE.no_baseline_min_s from now, past the limit (said on stderr)."""
    if not _baselines_apply(config):  # a forced form: its first plan, said before the work (least_work.py)
        return budget.at_least(SCHEDULE.forced_min_s)
    least = SCHEDULE.no_baseline_min_s
    if budget.left() >= least:
        return budget
    print(f"placer: no baseline fits; the ILP, which may split tables or show that nothing fits, gets at least "
          f"{least:g} s from now, past the --time-limit of {config.time_limit_s:g} s",
          file=sys.stderr, flush=True)
    return budget.at_least(least)


def _cheapest_baseline(model: CostModel, seed: int) -> tuple[str, list[Placement]] | None:
    """(name, placements) of the first baseline in BASELINE_ORDER that fits (greedy_size first), or None."""
    return next(iter(_each_feasible_baseline(model, seed, BASELINE_ORDER)), None)


def _cheapest_plan(model: CostModel, config: SolveConfig, budget: Budget, tracker: Tracker, why: str
                   ) -> Plan | None:
    """Where the time limit cannot hold the least work: the first baseline that fits (greedy_size first) as the
    plan, the ILP named as cut by the limit; None where no baseline fits (the ILP may split tables)."""
    tracker.update("baseline: greedy_size (the time limit leaves no time for the ILP)")
    with budget.stage("baseline"):
        infeasible.check_dense(model)
        found = _cheapest_baseline(model, config.seed)
    if found is None:
        return None
    budget.note_ran_out("ilp")
    name, placements = found
    tracker.update("done")
    info = SolverInfo(backend=f"{config.solver} (not run: {why})", status="heuristic",
                      time_limit_s=config.time_limit_s, wall_s=budget.wall_elapsed(), gap_tolerance=config.gap,
                      warm_start="none", note=f"plan from {name}: {why}" + _limit_note(budget),
                      stage_times_s=dict(budget.stages), **_work_record(config, budget))
    plan = make_plan(model, "ilp", placements, info)
    return plan.model_copy(update={"solver": plan.solver.model_copy(
        update={"objective_step_time_s": plan.predicted["step_time_s"]})})


def _limit_text(config: SolveConfig) -> str:
    """The limit a solve ran under, in words."""
    if config.work_limit is not None:
        return f"{config.work_limit:g} work units"
    return f"{config.time_limit_s:g} s"


def _work_record(config: SolveConfig, budget: Budget) -> dict:
    """SolverInfo fields of the search a solve did: the work units counted (in total and per stage; under a work
    limit also the limit, which they are measured against) and the stages whose budget ran out (``ran_out``:
    under a time limit, where a faster or busier machine can change the plan)."""
    return {"work_limit": config.work_limit, "work_used": round(budget.counted() / WORK_UNIT_S, 3),
            "stage_work": {k: round(v / WORK_UNIT_S, 3) for k, v in budget.stage_work.items()},
            "ran_out": sorted(budget.ran_out)}


def _limit_note(budget: Budget) -> str:
    """What the plan's note says of the stages the limit cut ("" if none)."""
    if not budget.ran_out:
        return ""
    names = ", ".join(sorted(budget.ran_out))
    if budget.deterministic:
        return f"; the work limit cut: {names}"
    return (f"; the time limit cut: {names} (a faster or busier machine can give another plan and bound; "
            "--work-limit gives the same on any machine)")


def _tie_break(model: CostModel, config: SolveConfig, problem: Problem, options: dict[str, list[Placement]],
               costs: list[list], result: ilp.IlpResult, ceiling_s: float | None, budget: Budget
               ) -> tuple[Problem, dict]:
    """The single-stage tie-break (planner/tiebreak.py) of ``result`` (its ``chosen`` and ``objective_s``
    updated in place): (the problem, with the levels that fill the first plan's free HBM; the tie-break's
    record). ``options`` and ``costs`` gain those levels."""
    names = [t.name for t in model.wl.tables]
    first = [options[n][oid - problem.groups[i][0]] for i, (n, oid) in enumerate(zip(names, result.chosen))]
    fill = tiebreak.fill_options(model, first)
    if fill:  # levels that fill the first plan's free HBM: appended, so every chosen option keeps its place
        pos = [oid - problem.groups[i][0] for i, oid in enumerate(result.chosen)]
        for i, n in enumerate(names):
            options[n].extend(fill.get(n, []))
            costs[i].extend(model.placement_cost(q) for q in fill.get(n, []))
        problem = build_problem(costs, model.base_cost, sum(model.fixed_latency_s.values()),
                                model.usable_memory, len(PHASES))
        result.chosen = [problem.groups[i][k] for i, k in enumerate(pos)]
    result.chosen, tie = tiebreak.tie_break(
        model, problem, [options[n] for n in names], result.chosen, result.lower_bound_s, config.gap,
        backend=config.solver, threads=config.threads, ceiling_s=ceiling_s, budget=budget)
    result.objective_s = problem.objective(result.chosen)
    tie["fill_levels_added"] = sum(len(v) for v in fill.values())
    return problem, tie


def _feasible_baselines(model: CostModel, seed: int) -> dict[str, list[Placement]]:
    """Baseline name -> its placements, for every baseline that fits."""
    return dict(_each_feasible_baseline(model, seed, BASELINES))


def _each_feasible_baseline(model: CostModel, seed: int, names) -> Iterator[tuple[str, list[Placement]]]:
    """(name, placements) of the baselines ``names`` that fit, one by one in that order."""
    for name in names:
        try:
            yield name, run_baseline(name, model, seed=seed)
        except InfeasibleError:
            continue
        except SpecError:  # a form the workload's trainer cannot run (a host table under torchrec): not a plan
            if model.trainer == "placer":
                raise


def _search_s(model: CostModel, budget: Budget) -> float:
    """The single-stage branch and bound's seconds (SCHEDULE.search_s): under a time limit, what the limit leaves
    after the options and baselines less after_solve_s, so that the command ends within its limit (it ran the whole
    limit from its own start, then the tie-break and pricing: 30 s cases ended at up to 32.6 s); under a work
    limit, what is left of it."""
    return SCHEDULE.search_s(budget, after_solve_s(model))


def after_solve_s(model: CostModel) -> float:
    """Seconds to keep, of a large solve's limit, for pricing the plan and its what-ifs after it (schedule.py)."""
    return SCHEDULE.after_solve_s(len(model.wl.tables) * len(model.topo.gpus))


#: The order a two-stage solve's child prices the baselines in (each sent back when priced, solve waits for them
#: only until its limit leaves it no more time): the cheap ones, which are the best on the large machines, first.
#: Measured alone on synthetic-1000 @ dgx-h100-32node, run and priced, s: host_cpu 9.5 (first: the cost model's
#: caches filled), uvm 3.2, greedy_size 1.7, round_robin 4.0, random 4.2, fae 3.0; step times 631, 174, 27.2,
#: 28.8, 32.6 and 27.3 ms.
BASELINE_ORDER = ("greedy_size", "fae", "round_robin", "random", "uvm", "host_cpu")


def _priced_baselines(model: CostModel, seed: int) -> Iterator[tuple[float, str, list[Placement]]]:
    """(step time s, name, placements) of every baseline that fits, one by one in BASELINE_ORDER."""
    hw, wl = _refs(model.topo, model.wl)
    for name, placements in _each_feasible_baseline(model, seed, BASELINE_ORDER):
        plan = Plan(hardware=hw, workload=wl, method=name, placements=placements)
        yield predict(model, plan)["step_time_s"], name, placements


def _solve_two_stage(model: CostModel, sym: Symmetry, config: SolveConfig, budget: Budget, tracker: Tracker,
                     tried_baseline: bool = False) -> Plan:
    """Aggregated ILP + assignment; the plan is the better of it and every baseline, priced exactly, then the
    local tie-break (planner/tiebreak_local.py: host/UVM tables into free HBM, step at most the single-stage
    tie-break's cap), recorded as solver.tie_break; the stages' wall seconds as solver.stage_times_s."""
    hw, wl = _refs(model.topo, model.wl)
    with budget.stage("model"):
        infeasible.check_dense(model)
        infeasible.check_tables(model, config.options)
    if (not budget.deterministic and not tried_baseline and _baselines_apply(config)
            and budget.left() - SCHEDULE.pricing_reserve_s - after_solve_s(model) < SCHEDULE.min_stages_s):
        # the stages would stop at once (their kinds' deadline passed): the cheapest baseline here, at full
        # priority, instead of waiting for the baselines' child (synthetic-1000 @ dgx-h100-32node at 10 s)
        plan = _cheapest_plan(model, config, budget, tracker, "the time limit left no time for the two stages")
        if plan is not None:
            return plan
        budget = _no_baseline_fits(config, budget)
    # the baselines, priced, on a second core while the stages run (placer/executor.py), yielding the cores to the
    # stages' own work (the option kinds fold in two processes); the plan is the best of them and the two
    # stages' either way (under a time limit, of those priced by the end of stage 2: synthetic-1000 @
    # dgx-h100-32node at 60 s waited 3.3-4.9 s past it for all of them)
    baselines = (BackgroundParts(lambda: _priced_baselines(model, config.seed), nice=BASELINES_NICE)
                 if _baselines_apply(config) else None)
    try:
        with budget.stage("option kinds"):
            cfg = with_fit_levels(model, config.options)
        # a work budget is charged for the setup (deterministic) as a time budget spends it (effort.py)
        budget.charge(effort.SETUP_S_PER_PAIR * len(model.wl.tables) * len(model.topo.gpus))
        # what is left less the reserves (schedule.py; a work limit's floor clipped to the limit too)
        seconds = SCHEDULE.two_stage_s(budget, after_solve_s(model))
        local = _offers_node_local(model, cfg)  # then a share for the stages with them, the rest without
        share = SCHEDULE.node_local_share if local else 1.0
        fallback = least_work.first_plan_s(model) if baselines is not None else 0.0
        stages = solve_two_stage(model, sym, cfg, budget=budget.child(seconds * share), gap=config.gap,
                                 backend=config.solver, threads=config.threads, tracker=tracker, fallback_s=fallback)
        placements, bound, stage1 = stages.placements, stages.bound_s, stages.stage1
        without = None
        if local:
            # node-local kinds can steer stage 1 to choices stage 2 cannot realise (criteo-terabyte-node-local @
            # dgx-h100-2node: 1.212 ms with them, 1.165 ms without at 30 s): the stages without them as well, a
            # candidate; the bound stays that of the whole menu
            without = solve_two_stage(model, sym, replace(cfg, node_local=False), budget=budget.child(
                SCHEDULE.two_stage_s(budget, after_solve_s(model))), gap=config.gap, backend=config.solver,
                threads=config.threads, tracker=tracker).placements
        candidates, complete = [], True
        if baselines is not None:
            tracker.update("baselines (computed beside the stages)")
            with budget.stage("baselines (waited for)"):
                wait = SCHEDULE.baselines_wait_s(budget, after_solve_s(model))
                # with no plan of its own, the solve waits for the first baseline (greedy_size) past the limit, as
                # it would compute it itself (it never ends without a plan where a baseline fits)
                candidates, complete = baselines.collect(wait, at_least=0 if placements else 1)
        if not complete:
            budget.note_ran_out("baselines")
    finally:
        if baselines is not None:
            baselines.close()
    # no child, or it died
    if baselines is not None and not candidates and not complete and not placements and stage1.status != "infeasible":
        with budget.stage("baseline"):
            found = _cheapest_baseline(model, config.seed)
        if found is not None:
            plan = Plan(hardware=hw, workload=wl, method=found[0], placements=found[1])
            candidates.append((predict(model, plan)["step_time_s"], found[0], found[1]))
    if not candidates and not placements and stage1.status == "no_solution" and not budget.deterministic:
        # the limit cut the stages and no baseline fits: the stages again, with the time they need to place the
        # tables or prove that nothing fits (synthetic-1000 @ pcie-4gpu-workstation at 10 s exited 1, not 3)
        budget = _no_baseline_fits(config, budget)
        stages = solve_two_stage(
            model, sym, cfg, budget=budget.child(SCHEDULE.two_stage_s(budget, after_solve_s(model))),
            gap=config.gap, backend=config.solver, threads=config.threads, tracker=tracker)
        placements, bound, stage1 = stages.placements, stages.bound_s, stages.stage1
    if candidates:
        tracker.update(incumbent_s=min(c[0] for c in candidates))
    if stage1.status == "infeasible":
        raise infeasible.after_solver(model, None, config.options)
    for source, found in (("two_stage", placements), ("two_stage without node-local", without)):
        if found:
            plan = Plan(hardware=hw, workload=wl, method="ilp", placements=found)
            candidates.append((predict(model, plan)["step_time_s"], source, found))
    if not candidates:
        raise PlacerError("the two-stage planner found no assignment and no baseline fits "
                          "(try --solver highs or a longer --time-limit)")
    step, source, best = min(candidates, key=lambda c: c[0])
    tracker.update("tie-break: fewest lookups from slow memory (local search)")
    ceiling = min((c[0] for c in candidates if not c[1].startswith("two_stage")), default=None)
    # at most what the limit leaves after pricing the plan (synthetic-1000 @ dgx-h100-32node has tables in host
    # memory to try for 10 s, which ran the command 7 s past a 60 s limit)
    tie_budget = budget.child(SCHEDULE.tie_break_s(budget, keep_s=after_solve_s(model)))
    # it prices the whole plan afresh first (half the what-ifs: 3-8 s on 256 GPUs): with less time left than that
    # it would only overrun (synthetic-1000 @ dgx-h100-32node at 30 s: 7.8 s of its 0.5, the command 35.7 s)
    if not budget.deterministic and tie_budget.seconds < least_work.what_ifs_s(model) / 2:
        budget.note_ran_out("tie-break")
        tie = {"objective": tiebreak_local.OBJECTIVE, "method": tiebreak_local.METHOD, "moves": [],
               "step_time_before_s": step, "step_time_after_s": step, "result": "skipped: the time limit was spent"}
    else:
        with budget.stage("tie-break"):
            best, tie = tiebreak_local.local_tie_break(
                model, best, tiebreak_local.step_cap(step, bound, config.gap, ceiling), cfg, budget=tie_budget)
    step = tie["step_time_after_s"]
    gap = max(0.0, (step - bound) / step)
    tracker.update("done", incumbent_s=step, bound_s=min(bound, step))
    status = "optimal" if gap <= config.gap else "feasible"
    no_bound = stage1.chosen is None and bound <= 0  # the limit cut the stages before stage 1 had a bound
    info = SolverInfo(
        backend=f"{config.solver} (two-stage)", status=status, objective_step_time_s=step,
        lower_bound_step_time_s=None if no_bound else min(bound, step), gap=None if no_bound else gap,
        gap_tolerance=config.gap,
        time_limit_s=config.time_limit_s, wall_s=budget.wall_elapsed(),
        num_variables=stage1.num_variables, num_constraints=stage1.num_constraints, warm_start="none",
        tie_break=tie,
        note=((f"two-stage: aggregated ILP over symmetry classes ({stage1.status}) gives the bound; " if not no_bound
               else f"two-stage: cut by the time limit before stage 1 chose ({stage1.backend}), no bound; ")
              + f"plan from {source}" + ("; optimal = within gap_tolerance of that bound" if status == "optimal"
                                         else "") + _limit_note(budget)),
        stage_times_s=dict(budget.stages), **_work_record(config, budget))
    return make_plan(model, "ilp", best, info)
