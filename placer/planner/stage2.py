"""Stage 2 of the two-stage planner (two_stage.py): one stage-1 choice of kinds placed on devices.

A run assigns the chosen kinds to devices (assign.py), then improves the assignment by swaps (swap.py),
re-insertions (assign.py), pairwise repacking (repack.py) and kind changes (rekind.py) in rounds while any of them
changes something, and assigns anew with its starved GPUs filled first (fill.py) while that helps. Local search:
where it ends depends on the balance measure it starts from, so the runs form a portfolio (STAGE2_VARIANTS) and
the least step time wins. Under a time limit, with a second core free, half of the portfolio runs in a forked
child (placer/executor.py) beside the other half.
"""
from __future__ import annotations

import dataclasses
import functools

from placer.executor import Child, cores
from placer.planner import fill
from placer.planner.assign import Assigner
from placer.planner.budget import Budget
from placer.planner.problem import Problem
from placer.planner.progress import Tracker
from placer.planner.rekind import rekind, rekind_pairs
from placer.planner.schedule import SCHEDULE
from placer.planner.repack import repack
from placer.planner.swap import swap
from placer.planner.tuning import STAGE2_CHILD_NICE
from placer.planner.types import NO_PLACEMENTS, Assignment, Kind, Kinds, Move, Stage2Result

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
#: (an earlier cost model). On today's, production-856 on 128 GPUs, each run to its end: stage 1's optimum (the
#: MIP's choice) c100 22.828 c0 22.805 (c10 22.817, c1000 22.822), stage 1's rounding c100 22.881 c0 22.907.
#: Where a child runs half of them (BESIDE), the variants at even positions run here and the others there.
STAGE2_VARIANTS = (("counted", 100.0), ("counted", 0.0), ("plain", 100.0), ("plain", 0.0))

#: Most rounds of swaps, repacking and kind changes (each followed by re-insertions) in one stage-2 run; they stop
#: sooner once a round changes nothing. Was 4: production-856 @ dgx-h100-16node at --time-limit 60 stopped there
#: at 22.916 ms with 18 s of the limit unused; rounds 5-12 still moved tables (5, 39, 88 moves in rounds 5-7) and
#: it ends at 22.904 ms (12 and 50 gave the same plan); at 30 s and on synthetic-1000 the time runs out first.
ROUNDS = 16

#: The child's half of the portfolio ends shortly before the budget does, and the parent waits for its answer at
#: most as long past the budget's end (schedule.py: stage2_child_early_s, stage2_grace_s). The child's niceness:
#: tuning.STAGE2_CHILD_NICE, more than the baselines' child, whose plans the command waits for.
CHILD_NICE = STAGE2_CHILD_NICE


def place_choice(assigner: Assigner, problem: Problem, kinds: Kinds, ids: list[int], budget: Budget,
                 beside: bool = False) -> Stage2Result:
    """Stage 2 for one stage-1 choice (option ids of the stage-1 ``problem``): the placements (or []) and their step
    time without fixed latencies, the best of the portfolio's runs (STAGE2_VARIANTS) within ``budget``. ``beside``:
    the caller has a second core to spare; under a time limit half of the portfolio then runs in a child."""
    flat = [k for ks in kinds for k in ks]
    chosen = [flat[i] for i in ids]
    scales = {"counted": tuple(problem.phase_times(ids)),
              "plain": tuple(dataclasses.replace(problem, counts=[]).phase_times(ids))}
    # distinct variants in order (without pigeonhole rows "plain" is "counted")
    variants = list(dict.fromkeys((scales[name], weight) for name, weight in STAGE2_VARIANTS))
    assigner.ctx.tracker.update("stage 2: devices")
    theirs = None
    if beside and len(variants) > 1 and not budget.deterministic and cores() >= 2:
        early = budget.child(SCHEDULE.stage2_child_s(budget))
        theirs = Child.start(lambda: _child_runs(assigner, chosen, kinds, variants[1::2], early),
                                  "placer-stage2", nice=CHILD_NICE)
        if theirs is not None:
            variants = variants[0::2]
    best = _runs(assigner, chosen, kinds, variants, budget)
    if theirs is not None:
        other = theirs.answer(SCHEDULE.stage2_wait_s(budget))
        if other is not None and other.better_than(best):
            best = other
    return best


