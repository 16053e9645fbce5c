"""How a solve's limit is split among the planner's stages: every share, floor, reserve and grace in one table.

A solve has one Budget (budget.py: seconds of wall time, or nominal seconds of work under ``--work-limit``). Each
stage asks the Schedule for its share of what is left when it starts, and takes it as a child budget
(``Budget.child``), which never outlives its parent: a share is clipped to what its parent has left, so that the
shares of one solve add up to at most its limit (a floor, e.g. stage 1's 5 s, holds only while the limit leaves
that much). What can still run past the limit, on purpose: where no baseline fits, the ILP gets at least
``no_baseline_min_s`` past it (solve_run.py says so on stderr first), since a plan or a proof that nothing fits is
then the least work; where the two stages end without a plan, the solve waits for the first baseline however
long it takes; and a solver given less than its least limit (CBC counts whole seconds: 1 s, effort.py) or
stopping late (CBC overran a 1 s limit by 5.5 s on production-856 @ cpu-server).

The rules are shares of what is left rather than fixed amounts because the stages before them take what they
take (the option kinds 5-11 s on 128 GPUs, depending on the machine): ``timeline`` shows the split they make of
one limit where every stage spends its whole share. The fitted rates behind some reserves (what the plan's
pricing and what-ifs take after the solve) are in tuning.py, with the scripts that re-derive them.

The order of one two-stage solve under a limit T (seconds from the command's start):

    setup (cost model, checks) | two stages: option kinds, stage 1, stage 2 (their MIP / tree / stage-2 children
    beside) | baselines waited for | tie-break | after the solve: the plan priced, its skew what-ifs

All values are seconds (of wall time, or nominal seconds of work in a work budget) unless named a share.
"""
from __future__ import annotations

from dataclasses import dataclass

from placer.planner import tuning
from placer.planner.budget import WORK_UNIT_S, Budget


