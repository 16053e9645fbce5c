"""Two-stage planning for large homogeneous clusters (many identical GPUs).

The full ILP has one binary per (table, option, device): 856 tables x 128 GPUs is over a million, and the
identical GPUs make its relaxation weak. Here instead a pipeline of stages, each in its own module, all reading
one Context (context.py: the machine, its symmetry, the dense model's loads per symmetry class) and spending
one time Budget (budget.py):

1. choose kinds (kinds.py): every table's options on the canonical devices (node0/gpu0, node0, ...), their
   costs folded into symmetry classes;
2. stage 1 (stage1.py): an aggregated ILP over the kinds picks one per table. Every full plan satisfies its
   rows, so its bound bounds the full problem from below: the lower bound reported with the plan;
3. stage 2, assign devices (assign.py): the chosen kinds onto devices, largest first, each where the predicted
   step time grows least among those where it fits, ties to the emptier device;
4. improve: swaps (swap.py), re-insertions (assign.py), pairwise repacking (repack.py) and kind changes (rekind.py: a
   table leaves stage 1's kind for another where no assignment balances the first), in rounds while any of
   them changes something; where multi-GPU options fill some GPUs in one phase and leave them idle in another,
   a MIP chooses what those GPUs hold and stage 2 assigns the rest around them (fill.py), kept if better.
   Stages 2 and 3 run once per variant of the balance measure while time is left (STAGE2_VARIANTS), and again
   for stage 1's other choices;
5. bound: where the time allows, HiGHS's branch and bound on stage 1 runs from its rounding in a child process
   beside stage 2 (stage1_mip.py); it may prove stage 1's optimum, which raises the bound, and its choice goes
   through stage 2 too (stage 2 on stage 1's own choice ends when its answer comes, but not before half of the
   time the child then had left, and gets the time left after the MIP's choice). Without it (too little time, a
   work limit), branch and bound on stage 1 in this process where time is left after stage 2.

The plan is then priced exactly by the simulator (solve.py); the gap is (plan - bound) / plan.
"""
from __future__ import annotations

import dataclasses

from placer.cost import CostModel
from placer.errors import SolverError
from placer.options import OptionConfig
from placer.plan import Placement
from placer.planner import fill, ilp, stage1_mip
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.kinds import Kind, KindFolder
from placer.planner.problem import Problem
from placer.planner.progress import Tracker
from placer.planner.rekind import rekind
from placer.planner.repack import repack
from placer.planner.stage1 import Stage1, solve_stage1, without_stream_rows
from placer.planner.stage1_mip import BesideMip
from placer.planner.swap import swap
from placer.planner.symmetry import Symmetry

#: Stage 2's portfolio: it assigns devices once per variant while time is left (the next only if the time left
#: exceeds what the last took), keeping the best plan. A variant is (the phase times its balance measure is
#: relative to: stage 1's with the pigeonhole rows, "counted", or the class averages alone, "plain"; the weight
#: of its excess measure, see assign.Assigner._scores). No variant wins everywhere; measured on one stage-1
#: choice each, with the re-insertions, swaps and repacking (c = counted, p = plain, with the weight), ms:
#:   production-856 on 128 GPUs  c100 8.862  c0 8.882  p100 8.871  p0 8.879
#:   synthetic-1000 on 256 GPUs  c100 4.849  c0 4.849  p100 4.890  p0 4.849
#:   synthetic-1000 on 128 GPUs  c100 6.988  c0 6.993  p100 6.985  p0 7.003
#:   synthetic-1000 on 16 GPUs   c100 25.10  c0 25.08  p100 25.14  p0 25.14
#:   production-856 on 16 GPUs   c100 31.84  c0 31.78  p100 31.84  p0 31.78
#: The large clusters, where time allows one or two variants, favour c100; the small ones run all four.
STAGE2_VARIANTS = (("counted", 100.0), ("counted", 0.0), ("plain", 100.0), ("plain", 0.0))

#: Most rounds of swaps, repacking and kind changes (each followed by re-insertions) in one stage-2 run; they stop
#: sooner once a round changes nothing. Was 4: production-856 @ dgx-h100-16node at --time-limit 60 stopped there
#: at 22.916 ms with 18 s of the limit unused; rounds 5-12 still moved tables (5, 39, 88 moves in rounds 5-7) and
#: it ends at 22.904 ms (12 and 50 gave the same plan); at 30 s and on synthetic-1000 the time runs out first.
ROUNDS = 16


