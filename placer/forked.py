"""One call in a forked child process, its result back through a pipe: what runs beside the parent's work
(the two-stage planner's baselines and half of its option kinds, a plan's skew what-ifs, TorchRec's planner).

``Background`` is the simple form: ``fn()`` under way in a child from construction, its result asked for
later; where fork is not the safe default (not Linux), or the child cannot be started or dies, ``fn()`` runs
in the caller when its result is asked for. ``ForkedCall`` is the raw child (torchrec_io/planner.py watches
its own deadline on it).

The result must pickle. An exception in the child comes back as itself where its class is the standard
library's or placer's own and it pickles (the parent can always unpickle it), else as its ``reason`` text
('Type: message'): a TorchRec exception would make the parent import TorchRec to read it.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Generic, Iterable, TypeVar

from placer.errors import PlacerError
from placer.heap import frozen


def usable_cores() -> int:
    """How many CPUs this process may run on (its affinity where the platform tells it, else all of them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def reason(exc: BaseException) -> str:
    """'Type: message' on one line, the message cut at 400 characters."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}{'...' if len(text) > 400 else ''}"


class ForkedCall:
    """``fn()`` under way in a forked child from construction (``start``: None where fork is not the safe
    default, i.e. not Linux, or no process can be had)."""

    def __init__(self, fn: Callable[[], Any], name: str, nice: int = 0, parts: bool = False):
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_child, args=(fn, send, nice, parts), name=name, daemon=True)
        # the child's collections then leave the parent's objects (and their pages) alone: synthetic-1000 @
        # dgx-h100-32node at 60 s peaked at 1,818 MB summed PSS over all processes with it, 1,891 MB without
        with frozen():
            _stop_highs_workers()
            self.proc.start()
        send.close()

    @classmethod
    def start(cls, fn: Callable[[], Any], name: str, nice: int = 0, parts: bool = False) -> ForkedCall | None:
        """``nice`` > 0: the child yields the cores to the parent (and to children started without it) when
        both want them, e.g. work the parent reads only at its end. ``parts``: ``fn()`` is an iterable whose
        items the child sends one by one as ('part', item), as soon as each is there, then ('ok', None)."""
        import multiprocessing as mp

        if not sys.platform.startswith("linux") or mp.current_process().daemon:  # a daemon has no children
            return None
        try:
            return cls(fn, name, nice, parts)
        except OSError:  # no process to be had (limits)
            return None

    def poll(self, timeout_s: float | None) -> bool:
        """Whether the result is there within ``timeout_s`` seconds (None: wait for it)."""
        return self.recv.poll(timeout_s)

    def receive(self) -> tuple[str, Any]:
        """('ok', value) or ('error', the exception or its reason text); EOFError if the child died first."""
        return self.recv.recv()

    def answer(self, timeout_s: float) -> Any | None:
        """The child's value, waiting for it at most ``timeout_s`` seconds; None if it failed, died or was late.
        The child is closed (killed if it still runs) either way."""
        try:
            if not self.poll(max(0.0, timeout_s)):
                return None
            kind, value = self.receive()
        except (EOFError, OSError):
            return None
        finally:
            self.close()
        return value if kind == "ok" else None

    @property
    def exitcode(self) -> int | None:
        self.proc.join(5)
        return self.proc.exitcode

    def close(self) -> None:
        """Kill the child if it still runs."""
        self.recv.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)


class TimedChild:
    """``fn()`` in a forked child (ForkedCall.start) that stops on its own after ``seconds`` of wall time (``fn``
    keeps that limit); the parent reads its answer at most ``grace_s`` past it. ``start`` False: no child at all.
    ``running`` is False where none was started or its answer has been read."""

    def __init__(self, fn: Callable[[], Any], name: str, seconds: float, grace_s: float, start: bool = True):
        self.seconds, self.grace_s = float(seconds), grace_s
        self.t0 = time.perf_counter()
        self.call = ForkedCall.start(fn, name) if start else None

    @property
    def running(self) -> bool:
        """Whether the child still holds its core (its answer not yet read, nor it closed)."""
        return self.call is not None

    def seconds_left(self) -> float:
        """Wall seconds until the child's own limit ends (0 once past it)."""
        return max(0.0, self.seconds - (time.perf_counter() - self.t0))

    def ready(self) -> bool:
        """Whether the child's answer (or its end) is there to be read."""
        return self.call is None or self.call.poll(0)

    def result(self) -> Any | None:
        """The child's answer, waiting for it until its limit ends (plus ``grace_s``); None if it died, failed or
        was late (then killed), or no child ran."""
        if self.call is None:
            return None
        call, self.call = self.call, None
        return call.answer(self.seconds_left() + self.grace_s)

    def close(self) -> None:
        if self.call is not None:
            self.call.close()
            self.call = None


def _stop_highs_workers() -> None:
    """Stop HiGHS's worker threads if this process started them (it solved something with highspy): a forked child
    inherits HiGHS's scheduler but not its threads, and its first parallel task then waits for them for ever
    (highspy 1.16: stage 1's MIP child hung at its root's cuts, and production-856 @ dgx-h100-16node at 60 s lost
    its bound, 22.556 -> 22.499 ms). The parent's next solve starts them again."""
    highspy = sys.modules.get("highspy")
    if highspy is not None:
        highspy.Highs.resetGlobalScheduler(True)


def _readable_anywhere(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module == "builtins" or module == "placer" or module.startswith("placer.")


def _child(fn, conn, nice: int, parts: bool) -> None:
    try:
        if nice:
            os.nice(nice)
        if parts:
            for item in fn():
                conn.send(("part", item))
            conn.send(("ok", None))
        else:
            conn.send(("ok", fn()))
    except BaseException as exc:  # noqa: BLE001 -- handed to the parent
        try:
            conn.send(("error", exc if _readable_anywhere(exc) else reason(exc)))
        except Exception:  # noqa: BLE001 -- the exception does not pickle
            conn.send(("error", reason(exc)))
    finally:
        conn.close()


T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` under way from construction; ``result()`` waits for it (at most ``timeout_s`` seconds, after
    which the child is killed and ``fn()`` runs in the caller instead). ``nice``: see ForkedCall.start."""

    def __init__(self, fn: Callable[[], T], nice: int = 0):
        self.fn = fn
        self.call = ForkedCall.start(fn, "placer-background", nice)

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


class BackgroundParts(Generic[T]):
    """The items of ``items()`` computed in a forked child, each sent back as soon as it is there, so that a caller
    with a deadline takes those that came in time. Where no child can be had, or it died before the last item,
    every item is computed in the caller when asked for without a timeout. ``nice``: see ForkedCall.start."""

    def __init__(self, items: Callable[[], Iterable[T]], nice: int = 0):
        self.items = items
        self.call = ForkedCall.start(items, "placer-background-parts", nice, parts=True)
        self.got: list[T] = []

    def collect(self, timeout_s: float | None = None, at_least: int = 0) -> tuple[list[T], bool]:
        """(the items that came, in order; whether they all did), waiting at most ``timeout_s`` seconds (None:
        for all of them), and past them for the first ``at_least`` items (or the child's end). The child is
        closed either way. An exception raised in the child is raised here."""
        if self.call is None:
            return (list(self.items()), True) if timeout_s is None else (self.got, False)
        deadline = None if timeout_s is None else time.perf_counter() + max(0.0, timeout_s)
        try:
            while True:
                waiting = deadline is None or len(self.got) < at_least
                wait = None if waiting else max(0.0, deadline - time.perf_counter())
                if not self.call.poll(wait):
                    return self.got, False
                kind, value = self.call.receive()
                if kind == "part":
                    self.got.append(value)
                elif kind == "ok":
                    return self.got, True
                else:
                    raise value if isinstance(value, BaseException) else PlacerError(str(value))
        except (EOFError, OSError):  # died: without a deadline, everything again here
            return (list(self.items()), True) if timeout_s is None else (self.got, False)
        finally:
            self.close()

    def close(self) -> None:
        if self.call is not None:
            self.call.close()
            self.call = None
