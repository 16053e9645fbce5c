"""Work that does not depend on the planner's own search, done beside it: a forked child process computes
``fn()`` while the parent goes on (the baselines of a two-stage solve: seconds of pricing that the search
never reads until the end, on a second core). Where fork is not the safe default (not Linux), or the child
cannot be started, ``fn()`` runs in the caller when its result is asked for. The result must pickle; an
exception in the child comes back as itself where placer/forked.py can hand it over, else as a PlacerError
with its 'Type: message'.
"""
from __future__ import annotations

from typing import Callable, Generic, TypeVar

from placer.errors import PlacerError
from placer.forked import ForkedCall

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` under way from construction; ``result()`` waits for it (at most ``timeout_s`` seconds, after
    which the child is killed and ``fn()`` runs in the caller instead)."""

    def __init__(self, fn: Callable[[], T]):
        self.fn = fn
        self.call = ForkedCall.start(fn, "placer-background")

    def result(self, timeout_s: float | None = None) -> T:
        if self.call is None:
            return self.fn()
        try:
            if not self.call.poll(timeout_s):
                raise TimeoutError
            kind, value = self.call.receive()
        except (EOFError, OSError, TimeoutError):  # died or late: compute it here
            self.close()
            return self.fn()
        finally:
            self.close()
        if kind == "error":
            raise value if isinstance(value, BaseException) else PlacerError(str(value))
        return value

    def close(self) -> None:
        if self.call is not None:
            self.call.close()
            self.call = None
