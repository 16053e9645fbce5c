"""Two-stage planning for large homogeneous clusters (many identical GPUs).

The full ILP has one binary per (table, option, device): 856 tables x 128 GPUs is over a million, and the
identical GPUs make its relaxation weak. Here instead a pipeline of stages, each in its own module, all reading
one Context (context.py: the machine, its symmetry, the dense model's loads per symmetry class) and spending
one time Budget (budget.py):

1. choose kinds (kinds.py): every table's options on the canonical devices (node0/gpu0, node0, ...), their
   costs folded into symmetry classes;
2. stage 1 (stage1.py): an aggregated ILP over the kinds picks one per table. Every full plan satisfies its
   rows, so its bound bounds the full problem from below: the lower bound reported with the plan;
3. stage 2 (stage2.py), assign devices (assign.py): the chosen kinds onto devices, largest first, each where the
   predicted step time grows least among those where it fits, ties to the emptier device;
4. improve: swaps (swap.py), re-insertions (assign.py), pairwise repacking (repack.py) and kind changes (rekind.py: a
   table leaves stage 1's kind for another where no assignment balances the first), in rounds while any of
   them changes something; where multi-GPU options fill some GPUs in one phase and leave them idle in another,
   a MIP chooses what those GPUs hold and stage 2 assigns the rest around them (fill.py), kept if better.
   Stages 2 and 3 run once per variant of the balance measure while time is left (stage2.STAGE2_VARIANTS; half
   of them in a child process on the second core where the MIP of step 5 does not hold it), and again for
   stage 1's other choices;
5. bound: where the time allows, HiGHS's branch and bound on stage 1 runs from its rounding in a child process
   beside stage 2 (stage1_mip.py; its problem also counts the fused groups that single-GPU tables open GPU by GPU,
   stage1_groups.py); it may prove that problem's optimum, which raises the bound, and its choice goes
   through stage 2 too (stage 2 on stage 1's own choice ends when its answer comes, but not before half of the
   time the child then had left, and gets the time left after the MIP's choice). With too little time left for
   it, the bound tree runs there instead, beside stage 2 until its end (stage1_tree.py), and stage 2 has the
   first core to itself. Under a work limit, the bound tree in stage 1 and branch and bound on stage 1 in this
   process where time is left after stage 2.

The plan is then priced exactly by the simulator (two_stage_solve.py); the gap is (plan - bound) / plan.
"""
from __future__ import annotations

import dataclasses

from placer.cost import CostModel
from placer.errors import SolverError
from placer.executor import settled
from placer.options import OptionConfig
from placer.planner import ilp
from placer.planner.assign import Assigner
from placer.planner.budget import Budget, OutOfTime
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.lp import Relaxation
from placer.planner.problem import Problem
from placer.planner.progress import Tracker
from placer.planner.schedule import SCHEDULE
from placer.planner.stage1 import solve_stage1, without_stream_rows
from placer.planner.stage1_groups import group_counts
from placer.planner.stage1_mip import BesideMip
from placer.planner.stage1_tree import BesideTree
from placer.planner.stage2 import place_choice
from placer.planner.symmetry import Symmetry
from placer.planner.types import NO_PLACEMENTS, Kinds, Stage1Result, TwoStageResult

