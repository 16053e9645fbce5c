"""One time budget, handed down from a solve to its stages instead of deadlines threaded as floats.

A Budget is a span of wall time on a monotonic clock (``time.perf_counter``, seconds) from its start: ``left()``
and ``expired()`` ask about it, ``deadline`` is its end on that clock (for code that takes one, and for solvers
given a time limit: ``left()``). ``child`` carves a sub-budget starting now; a child shares its parent's
``stages``, the record of wall seconds per named stage (``with budget.stage("stage 1"):`` adds the time the
block took), so one record collects a whole solve for its plan (SolverInfo.stage_times_s).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Budget:
    """``seconds`` of wall time from ``start`` (default: now) on ``clock``; ``stages`` records wall seconds
    per stage name (shared with every child)."""

    def __init__(self, seconds: float, *, start: float | None = None, stages: dict[str, float] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.seconds = float(seconds)
        self.start = clock() if start is None else start
        self.stages: dict[str, float] = {} if stages is None else stages

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

    def left(self) -> float:
        """Seconds until the deadline (negative once past it)."""
        return self.seconds - (self.clock() - self.start)

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def child(self, seconds: float | None = None, *, fraction: float | None = None) -> Budget:
        """A budget starting now of ``seconds``, or of ``fraction`` of the time left here (one of the two),
        recording its stages here. It is not clipped to this budget: a stage given a floor (at least 5 s for
        stage 1) keeps it even when this budget has less left."""
        if (seconds is None) == (fraction is None):
            raise ValueError("Budget.child takes seconds or fraction, not both or neither")
        length = seconds if seconds is not None else fraction * self.left()
        return Budget(length, stages=self.stages, clock=self.clock)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall seconds the block takes to ``stages[name]`` (a stage entered again adds up)."""
        t0 = self.clock()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + (self.clock() - t0)
