"""The two-stage solve as a pipeline (solve_run.py): aggregated ILP + assignment (two_stage.py), the baselines
priced beside it in a child, the better plan, the local tie-break, the plan.

PIPELINE, in order: the model's checks, the cheapest baseline where the limit leaves no time for the stages, the
stages (a portfolio: with node-local replicas, then without them, where the menu has them) with the baselines
priced beside them, the stages again where the limit cut them and no baseline fits, the best candidate, its local
tie-break (host/UVM tables into free HBM, the step at most the single-stage tie-break's cap), the plan.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from placer.cost import CostModel
from placer.errors import PlacerError
from placer.executor import BackgroundParts
from placer.options import OptionConfig
from placer.plan import Placement, Plan, SolverInfo
from placer.planner import effort, infeasible, least_work, portfolio, tiebreak_local
from placer.planner.constrained import check_menus
from placer.planner.fit import with_fit_levels
from placer.planner.schedule import SCHEDULE
from placer.planner.solve_run import (BASELINE_ORDER, SolveRun, cheapest_baseline, cheapest_or_extended,
                                      each_feasible_baseline, limit_note, make_plan, no_baseline_fits, priced,
                                      through, work_record)
from placer.planner.symmetry import Symmetry
from placer.planner.tuning import BASELINES_NICE
from placer.planner.two_stage import solve_two_stage
from placer.planner.types import TwoStageResult

#: The source a candidate plan of the stages is named by (the others are the baselines' names).
STAGES = "two_stage"


@dataclass
class TwoStage(SolveRun):
    """A two-stage solve's state: the machine's ``sym``metry, the option config ``cfg``, the stages' answer
    (``stages``; ``without``: the stages' placements without node-local kinds), the ``candidates`` (step s, source,
    placements) and whether every baseline came back (``complete``); then the chosen plan's ``step``, ``source``,
    ``best`` placements and the tie-break's record ``tie``."""

    sym: Symmetry | None = None
    cfg: OptionConfig | None = None
    stages: TwoStageResult | None = None
    without: list[Placement] | None = None
    candidates: list[tuple[float, str, list[Placement]]] = field(default_factory=list)
    complete: bool = True
    step: float = 0.0
    source: str = ""
    best: list[Placement] = field(default_factory=list)
    tie: dict | None = None


def solve(run: SolveRun, sym: Symmetry) -> Plan:
    """The plan of ``run`` (a single-stage run handing over: its inputs, budget, tracker) in two stages."""
    return through(TwoStage(run.model, run.config, run.budget, run.tracker, run.tried_baseline, sym=sym), PIPELINE)


def _check_model(run: TwoStage) -> None:
    with run.budget.stage("model"):
        infeasible.check_dense(run.model)
        infeasible.check_tables(run.model, run.config.options)
        check_menus(run.model, cfg=run.config.options)  # exit 3 naming the constraints in conflict


def _no_time_for_stages(run: TwoStage) -> Plan | None:
    """The stages would stop at once (their kinds' deadline passed): the cheapest baseline here, at full priority,
    instead of waiting for the baselines' child (synthetic-1000 @ dgx-h100-32node at 10 s)."""
    if (not run.budget.deterministic and not run.tried_baseline and run.baselines_apply
            and run.budget.left() - SCHEDULE.pricing_reserve_s - run.after_solve_s < SCHEDULE.min_stages_s):
        return cheapest_or_extended(run, "the time limit left no time for the two stages")
    return None


