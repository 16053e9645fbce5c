"""One ILP solve as a declared pipeline over one state: the steps, in order, each reading and writing a SolveRun.

An ILP solve is a list of named steps (single_stage.PIPELINE, two_stage_solve.PIPELINE); ``through`` runs them in
order until one returns the plan (a step that finds the answer early, the cheapest baseline where the limit leaves
no time for the search, ends the run there). Every step reads and writes the run's state (SolveRun: the cost
model, the config, the one Budget all its stages are children of, the progress tracker and what the earlier steps
found) and asks the Schedule (schedule.py) for any time it takes. What the two pipelines share is here: the plan
made and checked (make_plan), the cheapest baseline as the plan, the budget where no baseline fits, the baselines
in their order, and the solver record's limit fields.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from placer.cost import CostModel
from placer.errors import InfeasibleError, SolverError, SpecError
from placer.plan import Placement, Plan, SolverInfo, SpecRef
from placer.plan_check import check_plan
from placer.planner import infeasible
from placer.planner.baselines import run_baseline
from placer.planner.budget import WORK_UNIT_S, Budget
from placer.planner.progress import Tracker
from placer.planner.schedule import SCHEDULE
from placer.simulate import predict
from placer.specs.workload import Workload
from placer.topology import Topology

if TYPE_CHECKING:  # a type only: solve.py imports this module
    from placer.planner.solve import SolveConfig

#: The order the baselines are tried in where one must stand for the plan, and the order a two-stage solve's child
#: prices them in (each sent back when priced, solve waits for them only until its limit leaves it no more time):
#: the cheap ones, which are the best on the large machines, first. Measured alone on synthetic-1000 @
#: dgx-h100-32node, run and priced, s: host_cpu 9.5 (first: the cost model's caches filled), uvm 3.2, greedy_size
#: 1.7, round_robin 4.0, random 4.2, fae 3.0; step times 631, 174, 27.2, 28.8, 32.6 and 27.3 ms.
BASELINE_ORDER = ("greedy_size", "fae", "round_robin", "random", "uvm", "host_cpu")


@dataclass
class SolveRun:
    """The state an ILP solve's steps share: the inputs, the one budget, the tracker, and ``tried_baseline``
    (the cheapest baseline was tried first, the limit being too short, and none fit)."""

    model: CostModel
    config: SolveConfig
    budget: Budget
    tracker: Tracker
    tried_baseline: bool = False

    @property
    def baselines_apply(self) -> bool:
        """Whether the baselines may be the plan or its warm start: not where a form is forced (they use none)."""
        return self.config.options.forced_form is None

    @property
    def after_solve_s(self) -> float:
        """Seconds to keep of the limit for pricing the plan and its what-ifs after the solve (schedule.py)."""
        return after_solve_s(self.model)


#: A step of a pipeline: it updates the run, and returns the plan where the run ends with it (else None).
Step = Callable[[SolveRun], "Plan | None"]


def through(run: SolveRun, pipeline: Sequence[tuple[str, Step]]) -> Plan:
    """The plan of ``run``: its pipeline's steps in order until one returns a plan (the last one always does)."""
    for _, step in pipeline:
        plan = step(run)
        if plan is not None:
            return plan
    raise AssertionError("a pipeline's last step returns the plan")


def after_solve_s(model: CostModel) -> float:
    """Seconds to keep, of a large solve's limit, for pricing the plan and its what-ifs after it (schedule.py)."""
    return SCHEDULE.after_solve_s(len(model.wl.tables) * len(model.topo.gpus))


def refs(topo: Topology, wl: Workload) -> tuple[SpecRef, SpecRef]:
    """The plan's references to its hardware and workload specs (name and hash)."""
    return SpecRef(name=topo.spec.name, sha256=topo.spec.sha256), SpecRef(name=wl.name, sha256=wl.sha256)


def make_plan(model: CostModel, method: str, placements: list[Placement], solver: SolverInfo) -> Plan:
    """The plan of ``placements`` made by ``method``, checked as a plan file is (plan_check.check_plan: every table
    placed once, its rows and columns covered exactly once, on devices of the right kind), then priced. A plan
    that fails the check is a bug of that method, not the user's: SolverError naming the method and the fault."""
    hw, wl = refs(model.topo, model.wl)
    plan = Plan(hardware=hw, workload=wl, method=method, placements=placements, solver=solver)
    try:
        check_plan(plan, model.topo, model.wl, check_hashes=False)
    except SpecError as exc:
        raise SolverError(f"the {method} planner made a plan that does not hold: {exc} (a bug in placer; "
                          "please report it with the hardware and workload files)") from None
    return plan.model_copy(update={"predicted": predict(model, plan)})


