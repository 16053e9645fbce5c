"""placer/heap.py: the collector is off inside no_cyclic_gc and as it was after; frozen() freezes what exists, and
only the outermost frozen() unfreezes (a fork inside a frozen solve leaves its heap frozen)."""
from __future__ import annotations

import gc

from placer.heap import frozen, no_cyclic_gc


def test_no_cyclic_gc_restores_the_state_it_found():
    assert gc.isenabled()
    with no_cyclic_gc():
        assert not gc.isenabled()
        with no_cyclic_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block found it off and leaves it off
    assert gc.isenabled()
    gc.disable()
    try:
        with no_cyclic_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_only_the_outermost_frozen_block_unfreezes():
    assert gc.get_freeze_count() == 0
    with frozen():
        outer = gc.get_freeze_count()
        assert outer > 0
        more = [[i] for i in range(1000)]  # lists: tracked by the collector
        with frozen():
            assert gc.get_freeze_count() >= outer + 1000
        assert gc.get_freeze_count() >= outer + 1000  # the inner block left them frozen
        del more
    assert gc.get_freeze_count() == 0


def test_frozen_unfreezes_on_an_exception():
    try:
        with frozen():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.get_freeze_count() == 0