def solve_two_stage(model: CostModel, sym: Symmetry, cfg: OptionConfig, *, budget: Budget, gap: float,
                    backend: str, threads: int | None, tracker: Tracker | None = None,
                    fallback_s: float = 0.0) -> TwoStageResult:
    """The best placements (or None), the lower bound and stage 1's solver account (types.TwoStageResult). Stage 1
    gets the time the kinds leave of ``budget``, less a reserve for stage 2; stage 2 stops shortly before the
    budget's end (every share: schedule.py). The wall seconds of "option kinds", "stage 1" and "stage 2" are added
    to ``budget.stages``. ``fallback_s``: what the caller's own plan takes where the stages give none (the kinds
    stop, and stage 1 does not start, with less than that left)."""
    tracker = tracker or Tracker(None)
    # under a time limit the kinds stop where too little of it would be left for stages 1 and 2 (issue 36: at
    # --time-limit 5 production-856 @ dgx-h100 folded them for 5-6 s, then ran stage 1's floors), or for the
    # caller's baseline: the folding holds both cores and starves the baselines' child (issue 47: synthetic-1000
    # @ dgx-h100-32node at 30 s had its kinds cut at 29 s, then waited for greedy_size: 42.2 s)
    need = max(SCHEDULE.min_stages_s, fallback_s)
    deadline = None if budget.deterministic else budget.deadline - need
    with budget.stage("option kinds"):
        ctx = Context.of(model, sym, cfg, tracker)
        tracker.update("stage 1: option kinds")
        try:
            kinds = KindFolder(ctx).kinds(deadline=deadline)
        except OutOfTime:
            budget.note_ran_out("option kinds")
            return TwoStageResult(None, 0.0, _cut(backend, budget, "the time limit cut the option kinds"),
                                  budget.elapsed())
    if deadline is not None and budget.left() < need:
        budget.note_ran_out("stage 1")
        return TwoStageResult(None, 0.0, _cut(backend, budget, "the time limit left no time for stage 1"),
                              budget.elapsed())
    reserve = SCHEDULE.stage2_reserve_s(budget)  # kept from stage 1 for stage 2 and pricing the plan
    mip: BesideMip | None = None
    tree: BesideTree | None = None

    def rounded(problem: Problem, chosen: list[int], relaxation: Relaxation) -> bool:
        """From the rounding on, stage 1's MIP on the second core; where too little time is left for it, the bound
        tree there instead (True: stage 1 leaves the tree to it)."""
        nonlocal mip, tree
        if budget.deterministic:
            return False
        seconds = SCHEDULE.mip_s(budget, reserve)  # what stage 2 then needs for the MIP's choice is left after it
        if seconds >= SCHEDULE.mip_min_s:
            mip = BesideMip(problem, chosen, seconds, group_counts(ctx, kinds, problem, chosen))
            return False
        # until stage 2's end (_after_stage1)
        tree = BesideTree(problem, relaxation, problem.objective(chosen), SCHEDULE.stage2_s(budget))
        return tree.running

    # the model's caches and the kinds live to the end: collections walk only what the stages allocate (executor.py)
    with settled():
        try:
            with budget.stage("stage 1"):
                stage1 = solve_stage1(ctx, kinds, budget.child(SCHEDULE.stage1_s(budget, reserve)), gap=gap,
                                      backend=backend, threads=threads, rounded=rounded)
            return _after_stage1(ctx, kinds, stage1, mip if mip and mip.running else None,
                                 tree if tree and tree.running else None, budget, gap, backend, threads, tracker)
        finally:
            for child in (mip, tree):
                if child is not None:
                    child.close()


def _cut(backend: str, budget: Budget, why: str) -> ilp.IlpResult:
    """Stage 1's result where the time limit stopped the two stages before it chose: no choice, no bound."""
    return ilp.IlpResult(None, "no_solution", None, 0.0, budget.elapsed(), 0, 0, "none", f"{backend} ({why})")