def priced(model: CostModel, name: str, placements: list[Placement]) -> float:
    """The predicted step time, seconds, of ``placements`` as a plan (unchecked: a baseline's or the stages')."""
    hw, wl = refs(model.topo, model.wl)
    return predict(model, Plan(hardware=hw, workload=wl, method=name, placements=placements))["step_time_s"]


def each_feasible_baseline(model: CostModel, seed: int, names) -> Iterator[tuple[str, list[Placement]]]:
    """(name, placements) of the baselines ``names`` that fit, one by one in that order."""
    for name in names:
        try:
            yield name, run_baseline(name, model, seed=seed)
        except InfeasibleError:
            continue
        except SpecError:  # a form the workload's trainer cannot run (a host table under torchrec): not a plan
            if model.trainer == "placer":
                raise


def cheapest_baseline(model: CostModel, seed: int) -> tuple[str, list[Placement]] | None:
    """(name, placements) of the first baseline in BASELINE_ORDER that fits (greedy_size first), or None."""
    return next(iter(each_feasible_baseline(model, seed, BASELINE_ORDER)), None)


def cheapest_plan(run: SolveRun, why: str) -> Plan | None:
    """Where the time limit cannot hold the least work: the first baseline that fits (greedy_size first) as the
    plan, the ILP named as cut by the limit; None where no baseline fits (the ILP may split tables)."""
    model, config, budget = run.model, run.config, run.budget
    run.tracker.update("baseline: greedy_size (the time limit leaves no time for the ILP)")
    with budget.stage("baseline"):
        infeasible.check_dense(model)
        found = cheapest_baseline(model, config.seed)
    if found is None:
        return None
    budget.note_ran_out("ilp")
    name, placements = found
    run.tracker.update("done")
    info = SolverInfo(backend=f"{config.solver} (not run: {why})", status="heuristic",
                      time_limit_s=config.time_limit_s, wall_s=budget.wall_elapsed(), gap_tolerance=config.gap,
                      warm_start="none", note=f"plan from {name}: {why}" + limit_note(budget),
                      stage_times_s=dict(budget.stages), **work_record(config, budget))
    plan = make_plan(model, "ilp", placements, info)
    return plan.model_copy(update={"solver": plan.solver.model_copy(
        update={"objective_step_time_s": plan.predicted["step_time_s"]})})


def cheapest_or_extended(run: SolveRun, why: str) -> Plan | None:
    """The cheapest baseline as the plan (cheapest_plan); where none fits, None with the run's budget extended for
    the ILP (no_baseline_fits) and ``tried_baseline`` set."""
    plan = cheapest_plan(run, why)
    if plan is None:
        run.budget, run.tried_baseline = no_baseline_fits(run), True
    return plan


def no_baseline_fits(run: SolveRun) -> Budget:
    """The budget the ILP gets where no baseline fits (the ILP is then the least work: it may split tables, or
    prove that nothing fits): at least SCHEDULE.no_baseline_min_s from now, past the limit (said on stderr)."""
    budget = run.budget
    if not run.baselines_apply:  # a forced form: its first plan, said before the work (least_work.py)
        return budget.at_least(SCHEDULE.forced_min_s)
    least = SCHEDULE.no_baseline_min_s
    if budget.left() >= least:
        return budget
    print(f"placer: no baseline fits; the ILP, which may split tables or show that nothing fits, gets at least "
          f"{least:g} s from now, past the --time-limit of {run.config.time_limit_s:g} s",
          file=sys.stderr, flush=True)
    return budget.at_least(least)


def limit_text(config: SolveConfig) -> str:
    """The limit a solve ran under, in words."""
    if config.work_limit is not None:
        return f"{config.work_limit:g} work units"
    return f"{config.time_limit_s:g} s"


def work_record(config: SolveConfig, budget: Budget) -> dict:
    """SolverInfo fields of the search a solve did: the work units counted (in total and per stage; under a work
    limit also the limit, which they are measured against) and the stages whose budget ran out (``ran_out``:
    under a time limit, where a faster or busier machine can change the plan)."""
    return {"work_limit": config.work_limit, "work_used": round(budget.counted() / WORK_UNIT_S, 3),
            "stage_work": {k: round(v / WORK_UNIT_S, 3) for k, v in budget.stage_work.items()},
            "ran_out": sorted(budget.ran_out)}


def limit_note(budget: Budget) -> str:
    """What the plan's note says of the stages the limit cut ("" if none)."""
    if not budget.ran_out:
        return ""
    names = ", ".join(sorted(budget.ran_out))
    if budget.deterministic:
        return f"; the work limit cut: {names}"
    return (f"; the time limit cut: {names} (a faster or busier machine can give another plan and bound; "
            "--work-limit gives the same on any machine)")
