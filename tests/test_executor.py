"""placer/executor.py, the one owner of forks, niceness and collector settings: its contract (a child's value, its
exception, its death and its lateness each give the documented answer), serial mode (PLACER_SERIAL=1: no fork,
the same plan under a work limit), the collector blocks, and a child forked after this process used HiGHS still
solving with HiGHS (its worker threads are stopped before the fork; otherwise the child waits for them for ever)."""
from __future__ import annotations

import gc
import os
import sys
import time

import highspy
import numpy as np
import pytest

from placer import executor
from placer.errors import InfeasibleError, PlacerError
from placer.executor import (SERIAL_ENV, Background, BackgroundParts, Child, TimedChild, command_heap, cores,
                             no_cyclic_gc, settled)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked (Linux only)")


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
    call = Child.start(lambda: _knapsacks(1), "placer-test-highs")
    assert call is not None
    got = call.answer(30.0)  # without the fix: None after 30 s (the child waits for workers it does not have)
    assert got is not None and got == pytest.approx(_knapsacks(1))


def _slow_items():
    """1 and 2 at once, then 3 after a minute."""
    yield 1
    yield 2
    time.sleep(60)
    yield 3


def _failing_items():
    yield 1
    raise ValueError("bad item")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child is forked (Linux only)")
def test_parts_come_one_by_one_and_a_deadline_takes_those_there():
    assert BackgroundParts(lambda: iter(range(5))).collect() == ([0, 1, 2, 3, 4], True)
    slow = BackgroundParts(_slow_items)
    got, complete = slow.collect(2.0)
    assert (got, complete) == ([1, 2], False)
    assert slow.call is None  # the child is closed (killed)
    with pytest.raises(ValueError, match="bad item"):
        BackgroundParts(_failing_items).collect(30.0)


def test_parts_without_a_child_are_computed_here_while_the_deadline_allows(monkeypatch):
    monkeypatch.setattr(Child, "start", classmethod(lambda cls, *a, **k: None))
    assert BackgroundParts(lambda: iter([7, 8])).collect(None) == ([7, 8], True)
    assert BackgroundParts(lambda: iter([7, 8])).collect(0.0) == ([], False)  # the deadline already passed
    assert BackgroundParts(lambda: iter([7, 8])).collect(0.0, at_least=1) == ([7], False)
    assert BackgroundParts(lambda: iter([7, 8])).collect(600.0) == ([7, 8], True)


# ---- the contract ---------------------------------------------------------------------------------------------

class ForeignError(Exception):
    """An exception class the parent might not be able to import (not the standard library's, not placer's)."""


def _raises_foreign():
    raise ForeignError("from elsewhere")


def _raises_placer():
    raise InfeasibleError("nothing fits")


def _here_or_stuck(parent: int) -> str:
    """'here' in the process ``parent``; in any other (a child) a minute's sleep first."""
    if os.getpid() != parent:
        time.sleep(60)
        return "child"
    return "here"


def _dies() -> int:
    os._exit(3)


@linux_only
def test_background_gives_the_value_or_raises_the_childs_exception():
    assert Background(lambda: {"a": [1, 2.5]}).result(30.0) == {"a": [1, 2.5]}
    with pytest.raises(InfeasibleError, match="nothing fits"):  # placer's own: itself
        Background(_raises_placer).result(30.0)
    with pytest.raises(PlacerError, match="ForeignError: from elsewhere"):  # any other class: its reason text
        Background(_raises_foreign).result(30.0)


@linux_only
def test_background_late_or_dead_is_computed_in_the_caller():
    parent = os.getpid()
    job = Background(lambda: _here_or_stuck(parent))
    assert job.call is not None
    assert job.result(0.5) == "here" and job.call is None  # late: the child killed, fn() run here
    dead = Background(lambda: 7 if os.getpid() == parent else _dies())
    assert dead.result(30.0) == 7


