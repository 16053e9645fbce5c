"""What the planner says while it works: the stage, the best plan so far and the best lower bound.

The planner calls a ``Reporter`` (any callable taking a ``Progress``) at each stage and whenever the incumbent
or the bound moves; inside CBC's branch and bound, ``CbcLogWatcher`` reads CBC's log as it is written. The
command line turns reports into a live line (commands/solve.py); the Python API reports nothing unless asked.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Progress:
    """One report. Times in seconds; None where not known yet."""

    stage: str
    incumbent_s: float | None = None  # step time of the best plan so far
    bound_s: float | None = None  # best valid lower bound on the step time

    @property
    def gap(self) -> float | None:
        if self.incumbent_s is None or self.bound_s is None or self.incumbent_s <= 0:
            return None
        return max(0.0, (self.incumbent_s - self.bound_s) / self.incumbent_s)


Reporter = Callable[[Progress], None]


class Tracker:
    """Keeps the best incumbent and bound seen so far and forwards every change to ``reporter`` (if any)."""

    def __init__(self, reporter: Reporter | None):
        self.reporter = reporter
        self.stage = "starting"
        self.incumbent_s: float | None = None
        self.bound_s: float | None = None
        self._lock = threading.Lock()

    def update(self, stage: str | None = None, incumbent_s: float | None = None, bound_s: float | None = None) -> None:
        """Report a new stage, a plan (kept if better) or a bound (kept if higher)."""
        with self._lock:
            if stage is not None:
                self.stage = stage
            if incumbent_s is not None and (self.incumbent_s is None or incumbent_s < self.incumbent_s):
                self.incumbent_s = incumbent_s
            if bound_s is not None and (self.bound_s is None or bound_s > self.bound_s):
                self.bound_s = bound_s
            report = Progress(self.stage, self.incumbent_s, self.bound_s)
        if self.reporter is not None:
            self.reporter(report)

    def bounds_only(self) -> "Tracker":
        """A tracker that passes on stages and bounds but not incumbents (for a solver whose solutions are
        not plans, e.g. the two-stage planner's aggregated model)."""
        outer = self

        class _Bounds(Tracker):
            def update(self, stage=None, incumbent_s=None, bound_s=None):
                outer.update(stage, None, bound_s)

        return _Bounds(None)


_CBC_NODES = re.compile(r"Cbc0010I After \d+ nodes, \d+ on tree, ([-+0-9.eE]+) best solution, best possible "
                        r"([-+0-9.eE]+)")
_CBC_SOLUTION = re.compile(r"Cbc00(?:04|12)I Integer solution of ([-+0-9.eE]+) found")


class CbcLogWatcher:
    """Follows a CBC log file on a thread and reports its incumbents and bounds, converted to seconds by
    ``to_seconds`` (the model's objective is scaled and has no constant)."""

    def __init__(self, path: str, tracker: Tracker, to_seconds: Callable[[float], float], every_s: float = 0.5):
        self.path, self.tracker, self.to_seconds, self.every_s = path, tracker, to_seconds, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following, after reading what the log got last."""
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        offset = 0
        while True:
            stopping = self._stop.wait(self.every_s)
            offset = self._read_from(offset)
            if stopping:
                return

    def _read_from(self, offset: int) -> int:
        """Read whole new lines from byte ``offset``; the offset after them."""
        try:
            if os.path.getsize(self.path) <= offset:
                return offset
            with open(self.path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return offset
        complete = data.rfind(b"\n") + 1  # only whole lines; the rest is read next time
        self.read(data[:complete].decode("utf-8", errors="replace"))
        return offset + complete

    def read(self, text: str) -> None:
        """Report what ``text`` (whole lines of the log) says."""
        for m in _CBC_SOLUTION.finditer(text):
            self.tracker.update(incumbent_s=self.to_seconds(float(m.group(1))))
        for m in _CBC_NODES.finditer(text):
            best, bound = float(m.group(1)), float(m.group(2))
            self.tracker.update(incumbent_s=self.to_seconds(best) if best < 1e49 else None,
                                bound_s=self.to_seconds(bound))


def line(report: Progress, elapsed_s: float) -> str:
    """One line for a person: '12.3 s  stage 1: relaxation  best 8.886 ms  bound 8.414 ms  gap 5.3%'."""
    parts = [f"{elapsed_s:6.1f} s", report.stage]
    if report.incumbent_s is not None:
        parts.append(f"best {report.incumbent_s * 1e3:.4g} ms")
    if report.bound_s is not None:
        parts.append(f"bound {report.bound_s * 1e3:.4g} ms")
    if report.gap is not None:
        parts.append(f"gap {report.gap:.1%}")
    return "  ".join(parts)


class LineReporter:
    """Prints a line on a stream when the stage changes, or at most every ``every_s`` when the numbers move
    (for logs and pipes; a terminal gets a live line instead, see commands/solve.py)."""

    def __init__(self, write: Callable[[str], None], every_s: float = 2.0):
        self.write, self.every_s = write, every_s
        self.t0 = time.perf_counter()
        self._last: tuple[float, Progress] | None = None

    def __call__(self, report: Progress) -> None:
        now = time.perf_counter()
        if self._last is not None:
            then, before = self._last
            if before == report or (before.stage == report.stage and now - then < self.every_s):
                return
        self._last = (now, report)
        self.write(line(report, now - self.t0))
