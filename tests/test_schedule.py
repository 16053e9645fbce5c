"""The split of a limit among the planner's stages (planner/schedule.py): the shares at 5, 10, 30, 60 and 600 s
and under a work limit, never more than the limit in all, never below zero, and child budgets clipped to their
parent's. The clocks here are moved by hand (Schedule.timeline) or are work meters: no wall-clock asserts."""
from __future__ import annotations

import dataclasses

import pytest

from placer.planner import tuning
from placer.planner.budget import WORK_UNIT_S, Budget
from placer.planner.schedule import SCHEDULE, Schedule

#: (table, GPU) pairs of production-856 @ dgx-h100-16node and synthetic-1000 @ dgx-h100-32node
PAIRS_128, PAIRS_256 = 856 * 128, 1000 * 256
#: seconds the setup (cost model, checks) and the option kinds take there, about
SETUP_S, KINDS_S = 4.0, 8.0


class Hand:
    """A clock moved by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("limit", [5.0, 10.0, 30.0, 60.0, 600.0])
@pytest.mark.parametrize("pairs", [PAIRS_128, PAIRS_256])
@pytest.mark.parametrize("setup,kinds", [(0.0, 0.0), (SETUP_S, KINDS_S), (8.0, 11.0)])
def test_the_shares_never_exceed_the_limit(limit, pairs, setup, kinds):
    shares = SCHEDULE.timeline(limit, pairs, setup_s=setup, kinds_s=kinds)
    assert all(v >= 0 for v in shares.values()), shares
    assert sum(shares.values()) <= limit + 1e-9, shares


@pytest.mark.parametrize("units", [500, 2000, 8000, 30_000, 600_000])
def test_the_shares_of_a_work_limit_never_exceed_it(units):
    limit = units * WORK_UNIT_S
    shares = SCHEDULE.timeline(limit, PAIRS_128, work=True, setup_s=SETUP_S * limit / 30, kinds_s=0.0)
    assert all(v >= 0 for v in shares.values()), shares
    assert sum(shares.values()) <= limit + 1e-9, shares


def test_the_shares_at_30_and_60_s_are_what_they_were():
    """Large clusters at 30 and 60 s: the rules of before the schedule (solve.py, two_stage.py), written out."""
    for limit in (30.0, 60.0):
        after = min(4.2, 2.0 + 1.6e-5 * PAIRS_128)
        s = SCHEDULE.timeline(limit, PAIRS_128, setup_s=SETUP_S, kinds_s=KINDS_S)
        two = limit - SETUP_S - 2.5 - after  # TWO_STAGE_RESERVE_S and after_solve_s kept
        reserve = min(0.2 * two, 15.0)  # kept from stage 1 for stage 2
        stage1 = max(5.0, two - KINDS_S - reserve)
        assert s["stage 1"] == pytest.approx(stage1)
        assert s["stage 2"] == pytest.approx(two - KINDS_S - stage1 - 0.5)  # ends 0.5 s before the two stages
        assert s["tie-break"] == pytest.approx(2.5)  # what is left after the stages, less after_solve_s
        assert s["after the solve"] == pytest.approx(after)


def test_the_shares_at_5_10_and_600_s():
    after = SCHEDULE.after_solve_s(PAIRS_128)
    # 5 s: the setup leaves nothing for the stages; the tie-break keeps its least 0.5 s, the rest is after the solve
    s = SCHEDULE.timeline(5.0, PAIRS_128, setup_s=SETUP_S, kinds_s=KINDS_S)
    assert s["option kinds"] == s["stage 1"] == s["stage 2"] == 0.0
    assert s["tie-break"] == pytest.approx(0.5) and s["after the solve"] == pytest.approx(0.5)
    # 10 s: 6 s after the setup, 6.25 of them reserved: no stages either; the tie-break gets 20% of 10 s
    s = SCHEDULE.timeline(10.0, PAIRS_128, setup_s=SETUP_S, kinds_s=KINDS_S)
    assert s["stage 1"] == 0.0 and s["tie-break"] == pytest.approx(2.0)
    assert s["after the solve"] == pytest.approx(after)
    # 600 s: stage 2's reserve caps at 15 s (14.5 of them stage 2's), the tie-break at 10 s of what is left
    s = SCHEDULE.timeline(600.0, PAIRS_128, setup_s=SETUP_S, kinds_s=KINDS_S)
    assert s["stage 2"] == pytest.approx(14.5)
    assert s["stage 1"] == pytest.approx(600.0 - SETUP_S - 2.5 - after - KINDS_S - 15.0)


def test_a_child_budget_never_outlives_its_parent():
    clock = Hand()
    parent = Budget(2.0, clock=clock)
    assert parent.child(10.0).seconds == 2.0  # a floor (stage 1's 5 s) is clipped
    clock.t = 1.5
    assert parent.child(10.0).seconds == pytest.approx(0.5)
    clock.t = 3.0
    assert parent.child(10.0).seconds == 0.0  # never below zero
    work = Budget.of_work(100)  # a work budget too (0.1 nominal s)
    assert work.child(10.0).seconds == pytest.approx(0.1)
    work.charge(0.04)
    assert work.child(10.0).seconds == pytest.approx(0.06)
    assert Budget.unlimited().child(10.0).seconds == 10.0


def test_stage_shares_are_clipped_to_their_parents():
    clock = Hand()
    stages = Budget(20.0, clock=clock)
    reserve = SCHEDULE.stage2_reserve_s(stages)
    assert reserve == pytest.approx(4.0)
    clock.t = 17.0  # the kinds took 17 of 20 s: stage 1's 5 s floor holds only within the 3 s left
    assert stages.child(SCHEDULE.stage1_s(stages, reserve)).seconds == pytest.approx(3.0)
    stage1 = Budget(12.0, clock=clock)
    assert SCHEDULE.relaxation_s(stage1) == 10.0  # the floor ...
    assert stage1.child(SCHEDULE.relaxation_s(stage1)).seconds == pytest.approx(10.0)
    clock.t += 8.0
    assert stage1.child(SCHEDULE.relaxation_s(stage1)).seconds == pytest.approx(4.0)  # ... within what is left
    assert SCHEDULE.rounding_s(stage1) == pytest.approx(max(1.0, 4.0 * 0.6))


def test_the_mip_beside_stage_2_is_waited_for_within_the_stages():
    clock = Hand()
    stages = Budget(16.0, clock=clock)  # a reserve of 3.2 s: the wait (3 s of grace) would outlast the stages
    reserve = SCHEDULE.stage2_reserve_s(stages)
    seconds = SCHEDULE.mip_s(stages, reserve)
    assert seconds + SCHEDULE.mip_grace_s <= stages.left() - SCHEDULE.stage2_end_s + 1e-9
    big = Budget(50.0, clock=clock)  # a larger budget: the share is what is left less the reserve, as before
    assert SCHEDULE.mip_s(big, SCHEDULE.stage2_reserve_s(big)) == pytest.approx(big.left() - 10.0)


def test_the_tie_break_share():
    assert [SCHEDULE.tie_break_limit_s(t) for t in (1, 5, 10, 30, 60, 600)] == [1.0, 1.0, 2.0, 6.0, 10.0, 10.0]
    clock = Hand()
    solve = Budget(30.0, clock=clock)
    clock.t = 25.0  # 5 s left, 3.75 to keep after the solve
    assert SCHEDULE.tie_break_s(solve, keep_s=3.75) == pytest.approx(1.25)
    clock.t = 29.8  # less than its least 0.5 s left: what is left
    assert SCHEDULE.tie_break_s(solve, keep_s=3.75) == pytest.approx(0.2)
    clock.t = 31.0
    assert SCHEDULE.tie_break_s(solve, keep_s=3.75) == 0.0


def test_under_a_work_limit():
    work = Budget.of_work(30_000)
    work.charge(10.0)
    assert SCHEDULE.search_s(work, 3.0) == pytest.approx(20.0)  # what is left (nothing kept for pricing)
    assert SCHEDULE.baselines_wait_s(work, 3.0) is None  # waits for every baseline
    assert SCHEDULE.two_stage_s(Budget.of_work(5000), 3.0) == SCHEDULE.two_stage_work_floor_s  # then clipped
    assert Budget.of_work(5000).child(SCHEDULE.two_stage_s(Budget.of_work(5000), 3.0)).seconds == pytest.approx(5.0)


def test_every_entry_is_a_number_of_seconds_or_a_share():
    for f in dataclasses.fields(Schedule):
        value = getattr(SCHEDULE, f.name)
        assert isinstance(value, float) and value >= 0, f.name
        if f.name.endswith("_share") or f.name == "mip_window_floor":
            assert value <= 1, f.name
    assert SCHEDULE.after_solve_s(0) == tuning.AFTER_SOLVE_S
    assert SCHEDULE.after_solve_s(10**9) == tuning.AFTER_SOLVE_MAX_S


def test_the_single_stage_bound_lp_share():
    assert SCHEDULE.bound_lp_s(60.0) == 15.0 and SCHEDULE.bound_lp_s(10.0) == 5.0  # a quarter, at least 5 s
    assert Budget(3.0, clock=Hand()).child(SCHEDULE.bound_lp_s(60.0)).seconds == 3.0  # within what is left
