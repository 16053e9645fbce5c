"""Work that does not depend on the planner's own search, done beside it: a forked child process computes
``fn()`` while the parent goes on (the baselines of a two-stage solve: seconds of pricing that the search
never reads until the end, on a second core). Where fork is not the safe default (not Linux), or the child
cannot be started, ``fn()`` runs in the caller when its result is asked for. The result must pickle; an
exception in the child comes back as the same exception where it pickles, else as a PlacerError.
"""
from __future__ import annotations

import sys
from typing import Callable, Generic, TypeVar

from placer.errors import PlacerError

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` under way from construction; ``result()`` waits for it (at most ``timeout_s`` seconds, after
    which the child is killed and ``fn()`` runs in the caller instead)."""

    def __init__(self, fn: Callable[[], T]):
        self.fn = fn
        self.proc = self.recv = None
        if sys.platform.startswith("linux"):
            import multiprocessing as mp

            try:
                ctx = mp.get_context("fork")
                self.recv, send = ctx.Pipe(duplex=False)
                self.proc = ctx.Process(target=_child, args=(fn, send), name="placer-background", daemon=True)
                self.proc.start()
                send.close()
            except OSError:  # no process to be had (limits): the caller computes it
                self.proc = self.recv = None

    def result(self, timeout_s: float | None = None) -> T:
        if self.proc is None:
            return self.fn()
        try:
            if not self.recv.poll(timeout_s):
                raise TimeoutError
            kind, value = self.recv.recv()
        except (EOFError, OSError, TimeoutError):  # died or late: compute it here
            self.close()
            return self.fn()
        finally:
            self.close()
        if kind == "error":
            raise value if isinstance(value, BaseException) else PlacerError(str(value))
        return value

    def close(self) -> None:
        if self.proc is None:
            return
        self.recv.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.proc = None


def _child(fn, conn) -> None:
    try:
        conn.send(("ok", fn()))
    except BaseException as exc:  # noqa: BLE001 -- handed to the parent
        try:
            conn.send(("error", exc))
        except Exception:  # noqa: BLE001 -- the exception does not pickle
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