@dataclass(frozen=True)
class Schedule:
    """The split of a limit among the stages (module docstring): each field one share, floor, reserve or grace."""

    # ---- the whole solve (single_stage.py, two_stage_solve.py)
    #: kept of a two-stage solve's limit for pricing its plan and the tie-break (measured: 1.3 s of tie-break and
    #: < 1 s of pricing on production-856 @ dgx-h100-16node); the part after the solve is ``after_solve_s``
    pricing_reserve_s: float = 2.5
    #: where node-local kinds are on the menu, the two stages with them get this share of theirs, and the stages
    #: without them what is left after (two_stage_solve.py: the better plan is kept)
    node_local_share: float = 0.5
    #: under a work limit, the least the two stages get (a time limit has no floor: production-856 @ dgx-h100 at
    #: --time-limit 5 ended after 13.4 s with one); clipped to the limit all the same
    two_stage_work_floor_s: float = 10.0
    #: the least the single-stage branch and bound gets, however little the options left (CBC overruns a shorter
    #: limit on large models anyway: 6.5 s of 1 on production-856 @ cpu-server)
    single_search_min_s: float = 1.0
    #: where no baseline fits, the ILP gets at least this long from then on, past the limit if need be
    no_baseline_min_s: float = 20.0
    #: a forced form (no baseline holds it) whose search the limit cut before a first plan gets at least this long
    #: from then on: its stages' first plan (criteo-terabyte-node-local @ dgx-h100-2node, node_local: 3.2 s)
    forced_min_s: float = 8.0
    #: the tie-break's share of the limit, between tie_break_min_s and tie_break_max_s ...
    tie_break_share: float = 0.2
    tie_break_min_s: float = 1.0
    tie_break_max_s: float = 10.0
    #: ... and at least this long where what is left after keeping after_solve_s is less (still within the limit)
    tie_break_least_s: float = 0.5

    # ---- the two stages (two_stage.py)
    #: the least of the limit stages 1 and 2 get after the option kinds: with less, the kinds stop folding
    #: (budget.OutOfTime) or stage 1 does not start, and the plan is the best baseline
    min_stages_s: float = 1.0
    #: kept from stage 1 for stage 2 and pricing the plan: this share of the two stages' budget, at most
    #: stage2_reserve_max_s (measured: stage 2 takes 8.5 s on 128 GPUs, 10 s on 256)
    stage2_reserve_share: float = 0.2
    stage2_reserve_max_s: float = 15.0
    #: the least stage 1 gets (its relaxations and rounding), within the two stages' budget
    stage1_floor_s: float = 5.0
    #: stage 2 (and a bound tree beside it) ends this long before the two stages' budget does
    stage2_end_s: float = 0.5
    #: stage 1's branch and bound in this process (no MIP beside: a work limit, or no second core) runs only with
    #: this much of stage 2's budget left, and keeps cbc_keep_s of it for stage 2 to place its choice
    cbc_min_left_s: float = 30.0
    cbc_keep_s: float = 15.0
    #: stage 2 on stage 1's own choice again, after the MIP's answer cut it short: only with this much left
    own_choice_min_s: float = 1.0
    #: stage 1 without its stream rows runs where stage 2 has plain_factor x what its first run took + plain_margin_s
    #: left; it gets that factor x the run (at least plain_floor_s), at most plain_share of what stage 2 has left
    plain_factor: float = 3.0
    plain_margin_s: float = 2.0
    plain_floor_s: float = 5.0
    plain_share: float = 0.5

    # ---- stage 1 (stage1.py)
    #: each of its two relaxations: this share of stage 1's budget, at least relaxation_floor_s (everything after
    #: needs a relaxation: let it finish), within what stage 1 has left
    relaxation_share: float = 0.2
    relaxation_floor_s: float = 10.0
    #: each rounding: this share of what stage 1 has left, at least rounding_floor_s
    rounding_share: float = 0.6
    rounding_floor_s: float = 1.0
    #: another pigeonhole round only while this share of stage 1's budget is left
    pigeonhole_share: float = 0.2
    #: the whole MIP (the relaxation failed) only with this much left under a time limit
    whole_mip_min_s: float = 1.0
    #: the bound tree in this process only with more than this left, and each of its splits (an LP) only with
    #: more than split_min_s left (bound_tree.py)
    tree_min_s: float = 0.5
    split_min_s: float = 0.05

    # ---- the single-stage ILP (ilp.py)
    #: where the solver stopped without a bound, the LP relaxation's bound gets this share of the solve's limit,
    #: at least bound_lp_floor_s, within what is left
    bound_lp_share: float = 0.25
    bound_lp_floor_s: float = 5.0

    # ---- children beside stage 2 (stage1_mip.py, stage1_tree.py, stage2.py, fill.py)
    #: stage 1's MIP in a child only with at least this long for it (a shorter HiGHS run ends inside its root)
    mip_min_s: float = 10.0
    #: the parent waits this long past the MIP child's own limit (building the model, HiGHS's last node, the pipe)
    mip_grace_s: float = 3.0
    #: the share of its window stage 2 on stage 1's own choice keeps even when the MIP's answer comes sooner (0 gave
    #: production-856 @ dgx-h100-16node at 60 s 22.828 ms where the full window gave 22.848 ms, but production-856 @
    #: dgx-h100 at 30 s 94.62 ms where it had been 94.51 ms)
    mip_window_floor: float = 0.5
    #: the least that window lasts (within stage 2's budget)
    mip_window_min_s: float = 1.0
    #: the bound tree's child: its tree stops this long before its time ends, the parent waits this long past it,
    #: and it is started only with at least tree_child_min_s
    tree_early_s: float = 0.3
    tree_grace_s: float = 0.5
    tree_child_min_s: float = 1.0
    #: stage 2's child (half of its portfolio) ends this long before stage 2's budget does, and the parent waits
    #: for its answer at most this long past that end (at 2 s of grace, with the child starved behind the baselines'
    #: on 256 GPUs at 30 s, the command took up to 33.4 s)
    stage2_child_early_s: float = 0.5
    stage2_grace_s: float = 0.5
    #: the MIP that fills starved GPUs (fill.py): at most fill_mip_max_s (measured on production-856 on 128 GPUs:
    #: 3 s 8.777 ms, 6 s 8.761 ms), and only with at least fill_mip_min_s after one more assignment
    fill_mip_max_s: float = 10.0
    fill_mip_min_s: float = 1.0

    # ---- placer compare (commands/compare.py): one budget for every method, TorchRec's planner alongside
    #: kept of an ILP search's share for its model building and pricing, and the least solver limit it gets (the
    #: budget is then overrun, and the output says so)
    compare_margin_s: float = 2.0
    compare_search_min_s: float = 1.0
    #: TorchRec's planner (in its child) gets this share of what is left as its own limit, killed at all of it
    compare_torchrec_share: float = 0.9

    # ---- placer compare
    def compare_search_s(self, left_s: float, searches: int = 1) -> float:
        """The solver limit L of one of ``searches`` ILP searches (the ILP, the forced forms) that share
        ``left_s`` seconds: L + its tie-break (tie_break_limit_s of L) + compare_margin_s fits its share, at
        least compare_search_min_s."""
        room = left_s / max(searches, 1) - self.compare_margin_s
        limit = room
        for _ in range(60):  # L = room - tie_break(L): a contraction (slope <= tie_break_share), converges fast
            limit = room - self.tie_break_limit_s(max(limit, self.compare_search_min_s))
        return max(self.compare_search_min_s, limit)

    def compare_torchrec_s(self, left_s: float) -> tuple[float, float]:
        """TorchRec's planner's (limit, deadline) when the comparison has ``left_s`` seconds left (at least 1 s)."""
        left = max(1.0, left_s)
        return max(1.0, self.compare_torchrec_share * left), left

    # ---- placer sweep
    @staticmethod
    def sweep_count_s(limit_s: float) -> float:
        """One GPU count's solve in a sweep: the whole ``limit_s`` (the limit is per count; the sweep says so)."""
        return limit_s

    # ---- the whole solve
    @staticmethod
    def after_solve_s(pairs: int) -> float:
        """Seconds kept at the end of a solve's limit for pricing the plan and its skew what-ifs, for ``pairs``
        (table, GPU) pairs (fitted: tuning.AFTER_SOLVE_*)."""
        return min(tuning.AFTER_SOLVE_MAX_S, tuning.AFTER_SOLVE_S + tuning.AFTER_SOLVE_S_PER_PAIR * pairs)

    def two_stage_s(self, solve: Budget, after_s: float) -> float:
        """The two stages' share of ``solve``: what is left less the pricing reserve and ``after_s`` (under a work
        limit at least two_stage_work_floor_s); Budget.child clips it to what is left."""
        seconds = solve.left() - self.pricing_reserve_s - after_s
        return max(self.two_stage_work_floor_s, seconds) if solve.deterministic else max(0.0, seconds)

    def two_stage_pass_s(self, solve: Budget, after_s: float, passes_left: int) -> float:
        """A pass of the two stages where ``passes_left`` passes (it included) are still to run (portfolio.py):
        with node-local kinds on the menu, the stages with them get node_local_share of two_stage_s and the stages
        without them what is left after; a lone pass all of two_stage_s."""
        return self.two_stage_s(solve, after_s) * (self.node_local_share if passes_left > 1 else 1.0)

    def baselines_wait_s(self, solve: Budget, after_s: float) -> float | None:
        """How long the solve waits for the baselines' child after the two stages (None: under a work limit, for
        all of them, whatever it takes)."""
        if solve.deterministic:
            return None
        return max(0.0, solve.left() - self.pricing_reserve_s - after_s)

    def search_s(self, solve: Budget, after_s: float) -> float:
        """The single-stage branch and bound's share: under a time limit what is left less ``after_s`` (at least
        single_search_min_s); under a work limit what is left."""
        if solve.deterministic:
            return max(0.0, solve._remaining())
        return max(self.single_search_min_s, solve.left() - after_s)

    def tie_break_limit_s(self, limit_s: float) -> float:
        """The tie-break's share of a solve limited to ``limit_s``: tie_break_share of it, between tie_break_min_s
        and tie_break_max_s (placer compare keeps it after the ILP's own limit)."""
        return min(self.tie_break_max_s, max(self.tie_break_min_s, self.tie_break_share * limit_s))

    def tie_break_s(self, solve: Budget, keep_s: float | None = None) -> float:
        """The tie-break's share of ``solve`` (tie_break_limit_s of its length); with ``keep_s`` a time budget's
        share is at most what is left less ``keep_s`` (at least tie_break_least_s), and never more than is left."""
        seconds = self.tie_break_limit_s(solve.seconds)
        if keep_s is not None and not solve.deterministic:
            seconds = max(self.tie_break_least_s, min(seconds, solve.left() - keep_s))
        return max(0.0, min(seconds, solve._remaining()))

    # ---- the two stages
    def stage2_reserve_s(self, stages: Budget) -> float:
        """What stage 1 leaves of the two stages' budget for stage 2 and pricing the plan."""
        return min(self.stage2_reserve_share * stages.seconds, self.stage2_reserve_max_s)

    def stage1_s(self, stages: Budget, reserve_s: float) -> float:
        """Stage 1's share: what is left less ``reserve_s``, at least stage1_floor_s (clipped by Budget.child)."""
        return max(self.stage1_floor_s, stages.left() - reserve_s)

    def mip_s(self, stages: Budget, reserve_s: float) -> float:
        """Seconds for stage 1's MIP in a child from the rounding on: what is left less ``reserve_s``, and short
        enough that the wait for its answer (mip_grace_s past its limit) ends with stage 2; below mip_min_s the
        bound tree runs there instead."""
        left = stages.left()
        return max(0.0, min(left - reserve_s, left - self.stage2_end_s - self.mip_grace_s))

    def stage2_s(self, stages: Budget) -> float:
        """Stage 2's share (and the bound tree's beside it): what is left less stage2_end_s."""
        return max(0.0, stages.left() - self.stage2_end_s)

    def cbc_s(self, stage2: Budget) -> float:
        """Stage 1's branch and bound in this process: what stage 2 has left less cbc_keep_s."""
        return max(0.0, stage2.left() - self.cbc_keep_s)

    def plain_need_s(self, took_s: float) -> float:
        """What stage 2 must have left for stage 1 without its stream rows, its first run having taken ``took_s``."""
        return self.plain_factor * took_s + self.plain_margin_s

    def plain_s(self, stage2: Budget, took_s: float) -> float:
        """Stage 1 without its stream rows: plain_factor x ``took_s`` (at least plain_floor_s), at most plain_share
        of what stage 2 has left."""
        return max(0.0, min(stage2.left() * self.plain_share, max(self.plain_floor_s, self.plain_factor * took_s)))

    # ---- stage 1
    def relaxation_s(self, stage1: Budget) -> float:
        """Each relaxation's share of stage 1 (clipped by Budget.child to what stage 1 has left)."""
        return max(self.relaxation_share * stage1.seconds, self.relaxation_floor_s)

    def rounding_s(self, stage1: Budget) -> float:
        """Each rounding's share of what stage 1 has left (clipped by Budget.child)."""
        return max(self.rounding_floor_s, stage1.left() * self.rounding_share)

    def pigeonhole_need_s(self, stage1: Budget) -> float:
        """What stage 1 must have left for another round of pigeonhole rows."""
        return stage1.seconds * self.pigeonhole_share

    def bound_lp_s(self, limit_s: float) -> float:
        """The LP relaxation's bound after a solver that gave none, for a solve limited to ``limit_s`` (clipped by
        Budget.child)."""
        return max(self.bound_lp_floor_s, self.bound_lp_share * limit_s)

    # ---- children beside stage 2
    def mip_window_s(self, mip_left_s: float, stage2: Budget) -> float:
        """Stage 2 on stage 1's own choice while the MIP runs: until the MIP's limit (at least mip_window_min_s),
        within what stage 2 has left."""
        return max(0.0, min(max(self.mip_window_min_s, mip_left_s), stage2._remaining()))

    def stage2_child_s(self, stage2: Budget) -> float:
        """Stage 2's child's share: what stage 2 has left less stage2_child_early_s."""
        return max(0.0, stage2.left() - self.stage2_child_early_s)

    def stage2_wait_s(self, stage2: Budget) -> float:
        """How long stage 2 waits for its child's answer: what it has left, plus stage2_grace_s."""
        return max(0.0, stage2.left()) + self.stage2_grace_s

    def fill_mip_s(self, stage2: Budget, run_s: float) -> float:
        """The fill MIP's share: what stage 2 has left after one more run of ``run_s``, at most fill_mip_max_s
        (below fill_mip_min_s it does not run)."""
        return min(self.fill_mip_max_s, stage2.left() - run_s)

    # ---- the split as a whole
    def timeline(self, limit_s: float, pairs: int, *, work: bool = False, setup_s: float = 0.0,
                 kinds_s: float = 0.0) -> dict[str, float]:
        """The shares of one two-stage solve, in order, where every stage spends its whole share: seconds of a
        ``limit_s`` time limit (or nominal seconds of a work limit of ``limit_s`` / WORK_UNIT_S units, ``work``),
        for ``pairs`` (table, GPU) pairs, the setup taking ``setup_s`` and the option kinds ``kinds_s``. Sums to
        at most ``limit_s``; a stage that ends sooner leaves its time to the next."""
        clock = _Hand()
        solve = Budget.of_work(limit_s / WORK_UNIT_S) if work else Budget(limit_s, clock=clock)

        def spend(budget: Budget, seconds: float) -> float:
            seconds = max(0.0, min(seconds, budget._remaining()))
            if solve.deterministic:
                solve.charge(seconds)
            else:
                clock.t += seconds
            return seconds

        out = {"setup": spend(solve, setup_s)}
        after = self.after_solve_s(pairs)
        stages = solve.child(self.two_stage_s(solve, after))
        out["option kinds"] = spend(stages, kinds_s)
        stage1 = stages.child(self.stage1_s(stages, self.stage2_reserve_s(stages)))
        out["stage 1"] = spend(stage1, stage1.seconds)
        out["stage 2"] = spend(stages, stages.child(self.stage2_s(stages)).seconds)
        out["two stages' end"] = spend(stages, stages.seconds)
        wait = self.baselines_wait_s(solve, after)
        out["baselines waited for"] = spend(solve, wait or 0.0)
        out["tie-break"] = spend(solve, solve.child(self.tie_break_s(solve, keep_s=after)).seconds)
        out["after the solve"] = spend(solve, after)
        return out


class _Hand:
    """A clock moved by hand (Schedule.timeline)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


#: The planner's schedule: every stage reads its share here.
SCHEDULE = Schedule()
