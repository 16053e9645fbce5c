"""Make a plan: the method chosen (the ILP, a forced form, a baseline or TorchRec's planner), the plan priced and
its skew what-ifs. The ILP's own steps are pipelines over one run (solve_run.py: single_stage.py, which hands a
large symmetric machine to two_stage_solve.py); every share of time they take is schedule.py's."""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, replace

from placer.cost import CostModel
from placer.errors import PlacerError, SpecError
from placer.forms import storage
from placer.forms.storage import FORCED_FORMS, STORAGE
from placer.limits import MAX_TIME_LIMIT_S, MAX_WORK_LIMIT
from placer.options import OptionConfig
from placer.plan import Plan, SolverInfo
from placer.planner import ilp, infeasible, least_work, single_stage
from placer.planner.baselines import BASELINES, EXTERNAL, run_baseline
from placer.planner.budget import Budget
from placer.planner.progress import Reporter, Tracker
from placer.planner.solve_run import make_plan, through
from placer.planner.trainers import for_trainer
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


def solve(topology: Topology, workload: Workload, config: SolveConfig = SolveConfig()) -> Plan:
    """Plan ``workload`` on ``topology`` with ``config.method``. Raises InfeasibleError when nothing fits."""
    return _solve(topology, workload, config)


def _solve(topology: Topology, workload: Workload, config: SolveConfig) -> Plan:
    config = for_trainer(workload, config)  # only the forms the workload's trainer runs (planner/trainers.py)
    model = CostModel(topology, workload)
    model.rules  # the workload's constraints compiled for the machine: a device it lacks exits 2 before any work
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


def with_robustness(model: CostModel, plan: Plan) -> Plan:
    """``plan`` (priced by ``model``: make_plan's 'predicted' dict) with its 'robustness' block: step time at
    skew x0.8, x1, x1.2 (placer/skew.py)."""
    try:
        block = robustness(model, plan, base_s=plan.predicted["step_time_s"])
        return plan.model_copy(update={"robustness": block})
    except (SpecError, ValueError) as exc:  # a what-if must never cost the user the plan
        return plan.model_copy(update={"robustness": {"error": str(exc)}})


def solve_ilp(model: CostModel, config: SolveConfig) -> Plan:
    """The ILP's plan: the single-stage pipeline (single_stage.PIPELINE, which hands a large symmetric machine to
    the two-stage one) over one run, under the config's time or work limit; its stages' wall seconds go to the
    plan (solver.stage_times_s)."""
    budget = (Budget.of_work(config.work_limit, wall_start=config.started_s) if config.work_limit is not None
              else Budget(config.time_limit_s, start=config.started_s))
    run = single_stage.SingleStage(model, config, budget, Tracker(config.progress))
    return through(run, single_stage.PIPELINE)
