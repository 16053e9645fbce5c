"""placer/forked.py: a child forked after this process used HiGHS can still solve with HiGHS (its worker threads
are stopped before the fork; the child of a process whose workers run waits for them for ever)."""
from __future__ import annotations

import sys

import highspy
import numpy as np
import pytest

from placer.forked import BackgroundParts, ForkedCall


def _knapsacks(seed: int) -> float:
    """A small multi-knapsack MIP (60 binaries, 40 rows) solved by HiGHS; its optimum (a negative profit)."""
    rng = np.random.default_rng(seed)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", 20.0)
    n = 60
    for j in range(n):
        h.addVar(0, 1)
        h.changeColCost(j, -float(rng.integers(1, 30)))
        h.changeColIntegrality(j, highspy.HighsVarType.kInteger)
    for _ in range(40):
        a = rng.integers(1, 20, size=n).astype(float)
        h.addRow(-highspy.kHighsInf, float(a.sum() / 3), n, np.arange(n, dtype=np.int32), a)
    h.run()
    return h.getInfo().objective_function_value


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked (Linux only)")
def test_child_solves_with_highs_after_the_parent_did():
    assert _knapsacks(0) < 0  # HiGHS's scheduler and its worker threads now run in this process
    call = ForkedCall.start(lambda: _knapsacks(1), "placer-test-highs")
    assert call is not None
    got = call.answer(30.0)  # without the fix: None after 30 s (the child waits for workers it does not have)
    assert got is not None and got == pytest.approx(_knapsacks(1))


def _slow_items():
    """1 and 2 at once, then 3 after a minute."""
    import time

    yield 1
    yield 2
    time.sleep(60)
    yield 3


def _failing_items():
    yield 1
    raise ValueError("bad item")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked (Linux only)")
def test_parts_come_one_by_one_and_a_deadline_takes_those_there():
    import time

    assert BackgroundParts(lambda: iter(range(5))).collect() == ([0, 1, 2, 3, 4], True)
    slow = BackgroundParts(_slow_items)
    t0 = time.perf_counter()
    got, complete = slow.collect(2.0)
    assert (got, complete) == ([1, 2], False) and time.perf_counter() - t0 < 10
    assert slow.call is None  # the child is closed (killed)
    with pytest.raises(ValueError, match="bad item"):
        BackgroundParts(_failing_items).collect(30.0)


def test_parts_without_a_child_are_computed_here_when_all_are_asked_for(monkeypatch):
    monkeypatch.setattr(ForkedCall, "start", classmethod(lambda cls, *a, **k: None))
    assert BackgroundParts(lambda: iter([7, 8])).collect(None) == ([7, 8], True)
    assert BackgroundParts(lambda: iter([7, 8])).collect(1.0) == ([], False)