def _stages_and_baselines(run: TwoStage) -> None:
    """The stages, with the baselines priced on a second core meanwhile (placer/executor.py), yielding the cores
    to the stages' own work (the option kinds fold in two processes); the candidates are the baselines priced by
    the end of the stages (under a time limit: synthetic-1000 @ dgx-h100-32node at 60 s waited 3.3-4.9 s past it
    for all of them) and, later, the stages' plans."""
    budget, model = run.budget, run.model
    baselines = (BackgroundParts(lambda: priced_baselines(model, run.config.seed), nice=BASELINES_NICE)
                 if run.baselines_apply else None)
    try:
        with budget.stage("option kinds"):
            run.cfg = with_fit_levels(model, run.config.options)
        # a work budget is charged for the setup (deterministic) as a time budget spends it (effort.py)
        budget.charge(effort.SETUP_S_PER_PAIR * len(model.wl.tables) * len(model.topo.gpus))
        _stage_passes(run, fallback_s=least_work.first_plan_s(model) if baselines is not None else 0.0)
        if baselines is not None:
            run.tracker.update("baselines (computed beside the stages)")
            with budget.stage("baselines (waited for)"):
                wait = SCHEDULE.baselines_wait_s(budget, run.after_solve_s)
                # with no plan of its own, the solve waits for the first baseline (greedy_size) past the limit, as
                # it would compute it itself (it never ends without a plan where a baseline fits)
                run.candidates, run.complete = baselines.collect(wait, at_least=0 if run.stages.placements else 1)
        if not run.complete:
            budget.note_ran_out("baselines")
    finally:
        if baselines is not None:
            baselines.close()
    if (baselines is not None and not run.candidates and not run.complete and not run.stages.placements
            and run.stages.stage1.status != "infeasible"):  # no child, or it died: the cheapest baseline here
        with budget.stage("baseline"):
            found = cheapest_baseline(model, run.config.seed)
        if found is not None:
            run.candidates.append((priced(model, found[0], found[1]), found[0], found[1]))


def _stage_passes(run: TwoStage, fallback_s: float) -> None:
    """The stages as a portfolio (portfolio.py, SCHEDULE.two_stage_pass_s): with node-local kinds where the menu
    has them, then without them (node-local kinds can steer stage 1 to choices stage 2 cannot realise:
    criteo-terabyte-node-local @ dgx-h100-2node 1.212 ms with them, 1.165 ms without at 30 s), a candidate too;
    the bound stays that of the whole menu."""
    def stages(cfg: OptionConfig, fallback: float):
        return lambda seconds: solve_two_stage(
            run.model, run.sym, cfg, budget=run.budget.child(seconds), gap=run.config.gap,
            backend=run.config.solver, threads=run.config.threads, tracker=run.tracker, fallback_s=fallback)

    entries = [portfolio.Entry("the two stages", stages(run.cfg, fallback_s))]
    if _offers_node_local(run.model, run.cfg):
        entries.append(portfolio.Entry("the two stages without node-local", stages(
            replace(run.cfg, node_local=False), 0.0)))
    answers = [answer for _, _, answer in portfolio.run(
        entries, lambda left: SCHEDULE.two_stage_pass_s(run.budget, run.after_solve_s, left))]
    run.stages, run.without = answers[0], answers[1].placements if len(answers) > 1 else None


def _again_if_cut(run: TwoStage) -> None:
    """The limit cut the stages and no baseline fits: the stages again, with the time they need to place the
    tables or prove that nothing fits (synthetic-1000 @ pcie-4gpu-workstation at 10 s exited 1, not 3)."""
    if (not run.candidates and not run.stages.placements and run.stages.stage1.status == "no_solution"
            and not run.budget.deterministic):
        run.budget = no_baseline_fits(run)
        run.stages = solve_two_stage(
            run.model, run.sym, run.cfg, budget=run.budget.child(SCHEDULE.two_stage_s(run.budget, run.after_solve_s)),
            gap=run.config.gap, backend=run.config.solver, threads=run.config.threads, tracker=run.tracker)


def _choose(run: TwoStage) -> None:
    """The fastest candidate: the baselines priced and the stages' plans (InfeasibleError where stage 1 proved
    nothing fits; PlacerError where there is no candidate)."""
    if run.candidates:
        run.tracker.update(incumbent_s=min(c[0] for c in run.candidates))
    if run.stages.stage1.status == "infeasible":
        raise infeasible.after_solver(run.model, None, run.config.options)
    for source, found in ((STAGES, run.stages.placements), (f"{STAGES} without node-local", run.without)):
        if found:
            run.candidates.append((priced(run.model, "ilp", found), source, found))
    if not run.candidates:
        raise PlacerError("the two-stage planner found no assignment and no baseline fits "
                          "(try --solver highs or a longer --time-limit)")
    run.step, run.source, run.best = min(run.candidates, key=lambda c: c[0])


