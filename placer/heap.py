"""Keeping Python's cyclic garbage collector off the planner's long-lived objects.

A solve holds a large heap for its whole run (the cost model's caches, the option kinds: ~900 MB on
production-856 @ dgx-h100-16node) and allocates millions of short-lived objects on top of it; every collection of
the oldest generation walks all of it. Measured there (this 2-core VM, --time-limit 30, one run, alone): 8 such
collections took 1.95 s of the parent's search after the kinds were folded, and folding the kinds took 5.4-5.7 s
with the collector off instead of 7.0-7.9 s on.
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


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
def frozen() -> Iterator[None]:
    """Every object that exists now moved to the collector's permanent generation for the block: collections
    inside it walk only what the block allocates (and a child forked inside it leaves the parent's pages alone). At
    the end they are unfrozen again, unless an enclosing ``frozen`` block froze them first (it unfreezes them)."""
    outer = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not outer:
            gc.unfreeze()