@linux_only
def test_timed_child_late_failed_or_not_started_answers_none():
    parent = os.getpid()
    late = TimedChild(lambda: _here_or_stuck(parent), "placer-test-late", seconds=0.2, grace_s=0.2)
    assert late.running
    assert late.result() is None and not late.running  # killed
    failed = TimedChild(_raises_foreign, "placer-test-failed", seconds=30.0, grace_s=1.0)
    assert failed.result() is None
    ok = TimedChild(lambda: 41 + 1, "placer-test-ok", seconds=30.0, grace_s=1.0)
    assert ok.result() == 42
    never = TimedChild(lambda: 1, "placer-test-never", seconds=30.0, grace_s=1.0, start=False)
    assert not never.running and never.ready() and never.result() is None


@linux_only
def test_child_answer_is_none_when_it_dies():
    call = Child.start(_dies, "placer-test-dies")
    assert call is not None and call.answer(30.0) is None


# ---- serial mode ----------------------------------------------------------------------------------------------

def test_serial_mode_forks_nothing_and_runs_the_work_here(monkeypatch):
    monkeypatch.setenv(SERIAL_ENV, "1")
    parent = os.getpid()
    assert executor.serial() and cores() == 1
    assert Child.start(lambda: 1, "placer-test-serial") is None
    job = Background(lambda: os.getpid())
    assert job.call is None and job.result(0.0) == parent
    with pytest.raises(InfeasibleError):
        Background(_raises_placer).result()
    assert BackgroundParts(lambda: iter([os.getpid()])).collect(None) == ([parent], True)
    assert not TimedChild(lambda: 1, "placer-test-serial", seconds=30.0, grace_s=1.0).running
    monkeypatch.setenv(SERIAL_ENV, "0")
    assert not executor.serial()


@linux_only
def test_serial_and_forked_solves_give_the_same_plan(monkeypatch):
    """tiny on two DGX H100 nodes (the two-stage planner: the baselines in a child, and with the kinds' threshold
    lowered the option kinds folded in two processes) under a work limit: the same plan and prices either way."""
    from pathlib import Path

    from placer.planner import kinds as kinds_module
    from placer.planner.solve import SolveConfig, solve
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    root = Path(__file__).resolve().parent.parent
    workload = load_workload(root / "workloads" / "tiny.yaml")
    topo = Topology(load_hardware(root / "hardware_specs" / "dgx-h100-2node.yaml"), workload.dense.dtype)
    monkeypatch.setattr(kinds_module, "PARALLEL_MIN_TABLES", 2)
    started, real_start = [], Child.start.__func__

    def counted(cls, *args, **kwargs):
        call = real_start(cls, *args, **kwargs)
        started.append(call is not None)
        return call

    monkeypatch.setattr(Child, "start", classmethod(counted))

    def plan_of() -> dict:
        plan = solve(topo, workload, SolveConfig(work_limit=2000)).model_dump()
        for block in (plan["solver"], plan["solver"].get("tie_break") or {}):
            for key in ("wall_s", "stage_times_s"):  # wall-clock readings (s)
                block.pop(key, None)
        return plan

    forked = plan_of()
    assert sum(started) >= 2  # the baselines' child and the kinds' child ran
    monkeypatch.setenv(SERIAL_ENV, "1")
    started.clear()
    serial = plan_of()
    assert not any(started)
    assert serial == forked


# ---- the collector ----------------------------------------------------------------------------------------------

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


def test_settled_freezes_only_inside_the_commands_heap():
    assert gc.get_freeze_count() == 0
    with settled():  # a library caller: its collector left alone
        assert gc.get_freeze_count() == 0
    with command_heap():
        outer = gc.get_freeze_count()
        assert outer > 0
        more = [[i] for i in range(1000)]  # lists: tracked by the collector
        with settled():
            assert gc.get_freeze_count() >= outer + 1000
        assert gc.get_freeze_count() >= outer + 1000  # frozen to the command's end
        del more
    assert gc.get_freeze_count() == 0


def test_command_heap_unfreezes_on_an_exception():
    with pytest.raises(KeyError):
        with command_heap():
            raise KeyError("x")
    assert gc.get_freeze_count() == 0


@linux_only
def test_a_fork_outside_the_command_leaves_nothing_frozen():
    assert gc.get_freeze_count() == 0
    assert Background(lambda: 5).result(30.0) == 5
    assert gc.get_freeze_count() == 0
