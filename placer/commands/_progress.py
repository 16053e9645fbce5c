"""Progress on stderr for commands that take long (solve, compare, sweep): a line when a task starts and ends,
and a heartbeat line whenever nothing was said for HEARTBEAT_S seconds, so that no stretch of the command is
silent for more than about that long. Never on stdout (--json keeps it JSON only)."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable

#: seconds of silence after which the heartbeat says what is still running
HEARTBEAT_S = 4.0


class Heartbeat:
    """Writes lines (``say``) and, on a thread, 'still <task>: 12 s (of 60 s)' after HEARTBEAT_S seconds of
    silence while a ``task`` runs. Use as a context manager; ``write`` defaults to stderr."""

    def __init__(self, write: Callable[[str], None] | None = None, every_s: float = HEARTBEAT_S):
        self._write = write or (lambda text: print(text, file=sys.stderr, flush=True))
        self.every_s = every_s
        self._lock = threading.Lock()
        self._last = time.perf_counter()
        self._task: tuple[str, float, float | None] | None = None  # (what, started, limit_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Heartbeat":
        self._thread = threading.Thread(target=self._beat, name="placer-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def say(self, text: str) -> None:
        """Write one line now."""
        with self._lock:
            self._write(text)
            self._last = time.perf_counter()

    def begin(self, what: str, limit_s: float | None = None) -> None:
        """From now until ``end`` (or the next ``begin``), silence is filled with 'still <what>: N s'."""
        with self._lock:
            self._task = (what, time.perf_counter(), limit_s)

    def end(self) -> None:
        with self._lock:
            self._task = None

    @contextmanager
    def task(self, what: str, limit_s: float | None = None):
        """``begin`` for the block's duration."""
        self.begin(what, limit_s)
        try:
            yield self
        finally:
            self.end()

    def _beat(self) -> None:
        while not self._stop.wait(0.25):
            with self._lock:
                now = time.perf_counter()
                if self._task is None or now - self._last < self.every_s:
                    continue
                what, t0, limit = self._task
                tail = f" of its {limit:g} s limit" if limit is not None else ""
                self._write(f"  ... still {what}: {now - t0:.0f} s{tail}")
                self._last = now
