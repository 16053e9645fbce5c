"""HiGHS's banner kept off standard output.

highspy prints "Running HiGHS <version> ... Copyright ..." on file descriptor 1 the first time a ``Highs``
object is made in a process, before any option (``output_flag``) can be set, and PuLP's HiGHS class makes
its own. On `placer ... --json` that banner corrupted the JSON. The banner is printed once per process, so
``swallow_banner`` makes that first object with descriptor 1 pointed at /dev/null (flushing C's stdio buffer
before it is restored); every later ``Highs`` is silent. A forked child inherits the printed state.
"""
from __future__ import annotations

import ctypes
import os
import sys

import highspy

_swallowed = False


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # pragma: no cover - no C library to flush (not Linux/macOS)
        pass


def swallow_banner() -> None:
    """Make this process's first ``highspy.Highs`` with standard output sent nowhere (once; cheap after)."""
    global _swallowed
    if _swallowed:
        return
    _swallowed = True
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):  # closed or missing stdout: nothing of ours to keep in order
        pass
    try:
        saved = os.dup(1)
    except OSError:  # descriptor 1 closed: the banner has nowhere to go anyway
        highspy.Highs()
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
        finally:
            os.close(null)
        highspy.Highs()
        _flush_c_stdio()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def new_highs(threads: int | None = None) -> highspy.Highs:
    """A silent ``highspy.Highs`` (no banner, ``output_flag`` off), with ``threads`` when given."""
    swallow_banner()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    if threads is not None:
        h.setOptionValue("threads", threads)
    return h
