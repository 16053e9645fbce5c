"""One budget, of time or of work, handed down from a solve to its stages instead of deadlines threaded as floats.

A Budget is a span of seconds on a clock from its start: ``left()`` and ``expired()`` ask about it, ``deadline``
is its end on that clock. ``child`` carves a sub-budget starting now; a child shares its parent's clock and
``stages``, the record of wall seconds per named stage (``with budget.stage("stage 1"):`` adds the wall time the
block took), so one record collects a whole solve for its plan (SolverInfo.stage_times_s).

Two clocks:

* time (``Budget(seconds)``): wall time on ``time.perf_counter``. A faster machine searches further, so the
  same inputs can give a different plan and bound on another machine, or on a busy one.
* work (``Budget.of_work(units)``): a WorkMeter, which moves only when a stage ``charge``s it for work it did,
  counted (simplex iterations, branch-and-bound nodes, tables visited; effort.py) and weighted by nominal
  seconds. Solvers get iteration and node limits instead of time limits (effort.py). The same inputs and the
  same work limit give the same plan on any machine (CLI ``--work-limit``); a work unit is a nominal
  millisecond (WORK_UNIT_S): about a millisecond of search on the reference machine, more on a slower one.

Stages charge unconditionally: in a time budget the charges do not move the clock, but they are counted all the
same (``counted``, and per stage ``stage_work``), so two plans of the same inputs made under a time limit on
different machines show how much search each stage did. Where a stage finds its budget spent (``left()`` at or
below 0, ``expired()``, or a solver stopped by its limit: ``note_ran_out``), the stage is named in ``ran_out``:
its result depends on how far the limit let it search (under a time limit, on the machine's speed).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


#: Nominal seconds one unit of a work limit stands for (a nominal millisecond).
WORK_UNIT_S = 1e-3


class WorkMeter:
    """A deterministic clock: the nominal seconds of work charged to it so far (never the time)."""

    def __init__(self):
        self.used_s = 0.0

    def __call__(self) -> float:
        return self.used_s

    def charge(self, seconds: float) -> None:
        if seconds > 0:
            self.used_s += float(seconds)


def wall_clock() -> float:
    """``time.perf_counter()``, looked up at each call (so a test can stand in a slower machine's clock)."""
    return time.perf_counter()


class Budget:
    """``seconds`` from ``start`` (default: now) on ``clock`` (wall time, or a WorkMeter: nominal seconds of
    work); ``stages`` records wall seconds per stage name (shared with every child)."""

    def __init__(self, seconds: float, *, start: float | None = None, stages: dict[str, float] | None = None,
                 clock: Callable[[], float] = wall_clock, stage_work: dict[str, float] | None = None,
                 shared: _Shared | None = None):
        self.clock = clock
        self.stage_work: dict[str, float] = {} if stage_work is None else stage_work  # nominal s per stage
        self.seconds = float(seconds)
        self.start = clock() if start is None else start
        self.wall_start = self.start if clock is wall_clock else time.perf_counter()
        self.stages: dict[str, float] = {} if stages is None else stages
        # what a solve's budgets share: the counted work (a work budget's clock is that count), the stages open
        # now (innermost last) and how often each found its budget spent
        self.shared = shared if shared is not None else _Shared(clock if isinstance(clock, WorkMeter) else WorkMeter())

    @property
    def counted(self) -> WorkMeter:
        """The nominal seconds of work charged so far to this budget, its parents and its children."""
        return self.shared.counted

    @property
    def ran_out(self) -> dict[str, int]:
        """Stage name -> how many times a search in it found its budget spent ("solve": outside any stage)."""
        return self.shared.ran_out

    def note_ran_out(self, stage: str | None = None) -> None:
        """Record that a search stopped because its budget was spent, in ``stage`` (default: the innermost stage
        open now)."""
        name = stage or (self.shared.open[-1] if self.shared.open else "solve")
        self.shared.ran_out[name] = self.shared.ran_out.get(name, 0) + 1

    @classmethod
    def of_work(cls, units: float, *, wall_start: float | None = None) -> Budget:
        """A budget of ``units`` work units (nominal milliseconds, WORK_UNIT_S) on a fresh WorkMeter;
        ``wall_start``: a ``time.perf_counter()`` reading its wall_elapsed counts from (default: now)."""
        budget = cls(units * WORK_UNIT_S, clock=WorkMeter())
        if wall_start is not None:
            budget.wall_start = wall_start
        return budget

    @property
    def deterministic(self) -> bool:
        """True for a work budget: its clock moves only by what is charged to it."""
        return isinstance(self.clock, WorkMeter)

    @property
    def limit_name(self) -> str:
        """What stops a search that runs out of this budget, in words: "work limit" or "time limit"."""
        return "work limit" if self.deterministic else "time limit"

    def charge(self, seconds: float) -> None:
        """Charge ``seconds`` of nominal work: counted in either budget; a work budget's clock is that count."""
        self.shared.counted.charge(seconds)

    @classmethod
    def unlimited(cls) -> Budget:
        """A budget that never runs out (tests, and callers that stop on something else)."""
        return cls(float("inf"))

    @property
    def deadline(self) -> float:
        """The end of the budget on its clock, seconds."""
        return self.start + self.seconds

    def elapsed(self) -> float:
        """Seconds since the start."""
        return self.clock() - self.start

    def wall_elapsed(self) -> float:
        """Wall seconds since the start, whatever the clock."""
        return time.perf_counter() - self.wall_start

    def left(self) -> float:
        """Seconds until the deadline (negative once past it: noted in ``ran_out``)."""
        left = self._remaining()
        if left <= 0:
            self.note_ran_out()
        return left

    def _remaining(self) -> float:
        """Seconds until the deadline, without noting anything."""
        return self.seconds - (self.clock() - self.start)

    def allows(self, seconds: float, stage: str | None = None) -> bool:
        """Whether more than ``seconds`` are left, for a step that needs that long; if not, the step is skipped
        for want of time, which is noted in ``ran_out`` (under ``stage``, default the innermost stage open)."""
        if self._remaining() > seconds:
            return True
        self.note_ran_out(stage)
        return False

    def expired(self) -> bool:
        """Whether the deadline has passed (noted in ``ran_out`` if so)."""
        return self.left() <= 0

    def child(self, seconds: float | None = None, *, fraction: float | None = None) -> Budget:
        """A budget starting now of ``seconds``, or of ``fraction`` of the time left here (one of the two),
        recording its stages here. It is clipped to what is left here (never below 0), under a time limit and a
        work limit alike: a child never outlives its parent, and a stage's floor (schedule.py: at least 5 s for
        stage 1, 10 s for a relaxation) holds only while the limit leaves that much, so that the command ends
        within its limit (issue 36: production-856 @ dgx-h100 at --time-limit 5 ended after 13.4 s) and a work
        limit is never overrun by a floor (deterministic either way: the clip reads the work meter)."""
        if (seconds is None) == (fraction is None):
            raise ValueError("Budget.child takes seconds or fraction, not both or neither")
        length = seconds if seconds is not None else fraction * self.left()
        length = max(0.0, min(length, self._remaining()))
        return Budget(length, stages=self.stages, clock=self.clock, stage_work=self.stage_work, shared=self.shared)

    def at_least(self, seconds: float) -> Budget:
        """This budget (its records, its start for wall_elapsed) ending no sooner than ``seconds`` from now: a time
        budget extended where the least work needs more than is left; a work budget as it is."""
        if self.deterministic or self._remaining() >= seconds:
            return self
        out = Budget(seconds, stages=self.stages, clock=self.clock, stage_work=self.stage_work, shared=self.shared)
        out.wall_start = self.wall_start
        return out

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall seconds the block takes to ``stages[name]`` (a stage entered again adds up), whatever
        the budget's clock, and the nominal seconds of work charged meanwhile to ``stage_work[name]``; a budget
        found spent inside the block is noted under ``name`` in ``ran_out``."""
        t0, w0 = time.perf_counter(), self.counted()
        self.shared.open.append(name)
        try:
            yield
        finally:
            self.shared.open.pop()
            self.stages[name] = self.stages.get(name, 0.0) + (time.perf_counter() - t0)
            self.stage_work[name] = self.stage_work.get(name, 0.0) + (self.counted() - w0)


class OutOfTime(Exception):
    """A stage stopped because its deadline passed (a time limit only: KindFolder.kinds_of between tables); the
    caller falls back on what it has (the two-stage planner: the baselines). Pickles (a forked child raises it)."""


class _Shared:
    """What every budget of one solve shares (Budget.shared)."""

    def __init__(self, counted: WorkMeter):
        self.counted = counted
        self.open: list[str] = []
        self.ran_out: dict[str, int] = {}
