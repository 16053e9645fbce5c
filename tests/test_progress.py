"""Progress while solving: the tracker keeps the best numbers, CBC's log is read, the CLI shows it or not."""
from __future__ import annotations

from placer.cli import main
from placer.planner.progress import CbcLogWatcher, LineReporter, Progress, Tracker, line
from tests.conftest import ROOT

CBC_LOG = """Cbc0012I Integer solution of 8.5 found by DiveCoefficient after 10 iterations and 0 nodes (0.5 seconds)
Cbc0010I After 0 nodes, 1 on tree, 8.5 best solution, best possible 7.9 (0.6 seconds)
Cbc0004I Integer solution of 8.25 found after 200 iterations and 12 nodes (1.1 seconds)
Cbc0010I After 100 nodes, 40 on tree, 8.25 best solution, best possible 8.0 (2.0 seconds)
Cbc0010I After 200 nodes, 60 on tree, 1e+50 best solution, best possible 7.95 (2.5 seconds)
"""


def test_tracker_keeps_the_best_plan_and_the_highest_bound():
    seen: list[Progress] = []
    t = Tracker(seen.append)
    t.update("a", incumbent_s=2.0, bound_s=1.0)
    t.update(incumbent_s=3.0, bound_s=0.5)  # worse on both counts: kept as they were
    t.update("b", incumbent_s=1.5, bound_s=1.2)
    assert [(p.stage, p.incumbent_s, p.bound_s) for p in seen] == [("a", 2.0, 1.0), ("a", 2.0, 1.0), ("b", 1.5, 1.2)]
    assert abs(seen[-1].gap - 0.2) < 1e-12
    t.bounds_only().update("c", incumbent_s=0.1, bound_s=1.3)  # a stage-1 incumbent is not a plan
    assert (seen[-1].stage, seen[-1].incumbent_s, seen[-1].bound_s) == ("c", 1.5, 1.3)


def test_cbc_log_is_read_in_seconds_of_step_time(tmp_path):
    seen: list[Progress] = []
    log = tmp_path / "cbc.log"
    log.write_text(CBC_LOG)
    watcher = CbcLogWatcher(str(log), Tracker(seen.append), lambda v: v / 1e3 + 1e-4, every_s=0.01)
    watcher.stop()
    assert seen[-1].incumbent_s == 8.25e-3 + 1e-4
    assert seen[-1].bound_s == 8.0e-3 + 1e-4  # 7.95 came after: CBC's bound only grows, the tracker keeps 8.0


def test_line_reporter_prints_stage_changes_and_skips_repeats():
    out: list[str] = []
    r = LineReporter(out.append, every_s=60)
    r(Progress("stage 1", 2e-3, 1e-3))
    r(Progress("stage 1", 1.9e-3, 1e-3))  # same stage within a minute: not printed
    r(Progress("stage 2", 1.9e-3, 1e-3))
    assert len(out) == 2 and "stage 2" in out[1] and "gap 47.4%" in out[1]
    assert "best 2 ms" in line(Progress("x", 2e-3), 1.0)


def test_solve_shows_progress_on_stderr_unless_quiet(capsys):
    args = ["solve", str(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), str(ROOT / "workloads" / "tiny.yaml"),
            "--time-limit", "10", "--json"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "baselines" in err and "stage 1" in err and "done" in err and "gap" in err
    assert main(args + ["--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_cbc_log_terminal_reports_lines_while_the_solver_still_runs(tmp_path):
    """A solver that writes its log with C-style stdio (here Python's own: block-buffered into a file, a line at a
    time on a terminal) is heard before it exits: CBC into a file held 4 KiB for 16 s (issue 52)."""
    import subprocess
    import sys
    import threading

    from placer.planner.progress import CbcLogTerminal

    heard, seen = threading.Event(), []

    def report(p):
        seen.append(p)
        if p.incumbent_s is not None:
            heard.set()

    log = tmp_path / "cbc.log"
    log.write_text("")
    term = CbcLogTerminal(str(log), Tracker(report), lambda v: v / 1e3)
    assert term.live and term.solver_path != str(log)
    line0 = CBC_LOG.splitlines()[1]
    code = f"import time; print({line0!r}); time.sleep(60)"
    with open(term.solver_path, "w") as out:  # as PuLP opens logPath
        child = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=out)
    try:
        assert heard.wait(30), "nothing heard while the solver runs"
        assert child.poll() is None  # still running: heard line by line, not at its exit
    finally:
        child.kill()
        child.wait()
        term.stop()
    assert seen[-1].incumbent_s == 8.5e-3 and seen[-1].bound_s == 7.9e-3
    assert log.read_text().strip() == line0  # the log file holds what it wrote, '\n' as written


def test_highs_callback_reports_incumbents_and_bounds():
    import pulp

    from placer.planner.progress import highs_callback

    seen: list[Progress] = []
    prob = pulp.LpProblem("cover", pulp.LpMinimize)  # minimized, as the placement ILP is
    x = [pulp.LpVariable(f"x{i}", cat="Binary") for i in range(30)]
    prob += pulp.lpSum((i % 7 + 1) * v for i, v in enumerate(x))
    prob += pulp.lpSum((i % 5 + 2) * v for i, v in enumerate(x)) >= 41
    prob.solve(pulp.HiGHS(msg=False, **highs_callback(Tracker(seen.append), lambda v: v / 1e3, every_s=0.0)))
    best = pulp.value(prob.objective)
    assert seen[-1].incumbent_s == best / 1e3  # heard from HiGHS itself: nothing else reports here