def _local_tie_break(run: TwoStage) -> None:
    """The local tie-break (tiebreak_local.py), its step capped by the bound, the gap and the best baseline; at
    most what the limit leaves after pricing the plan (synthetic-1000 @ dgx-h100-32node has tables in host memory
    to try for 10 s, which ran the command 7 s past a 60 s limit)."""
    budget, step = run.budget, run.step
    run.tracker.update("tie-break: fewest lookups from slow memory (local search)")
    ceiling = min((c[0] for c in run.candidates if not c[1].startswith(STAGES)), default=None)
    tie_budget = budget.child(SCHEDULE.tie_break_s(budget, keep_s=run.after_solve_s))
    # it prices the whole plan afresh first (half the what-ifs: 3-8 s on 256 GPUs): with less time left than that
    # it would only overrun (synthetic-1000 @ dgx-h100-32node at 30 s: 7.8 s of its 0.5, the command 35.7 s)
    if not budget.deterministic and tie_budget.seconds < least_work.what_ifs_s(run.model) / 2:
        budget.note_ran_out("tie-break")
        run.tie = {"objective": tiebreak_local.OBJECTIVE, "method": tiebreak_local.METHOD, "moves": [],
                   "step_time_before_s": step, "step_time_after_s": step,
                   "result": "skipped: the time limit was spent"}
    else:
        with budget.stage("tie-break"):
            run.best, run.tie = tiebreak_local.local_tie_break(
                run.model, run.best, tiebreak_local.step_cap(step, run.stages.bound_s, run.config.gap, ceiling),
                run.cfg, budget=tie_budget)


def _the_plan(run: TwoStage) -> Plan:
    """The chosen placements as the plan, with the solver's record (the bound is stage 1's, of the whole menu)."""
    config, budget, stage1, bound = run.config, run.budget, run.stages.stage1, run.stages.bound_s
    step = run.tie["step_time_after_s"]
    gap = max(0.0, (step - bound) / step)
    run.tracker.update("done", incumbent_s=step, bound_s=min(bound, step))
    status = "optimal" if gap <= config.gap else "feasible"
    no_bound = stage1.chosen is None and bound <= 0  # the limit cut the stages before stage 1 had a bound
    info = SolverInfo(
        backend=f"{config.solver} (two-stage)", status=status, objective_step_time_s=step,
        lower_bound_step_time_s=None if no_bound else min(bound, step), gap=None if no_bound else gap,
        gap_tolerance=config.gap,
        time_limit_s=config.time_limit_s, wall_s=budget.wall_elapsed(),
        num_variables=stage1.num_variables, num_constraints=stage1.num_constraints, warm_start="none",
        tie_break=run.tie,
        note=((f"two-stage: aggregated ILP over symmetry classes ({stage1.status}) gives the bound; " if not no_bound
               else f"two-stage: cut by the time limit before stage 1 chose ({stage1.backend}), no bound; ")
              + f"plan from {run.source}" + ("; optimal = within gap_tolerance of that bound" if status == "optimal"
                                             else "") + limit_note(budget)),
        stage_times_s=dict(budget.stages), **work_record(config, budget))
    return make_plan(run.model, "ilp", run.best, info)


#: The two-stage solve, step by step (solve_run.through runs it).
PIPELINE = (("model", _check_model), ("no time for the stages", _no_time_for_stages),
            ("stages and baselines", _stages_and_baselines), ("stages again", _again_if_cut),
            ("choose", _choose), ("tie-break", _local_tie_break), ("plan", _the_plan))


def priced_baselines(model: CostModel, seed: int) -> Iterator[tuple[float, str, list[Placement]]]:
    """(step time s, name, placements) of every baseline that fits, one by one in BASELINE_ORDER (the child)."""
    for name, placements in each_feasible_baseline(model, seed, BASELINE_ORDER):
        yield priced(model, name, placements), name, placements


def _offers_node_local(model: CostModel, cfg: OptionConfig) -> bool:
    """Whether the menu holds node-local replicas (a table allows them, several nodes) and no form is forced."""
    return (cfg.node_local and cfg.forced_form is None and len(model.topo.nodes) > 1
            and any(t.node_local for t in model.wl.tables))
