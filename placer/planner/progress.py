"""What the planner says while it works: the stage, the best plan so far and the best lower bound.

The planner calls a ``Reporter`` (any callable taking a ``Progress``) at each stage and whenever the incumbent
or the bound moves; inside CBC's branch and bound, ``CbcLogTerminal`` reads CBC's log line by line as CBC writes
it (through a pseudo-terminal; ``CbcLogWatcher`` follows a plain file where none can be had), inside HiGHS's,
``highs_callback`` hears its incumbents and bounds. The command line turns reports into a live line
(commands/solve.py); the Python API reports nothing unless asked.
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
        read_cbc_log(text, self.tracker, self.to_seconds)


def read_cbc_log(text: str, tracker: Tracker, to_seconds: Callable[[float], float]) -> None:
    """Report to ``tracker`` the incumbents and bounds that ``text`` (whole lines of CBC's log) states."""
    for m in _CBC_SOLUTION.finditer(text):
        tracker.update(incumbent_s=to_seconds(float(m.group(1))))
    for m in _CBC_NODES.finditer(text):
        best, bound = float(m.group(1)), float(m.group(2))
        tracker.update(incumbent_s=to_seconds(best) if best < 1e49 else None, bound_s=to_seconds(bound))


class CbcLogTerminal:
    """Where CBC writes its log while a tracker listens: a pseudo-terminal, so that CBC flushes every line as it
    does on a terminal (into a file its C stdio writes 4 KiB blocks: a solve's first block came after 16 s and the
    live line kept the warm start's numbers for most of a minute, issue 52). A thread copies every byte into
    ``path`` (the log the solve reads afterwards, as before) and reports what the lines say (``CbcLogWatcher.read``).
    ``solver_path``: what to hand PuLP as its ``logPath`` (PuLP opens it and gives it to CBC as stdout and
    stderr). ``live``: whether the terminal could be had; without one (no pty module, none free, or this process a
    session leader, which would take the terminal as its own), ``solver_path`` is ``path`` and a CbcLogWatcher
    follows the file, in CBC's blocks."""

    def __init__(self, path: str, tracker: Tracker, to_seconds: Callable[[float], float]):
        self.path, self.tracker, self.to_seconds = path, tracker, to_seconds
        self.watcher: CbcLogWatcher | None = None
        self._master = self._slave = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.solver_path = path
        self.live = self._open_terminal()
        if not self.live:
            self.watcher = CbcLogWatcher(path, tracker, to_seconds)
            tracker.update(stage=f"{tracker.stage} (no terminal for cbc's log here: its best and bound come in "
                                 "4 KiB blocks and may lag)")

    def _open_terminal(self) -> bool:
        try:
            import pty
            import termios

            if os.getsid(0) == os.getpid():
                return False  # a session leader opening a terminal by name would make it its controlling one
            master, slave = pty.openpty()
            attrs = termios.tcgetattr(slave)
            attrs[1] &= ~termios.OPOST  # no '\r\n' for '\n': the log reads as CBC wrote it
            termios.tcsetattr(slave, termios.TCSANOW, attrs)
            name = os.ttyname(slave)
        except (ImportError, OSError, AttributeError):
            return False
        self._master, self._slave, self.solver_path = master, slave, name
        self._thread = threading.Thread(target=self._copy, name="placer-cbc-log", daemon=True)
        self._thread.start()
        return True

    def _copy(self) -> None:
        """Copy the terminal's output into the log file, reporting whole lines as they come, until stopped and
        drained (or the terminal closes)."""
        import select

        pending = b""
        with open(self.path, "ab") as out:
            while True:
                ready, _, _ = select.select([self._master], [], [], 0.1)
                if not ready:
                    if self._stop.is_set():
                        break
                    continue
                try:
                    data = os.read(self._master, 65536)
                except OSError:  # EIO: every writer closed it
                    break
                if not data:
                    break
                out.write(data)
                out.flush()
                complete = (pending + data).rfind(b"\n") + 1
                text, pending = (pending + data)[:complete], (pending + data)[complete:]
                if text:
                    read_cbc_log(text.decode("utf-8", errors="replace"), self.tracker, self.to_seconds)
            if pending:
                read_cbc_log(pending.decode("utf-8", errors="replace"), self.tracker, self.to_seconds)

    def stop(self) -> None:
        """Stop listening once what CBC wrote is copied (the solve has returned: CBC has exited)."""
        if self.watcher is not None:
            self.watcher.stop()
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        for fd in (self._slave, self._master):
            try:
                os.close(fd)
            except OSError:
                pass


def highs_callback(tracker: Tracker, to_seconds: Callable[[float], float], every_s: float = 0.5) -> dict:
    """PuLP's HiGHS arguments (``callbackTuple``, ``callbacksToActivate``) that report HiGHS's incumbents as it
    finds them and its bound at most every ``every_s`` (from its MIP interrupt checks), converted to seconds by
    ``to_seconds``. The callback only reads: the search is the same with it as without."""
    import highspy

    kinds = highspy.cb.HighsCallbackType
    last = [0.0]

    def callback(kind, _message, data_out, _data_in, _user) -> None:
        if kind == kinds.kCallbackMipImprovingSolution:
            tracker.update(incumbent_s=to_seconds(data_out.objective_function_value))
            return
        now = time.perf_counter()
        if now - last[0] < every_s:
            return
        last[0] = now
        primal, dual = data_out.mip_primal_bound, data_out.mip_dual_bound
        tracker.update(incumbent_s=to_seconds(primal) if abs(primal) < 1e30 else None,
                       bound_s=to_seconds(dual) if abs(dual) < 1e30 else None)

    return {"callbackTuple": (callback, None),
            "callbacksToActivate": [kinds.kCallbackMipImprovingSolution, kinds.kCallbackMipInterrupt]}


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
