"""One call in a forked child process, its result back through a pipe: what the two-stage planner's baselines
(planner/background.py) and TorchRec's planner (torchrec_io/planner.py) run beside the parent's work.

The result must pickle. An exception in the child comes back as itself where its class is the standard
library's or placer's own and it pickles (the parent can always unpickle it), else as its ``reason`` text
('Type: message'): a TorchRec exception would make the parent import TorchRec to read it.
"""
from __future__ import annotations

import sys
from typing import Any, Callable


def reason(exc: BaseException) -> str:
    """'Type: message' on one line, the message cut at 400 characters."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}{'...' if len(text) > 400 else ''}"


class ForkedCall:
    """``fn()`` under way in a forked child from construction (``start``: None where fork is not the safe
    default, i.e. not Linux, or no process can be had)."""

    def __init__(self, fn: Callable[[], Any], name: str):
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_child, args=(fn, send), name=name, daemon=True)
        self.proc.start()
        send.close()

    @classmethod
    def start(cls, fn: Callable[[], Any], name: str) -> ForkedCall | None:
        if not sys.platform.startswith("linux"):
            return None
        try:
            return cls(fn, name)
        except OSError:  # no process to be had (limits)
            return None

    def poll(self, timeout_s: float | None) -> bool:
        """Whether the result is there within ``timeout_s`` seconds (None: wait for it)."""
        return self.recv.poll(timeout_s)

    def receive(self) -> tuple[str, Any]:
        """('ok', value) or ('error', the exception or its reason text); EOFError if the child died first."""
        return self.recv.recv()

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


def _readable_anywhere(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module == "builtins" or module == "placer" or module.startswith("placer.")


def _child(fn, conn) -> None:
    try:
        conn.send(("ok", fn()))
    except BaseException as exc:  # noqa: BLE001 -- handed to the parent
        try:
            conn.send(("error", exc if _readable_anywhere(exc) else reason(exc)))
        except Exception:  # noqa: BLE001 -- the exception does not pickle
            conn.send(("error", reason(exc)))
    finally:
        conn.close()