def _child_runs(assigner: Assigner, chosen: list[Kind], kinds: Kinds, variants: list[tuple],
                budget: Budget) -> Stage2Result:
    """_runs in the child, which reports no progress (the parent's display is the parent's)."""
    assigner.ctx = dataclasses.replace(assigner.ctx, tracker=Tracker(None))
    return _runs(assigner, chosen, kinds, variants, budget)


def _runs(assigner: Assigner, chosen: list[Kind], kinds: Kinds, variants: list[tuple],
          budget: Budget) -> Stage2Result:
    """One run per variant ((phase scales in s, excess weight)) while ``budget`` allows another as long as the
    last took; the best."""
    best = NO_PLACEMENTS
    took = 0.0
    for scale, weight in variants:
        if best.placements and not budget.allows(took):
            break
        t0 = budget.elapsed()
        assigner.set_scale(scale)
        run = assign_and_improve(assigner, chosen, kinds, weight, budget)
        run_took = budget.elapsed() - t0
        while run.placements:  # starved GPUs filled first, while that helps; the MIP gets what the run leaves
            mip_time = SCHEDULE.fill_mip_s(budget, run_took)
            if mip_time < SCHEDULE.fill_mip_min_s:
                budget.note_ran_out()
                break
            pins = fill.fill_starved(assigner, run.acc, budget, mip_time)
            if not pins:
                break
            kept = dict(assigner.where), dict(assigner.spread)
            filled = assign_and_improve(assigner, chosen, kinds, weight, budget, pins)
            if not filled.placements or filled.acc.step >= run.acc.step:
                assigner.where, assigner.spread = kept
                break
            run = filled
        if run.placements and run.acc.step < best.step_s:
            best = Stage2Result(run.placements, run.acc.step)
        took = budget.elapsed() - t0
    return best


def assign_and_improve(assigner: Assigner, chosen: list[Kind], kinds: Kinds, weight: float,
                       budget: Budget, pinned: dict[int, tuple[Kind, tuple]] | None = None) -> Assignment:
    """One stage-2 run: devices assigned (excess weight ``weight``, see assign.Assigner._scores; ``pinned``
    first), then swaps (swap.py) and re-insertions, then swaps, repacking and kind changes (rekind.py) in rounds
    while they change something, each round followed by re-insertions; where a round changes nothing, pairs of
    tables on one block change kinds together (rekind.rekind_pairs) before the run ends. Kind changes run in the
    first round, and again only after their last sweep changed something or when swaps and repacking change
    nothing (production-856 @ dgx-h100-16node, stage 1's optimum, excess weight 0: their sweeps took 1.4 s each
    and changed nothing in six of eight rounds; the run reached the same plan, 22.805 ms, in 16.8 s instead of
    20.6 s)."""
    assigner.excess_weight = weight
    assigner.budget = budget  # charged for its scoring and pricing (a work budget's clock)
    run = assigner.assign_best(chosen, kinds, pinned)
    placements, acc = run.placements, run.acc
    assigner.excess_weight = 0.0
    if placements:
        # swaps first: on production-856 on 128 GPUs they take the assignment from 23.043 to 22.955 ms in 1.0 s,
        # where re-insertions first took it to 23.036 ms in 2.2 s
        swap(assigner, placements, acc, budget)
        assigner.improve(placements, acc, budget)
        rekind_due = True
        change_kind: Move = functools.partial(rekind, kinds=kinds)
        change_pairs: Move = functools.partial(rekind_pairs, kinds=kinds)
        for _ in range(ROUNDS):  # swaps, repacking and kind changes open room for re-insertions, and these for them
            moved = swap(assigner, placements, acc, budget) + repack(assigner, placements, acc, budget)
            if rekind_due or not moved:
                changed = change_kind(assigner, placements, acc, budget)
                rekind_due, moved = changed > 0, moved + changed
            if not moved:
                moved = change_pairs(assigner, placements, acc, budget)
            if not moved:
                break
            assigner.improve(placements, acc, budget)
        assigner.ctx.tracker.update(incumbent_s=acc.step + sum(assigner.model.fixed_latency_s.values()))
    return run