def _after_stage1(ctx: Context, kinds: Kinds, stage1: Stage1Result, mip: BesideMip | None,
                  tree: BesideTree | None, budget: Budget, gap: float, backend: str, threads: int | None,
                  tracker: Tracker) -> TwoStageResult:
    """Stage 2 on stage 1's choices, then (with time left) on the choices of searches that may do better: the
    MIP beside (stage1_mip.py: stage 2 on stage 1's own choices ends when it answers, BesideMip.window), else
    ``backend``'s branch and bound on stage 1, and stage 1 without its stream rows. ``tree``: stage 1's bound tree
    beside stage 2 (stage1_tree.py), its bound read at the end. Returns what solve_two_stage does."""
    result = stage1.result
    if result.chosen is None:
        return TwoStageResult(None, result.lower_bound_s, result, budget.elapsed())
    stage2 = budget.child(SCHEDULE.stage2_s(budget))  # the caller keeps its own reserve for pricing the plan
    assigner = Assigner(ctx)
    best = NO_PLACEMENTS

    def place(ids: list[int], within: Budget) -> None:
        nonlocal best
        with budget.stage("stage 2"):  # half of its portfolio on the second core where the MIP does not run
            # beside the bound tree's child too: stage 2's child (nice 15) gets the second core once the tree stalls
            alt = place_choice(assigner, stage1.problem, kinds, ids, within, beside=not (mip and mip.running))
        if alt.better_than(best):
            best = alt

    first = mip.window(stage2) if mip is not None else stage2
    started = stage2.elapsed()
    place(result.chosen, first)
    took = stage2.elapsed() - started  # wall seconds, or nominal ones in a work budget
    for ids in stage1.other_choices:  # stage 1's other choices (the first rounding's, ...): stage 2 may do better
        if not first.allows(took, "stage 2"):
            break
        place(ids, first)
    if mip is not None:
        tracker.update("stage 1: highs branch and bound (beside stage 2)")
        with budget.stage("stage 1 (its MIP waited for)"):
            other = mip.result()
        if other is None or other.status != "optimal":
            budget.note_ran_out("stage 1")
        if other is not None and other.chosen is not None:  # its bound holds whether or not it finished
            # its problem counts fused groups stage 1's does not (stage1_groups.py): stage 1's choice priced there
            result.objective_s = mip.problem.objective(result.chosen)
            _raise_bound(result, other.lower_bound_s)
            result.backend += f"; highs branch and bound beside stage 2 ({other.status})"
            result.status = "optimal" if other.status == "optimal" else result.status
        own = result.chosen
        if other is not None and other.chosen is not None and other.objective_s < result.objective_s * (1 - 1e-9):
            result.chosen, result.objective_s = other.chosen, other.objective_s
            place(other.chosen, stage2)
        # the MIP's answer cut stage 2 on stage 1's own choice short: that choice gets the time left
        if first.cut and stage2.allows(SCHEDULE.own_choice_min_s, "stage 2"):
            place(own, stage2)  # (production-856 @ pcie-4gpu-workstation: 30 s
            # limit, the MIP's choice placed, 396.61 -> 396.73 ms with 15 s unused without this)
    elif stage2.allows(SCHEDULE.cbc_min_left_s, "stage 1"):  # time left: branch and bound on stage 1, from the rounding
        plain = dataclasses.replace(stage1.problem, levels=[])  # levels + a start crash CBC
        tracker.update(f"stage 1: {backend} branch and bound")
        with budget.stage("stage 1"):
            try:
                other = ilp.solve(plain, backend=backend, gap=gap, threads=threads, warm_start=result.chosen,
                                  tracker=tracker.bounds_only(), budget=stage2.child(SCHEDULE.cbc_s(stage2)))
            except SolverError:
                other = None
        if other is not None and other.chosen is not None:
            _raise_bound(result, other.lower_bound_s)
            if other.chosen != result.chosen:
                place(other.chosen, stage2)
    if tree is not None:
        with budget.stage("stage 1 (its bound tree waited for)"):
            splits = tree.result()
        if splits is None:
            budget.note_ran_out("stage 1")
        else:  # a bound on stage 1's problem, whatever stopped it
            _raise_bound(result, splits.bound_s)
            result.backend += f"; {splits.nodes} splits of the relaxation beside stage 2, {splits.lp_solves} LPs"
            tracker.update(bound_s=result.lower_bound_s)
    # Stage 1 without its stream rows chooses differently: the stream rows count a table's own group but not
    # the groups a column-wise block opens on the same GPU, and can steer stage 1 to choices stage 2 cannot
    # realise (mlperf-dlrm-v1 @ dgx-h100-2node: 1.81 ms with them, 1.71 ms without). With time left, stage 2
    # also places that choice; the bound stays stage 1's own.
    if stage2.allows(SCHEDULE.plain_need_s(took), "stage 1"):
        with budget.stage("stage 1"):
            plain = solve_stage1(ctx, kinds, budget.child(SCHEDULE.plain_s(stage2, took)), gap=gap,
                                 backend=backend, threads=threads, problem=without_stream_rows(stage1.problem))
        if plain.result.chosen is not None and plain.result.chosen != result.chosen:
            place(plain.result.chosen, stage2)
    return TwoStageResult(best.placements or None, result.lower_bound_s, result, budget.elapsed())


def _raise_bound(result: ilp.IlpResult, bound_s: float) -> None:
    """Stage 1's bound raised to ``bound_s``, what another search of the same problem (or of a relaxation of it)
    proved, never past stage 1's own choice."""
    result.lower_bound_s = max(result.lower_bound_s, min(bound_s, result.objective_s))