def solve_two_stage(model: CostModel, sym: Symmetry, cfg: OptionConfig, *, budget: Budget, gap: float,
                    backend: str, threads: int | None, tracker: Tracker | None = None):
    """(placements or None, lower bound in s, stage-1 result, wall s). Stage 1 gets the time the kinds leave
    of ``budget``, less a reserve for stage 2; stage 2 stops 0.5 s before the budget's end. The wall seconds of
    "option kinds", "stage 1" and "stage 2" are added to ``budget.stages``."""
    tracker = tracker or Tracker(None)
    with budget.stage("option kinds"):
        ctx = Context.of(model, sym, cfg, tracker)
        tracker.update("stage 1: option kinds")
        kinds = KindFolder(ctx).kinds()
    reserve = min(0.2 * budget.seconds, 15.0)  # stage 2 + pricing the plan (measured: 8.5 s on 128 GPUs, 10 s on 256)
    beside: list[BesideMip] = []

    def rounded(problem: Problem, chosen: list[int]) -> None:  # stage 1's MIP on the second core from here on
        seconds = budget.left() - reserve  # what stage 2 then needs for the MIP's choice is left after it
        if not budget.deterministic and seconds >= stage1_mip.MIN_SECONDS:
            mip = BesideMip(problem, chosen, seconds)
            if mip.started:
                beside.append(mip)

    try:
        with budget.stage("stage 1"):
            stage1 = solve_stage1(ctx, kinds, budget.child(max(5.0, budget.left() - reserve)), gap=gap,
                                  backend=backend, threads=threads, rounded=rounded)
        return _after_stage1(ctx, kinds, stage1, beside[0] if beside else None, budget, gap, backend, threads,
                             tracker)
    finally:
        for mip in beside:
            mip.close()


def _after_stage1(ctx: Context, kinds: list[list[Kind]], stage1: Stage1, mip: BesideMip | None, budget: Budget,
                  gap: float, backend: str, threads: int | None, tracker: Tracker):
    """Stage 2 on stage 1's choices, then (with time left) on the choices of searches that may do better: the
    MIP beside (stage1_mip.py: stage 2 on stage 1's own choices ends when it answers, BesideMip.window), else
    ``backend``'s branch and bound on stage 1, and stage 1 without its stream rows. Returns what solve_two_stage
    does."""
    result = stage1.result
    if result.chosen is None:
        return None, result.lower_bound_s, result, budget.elapsed()
    stage2 = budget.child(budget.left() - 0.5)  # the caller keeps its own reserve for pricing the plan (solve.py)
    assigner = Assigner(ctx)
    best: tuple[list[Placement], float] = ([], float("inf"))

    def place(ids: list[int], within: Budget) -> None:
        nonlocal best
        with budget.stage("stage 2"):
            alt = _stage2(assigner, stage1.problem, kinds, ids, within)
        if alt[0] and alt[1] < best[1]:
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
            _raise_bound(result, other)
            result.backend += f"; highs branch and bound beside stage 2 ({other.status})"
            result.status = "optimal" if other.status == "optimal" else result.status
        own = result.chosen
        if other is not None and other.chosen is not None and other.objective_s < result.objective_s * (1 - 1e-9):
            result.chosen, result.objective_s = other.chosen, other.objective_s
            place(other.chosen, stage2)
        if first.cut and stage2.allows(1.0, "stage 2"):  # its answer cut stage 2 on stage 1's own choice short:
            place(own, stage2)  # that choice gets the time left (production-856 @ pcie-4gpu-workstation: 30 s
            # limit, the MIP's choice placed, 396.61 -> 396.73 ms with 15 s unused without this)
    elif stage2.allows(30.0, "stage 1"):  # time left: branch and bound on stage 1, from the rounding
        plain = dataclasses.replace(stage1.problem, levels=[])  # levels + a start crash CBC
        tracker.update(f"stage 1: {backend} branch and bound")
        with budget.stage("stage 1"):
            try:
                other = ilp.solve(plain, backend=backend, gap=gap, threads=threads, warm_start=result.chosen,
                                  tracker=tracker.bounds_only(), budget=stage2.child(stage2.left() - 15.0))
            except SolverError:
                other = None
        if other is not None and other.chosen is not None:
            _raise_bound(result, other)
            if other.chosen != result.chosen:
                place(other.chosen, stage2)
    # Stage 1 without its stream rows chooses differently: the stream rows count a table's own group but not
    # the groups a column-wise block opens on the same GPU, and can steer stage 1 to choices stage 2 cannot
    # realise (mlperf-dlrm-v1 @ dgx-h100-2node: 1.81 ms with them, 1.71 ms without). With time left, stage 2
    # also places that choice; the bound stays stage 1's own.
    if stage2.allows(3 * took + 2.0, "stage 1"):
        with budget.stage("stage 1"):
            plain = solve_stage1(ctx, kinds, budget.child(min(stage2.left() / 2, max(5.0, 3 * took))), gap=gap,
                                 backend=backend, threads=threads, problem=without_stream_rows(stage1.problem))
        if plain.result.chosen is not None and plain.result.chosen != result.chosen:
            place(plain.result.chosen, stage2)
    return best[0] or None, result.lower_bound_s, result, budget.elapsed()


