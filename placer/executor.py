"""The one executor of placer's side work: every forked child, its priority (nice), and every setting of Python's
garbage collector. Library code asks for work beside its own through this module; nothing else in placer forks,
calls ``os.nice`` or touches ``gc`` (the runner's and calibration's rank processes are not side work: they are
spawned as whole programs, runner/launcher.py and calibrate/ranks.py).

Children. A child runs one call, ``fn()``, in a forked process while the caller goes on; its result comes back
through a pipe and must pickle. Who uses them: the two-stage planner's baselines (``BackgroundParts``,
two_stage_solve.py), half of the option kinds (``Background``, kinds.py), stage 1's MIP or bound tree beside stage 2
(``TimedChild``, stage1_mip.py / stage1_tree.py), half of stage 2's portfolio and TorchRec's planner (``Child``,
stage2.py, torchrec_io/planner.py), a large plan's first skew what-if (``Background``, skew.py). Each form says
what the caller gets where no child runs (not Linux, no process to be had, serial mode) or the child fails:

* ``Background.result``: the value; an exception in the child raised in the caller (as itself where its class is
  the standard library's or placer's and it pickles, else as PlacerError with its 'Type: message'); a child that
  died, was late or was never started: ``fn()`` computed in the caller instead.
* ``BackgroundParts.collect``: the items that came by the deadline; without a child they are computed in the
  caller, one by one, while the deadline allows (all of them without one); an exception raised as above.
* ``TimedChild.result`` and ``Child.answer``: the value, or None where the child failed, died or was late (it is
  then killed); a ``TimedChild`` that was not started is ``running`` False and its caller does the work itself.

Serial mode: with the environment variable ``PLACER_SERIAL=1`` no child is ever forked and every piece of work
runs in the calling process, as it does where fork is not available: the forms above take their no-child path,
``cores()`` is 1 (so stage 2 runs its whole portfolio itself and stage 1 its own bound tree, as on one core) and
TorchRec's planner runs in a thread. For debugging (one process, one stack, pdb) and tests. Under a --work-limit
a serial solve gives the same plan as a forked one (a work-limited solve starts no child whose answer depends on
timing); under a --time-limit the plan may differ: the stages get no second core's help (stage 1's MIP and the
second half of stage 2's portfolio do not run), and the baselines are priced after them, in what the limit leaves.

The collector. A solve holds a large heap for its whole run (the cost model's caches, the option kinds: ~900 MB
on production-856 @ dgx-h100-16node) and allocates millions of short-lived objects on top of it; every collection
of the oldest generation walks all of it (measured there, 2-core machine, --time-limit 30: 8 such collections
took 1.95 s of the parent's search after the kinds were folded). So:

* ``command_heap()``: the CLI boundary (``placer.cli.main`` run as the command) runs every command inside it:
  what exists is frozen (moved to the collector's permanent generation), and ``settled()`` blocks inside it freeze
  again where the planner's long-lived heap is complete (two_stage.py). A library caller (tests,
  ``placer.cli.main(argv)`` from Python) never has its collector state changed by ``settled()``.
* A fork freezes what exists for the fork itself (``Child``): the child's collections then leave the parent's
  objects, and so their pages, alone (synthetic-1000 @ dgx-h100-32node at 60 s peaked at 1,818 MB summed PSS over
  all processes with it, 1,891 MB without). Outside ``command_heap`` they are unfrozen once the child is started.
* ``no_cyclic_gc()``: the cyclic collector off for a block that allocates much and leaves few cycles behind
  (folding the kinds: 7.0-7.9 s -> 5.4-5.7 s on production-856 @ dgx-h100-16node; the first dense-model op
  timing, which imports torch). Reference counting still frees what is no longer used.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, Callable, Generic, Iterable, TypeVar

from placer.errors import PlacerError

#: The environment variable that turns serial mode on (module docstring): "1" (any value but "" and "0").
SERIAL_ENV = "PLACER_SERIAL"


def serial() -> bool:
    """Whether serial mode is on (``PLACER_SERIAL``): no child is forked, all work runs in the caller."""
    return os.environ.get(SERIAL_ENV, "") not in ("", "0")


def usable_cores() -> int:
    """How many CPUs this process may run on (its affinity where the platform tells it, else all of them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cores() -> int:
    """How many CPUs the planner may keep busy at once, children included: ``usable_cores()``, or 1 in serial
    mode (no child beside the caller)."""
    return 1 if serial() else usable_cores()


def reason(exc: BaseException) -> str:
    """'Type: message' on one line, the message cut at 400 characters."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}{'...' if len(text) > 400 else ''}"


# ---- the collector -------------------------------------------------------------------------------------------

_command_pid: int | None = None  # the process inside command_heap(); None outside it


@contextlib.contextmanager
def command_heap() -> Iterator[None]:
    """For the CLI boundary only (placer/cli.py, the command's own process): what exists frozen for the block,
    ``settled()`` blocks inside it freeze what the planner built, and everything is unfrozen at its end."""
    global _command_pid
    outer = _command_pid
    _command_pid = os.getpid()
    gc.freeze()
    try:
        yield
    finally:
        _command_pid = outer
        if outer is None:
            gc.unfreeze()


@contextlib.contextmanager
def settled() -> Iterator[None]:
    """A block that runs on a long-lived heap built before it (the cost model's caches, the option kinds): inside
    ``command_heap`` (the command's own process, not a child), what exists is frozen until the command's end, so
    that collections walk only what the block allocates; elsewhere nothing changes."""
    if _command_pid is not None and _command_pid == os.getpid():
        gc.freeze()
    yield


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic collector off for the block (and in a child forked inside it), as it was after: for work that
    allocates much and leaves few cycles behind. Reference counting still frees what is no longer used."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def _frozen_for_fork() -> Iterator[None]:
    """What exists frozen while a child is forked (module docstring: the child's collections leave the parent's
    pages alone, a memory saving); unfrozen after unless an enclosing freeze owns them."""
    outer = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not outer:
            gc.unfreeze()


# ---- children ------------------------------------------------------------------------------------------------

class Child:
    """``fn()`` under way in a forked child from construction; ``Child.start`` gives None where no child runs
    (serial mode, not Linux, a daemon process, no process to be had)."""

    def __init__(self, fn: Callable[[], Any], name: str, nice: int = 0, parts: bool = False):
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_child, args=(fn, send, nice, parts), name=name, daemon=True)
        with _frozen_for_fork():
            _stop_highs_workers()
            self.proc.start()
        send.close()

    @classmethod
    def start(cls, fn: Callable[[], Any], name: str, nice: int = 0, parts: bool = False) -> Child | None:
        """``nice`` > 0: the child yields the cores to the parent (and to children started without it) when both
        want them, e.g. work the parent reads only at its end. ``parts``: ``fn()`` is an iterable whose items the
        child sends one by one as ('part', item), as soon as each is there, then ('ok', None)."""
        import multiprocessing as mp

        if serial() or not sys.platform.startswith("linux") or mp.current_process().daemon:  # a daemon: no children
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
    """``fn()`` in a forked child (Child.start) that stops on its own after ``seconds`` of wall time (``fn`` keeps
    that limit); the parent reads its answer at most ``grace_s`` seconds past it. ``start`` False: no child at all.
    ``running`` is False where none was started (serial mode included) or its answer has been read."""

    def __init__(self, fn: Callable[[], Any], name: str, seconds: float, grace_s: float, start: bool = True):
        self.seconds, self.grace_s = float(seconds), grace_s
        self.t0 = time.perf_counter()
        self.call = Child.start(fn, name) if start else None

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


T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` under way from construction; ``result()`` waits for it (at most ``timeout_s`` seconds, after
    which the child is killed and ``fn()`` runs in the caller instead). ``nice``: see Child.start."""

    def __init__(self, fn: Callable[[], T], nice: int = 0):
        self.fn = fn
        self.call = Child.start(fn, "placer-background", nice)

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
    with a deadline takes those that came in time. Where no child runs they are computed in the caller when asked
    for, while the deadline allows; where the child died before the last item, all of them are computed in the
    caller if there is no deadline. ``nice``: see Child.start."""

    def __init__(self, items: Callable[[], Iterable[T]], nice: int = 0):
        self.items = items
        self.call = Child.start(items, "placer-background-parts", nice, parts=True)
        self.got: list[T] = []

    def collect(self, timeout_s: float | None = None, at_least: int = 0) -> tuple[list[T], bool]:
        """(the items that came, in order; whether they all did), waiting at most ``timeout_s`` seconds (None:
        for all of them), and past them for the first ``at_least`` items (or the child's end). The child is
        closed either way. An exception raised in the child is raised here."""
        deadline = None if timeout_s is None else time.perf_counter() + max(0.0, timeout_s)
        if self.call is None:
            return self._here(deadline, at_least)
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
            return (list(self.items()), True) if deadline is None else (self.got, False)
        finally:
            self.close()

    def _here(self, deadline: float | None, at_least: int) -> tuple[list[T], bool]:
        """The items computed in the caller, the next one only while ``deadline`` (a perf_counter reading; None:
        never) has not passed or fewer than ``at_least`` are there."""
        got: list[T] = []
        items = iter(self.items())
        while deadline is None or len(got) < at_least or time.perf_counter() < deadline:
            try:
                got.append(next(items))
            except StopIteration:
                return got, True
        return got, False

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
    """The child's whole life: its niceness, ``fn()`` (or its items one by one), the answer on ``conn``."""
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