def _raise_bound(result: ilp.IlpResult, other: ilp.IlpResult) -> None:
    """Stage 1's bound raised to what another search of the same problem (or of a relaxation of it) proved, never
    past stage 1's own choice."""
    result.lower_bound_s = max(result.lower_bound_s, min(other.lower_bound_s, result.objective_s))


def _stage2(assigner: Assigner, problem: Problem, kinds: list[list[Kind]], ids: list[int],
            budget: Budget) -> tuple[list[Placement], float]:
    """Stage 2 for one stage-1 choice (option ids of the stage-1 ``problem``): (placements or [], step time s
    without fixed latencies). Devices are assigned once per variant of STAGE2_VARIANTS while ``budget`` lasts,
    each improved by re-insertions, swaps and pairwise repacking (repack.py), and then assigned anew with its
    starved GPUs filled first (fill.py) while that helps. The least step time wins."""
    flat = [k for ks in kinds for k in ks]
    chosen = [flat[i] for i in ids]
    scales = {"counted": problem.phase_times(ids),
              "plain": dataclasses.replace(problem, counts=[]).phase_times(ids)}
    assigner.ctx.tracker.update("stage 2: devices")
    best: tuple[list[Placement], float] = ([], float("inf"))
    took, tried = 0.0, set()
    for scale_from, weight in STAGE2_VARIANTS:
        variant = (tuple(scales[scale_from]), weight)
        if variant in tried:  # no pigeonhole rows: "plain" is "counted"
            continue
        if best[0] and not budget.allows(took):
            break
        tried.add(variant)
        t0 = budget.elapsed()
        assigner.set_scale(scales[scale_from])
        placements, acc = _assign_and_improve(assigner, chosen, kinds, weight, budget)
        run_took = budget.elapsed() - t0
        while placements:  # starved GPUs filled first, while that helps; the MIP gets what the run leaves
            mip_time = min(fill.MIP_TIME_S, budget.left() - run_took)
            if mip_time < fill.MIN_MIP_TIME_S:
                budget.note_ran_out()
                break
            pins = fill.fill_starved(assigner, acc, budget, mip_time)
            if not pins:
                break
            kept = dict(assigner.where), dict(assigner.spread)
            filled, filled_acc = _assign_and_improve(assigner, chosen, kinds, weight, budget, pins)
            if not filled or filled_acc.step >= acc.step:
                assigner.where, assigner.spread = kept
                break
            placements, acc = filled, filled_acc
        if placements and acc.step < best[1]:
            best = (placements, acc.step)
        took = budget.elapsed() - t0
    return best


def _assign_and_improve(assigner: Assigner, chosen: list[Kind], kinds: list[list[Kind]], weight: float,
                        budget: Budget, pinned: dict[int, tuple[Kind, tuple]] | None = None
                        ) -> tuple[list[Placement], Accumulator]:
    """One stage-2 run: devices assigned (excess weight ``weight``, see assign.Assigner._scores; ``pinned``
    first), then swaps (swap.py) and re-insertions, then swaps, repacking and kind changes (rekind.py) in rounds
    while they change something, each round followed by re-insertions."""
    assigner.excess_weight = weight
    assigner.budget = budget  # charged for its scoring and pricing (a work budget's clock)
    placements, acc = assigner.assign_best(chosen, kinds, pinned)
    assigner.excess_weight = 0.0
    if placements:
        # swaps first: on production-856 on 128 GPUs they take the assignment from 23.043 to 22.955 ms in 1.0 s,
        # where re-insertions first took it to 23.036 ms in 2.2 s
        swap(assigner, placements, acc, budget)
        assigner.improve(placements, acc, budget)
        for _ in range(ROUNDS):  # swaps, repacking and kind changes open room for re-insertions, and these for them
            if not (swap(assigner, placements, acc, budget) + repack(assigner, placements, acc, budget)
                    + rekind(assigner, placements, acc, kinds, budget)):
                break
            assigner.improve(placements, acc, budget)
        assigner.ctx.tracker.update(incumbent_s=acc.step + sum(assigner.model.fixed_latency_s.values()))
    return placements, acc
