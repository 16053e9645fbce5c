"""Progress on stderr: compare's per-method lines and budget, the heartbeat (placer/commands/_progress.py)."""
from __future__ import annotations

import json
import threading

from placer.cli import main
from placer.commands._common import DEFAULT_TIME_LIMIT_S, limit_line
from placer.commands._progress import Heartbeat
from tests.conftest import ROOT

HW = str(ROOT / "hardware_specs" / "dgx-h100.yaml")
TINY = str(ROOT / "workloads" / "tiny.yaml")


def test_heartbeat_fills_silence_while_a_task_runs():
    lines, said = [], threading.Event()

    def write(text):
        lines.append(text)
        if "still" in text:
            said.set()

    with Heartbeat(write, every_s=0.05) as hb:
        hb.say("start")
        with hb.task("solving x", 60):
            assert said.wait(30)
    assert lines[0] == "start" and any("still solving x" in x and "of its 60 s limit" in x for x in lines)


def test_heartbeat_is_quiet_without_a_task():
    lines = []
    with Heartbeat(lines.append, every_s=0.01) as hb:
        hb.say("one")
    assert lines == ["one"]


def test_limit_line_names_the_default():
    assert f"time limit {DEFAULT_TIME_LIMIT_S:g} s (the default; --time-limit S to change): ends by " \
        in limit_line(DEFAULT_TIME_LIMIT_S)
    assert "(--time-limit)" in limit_line(5)
    assert "(what the budget leaves)" in limit_line(5, source="what the budget leaves")


def test_compare_says_each_method_and_its_budget_on_stderr(capsys):
    assert main(["compare", HW, TINY, "--methods", "greedy_size,host_cpu,ilp", "--time-limit", "8", "--json"]) == 0
    cap = capsys.readouterr()
    rows = json.loads(cap.out)
    assert [r["method"] for r in rows] == ["greedy_size", "host_cpu", "ilp"]
    err = cap.err
    assert "compare: time budget 8 s (--time-limit): ends by" in err
    assert "[1/3] greedy_size" in err and "[2/3] host_cpu" in err
    assert "[3/3] ilp: solver limit" in err and "(what the budget leaves)" in err
    assert "  ilp: step " in err


def test_a_time_limit_given_is_not_called_the_default(capsys):
    """Issue 52: sweep said '(the default)' for --time-limit 60 given on the command line; solve and compare too."""
    given = f"time limit {DEFAULT_TIME_LIMIT_S:g} s (--time-limit): ends by"
    default = f"time limit {DEFAULT_TIME_LIMIT_S:g} s (the default; --time-limit S to change)"
    limit = ["--time-limit", f"{DEFAULT_TIME_LIMIT_S:g}"]
    assert main(["sweep", HW, TINY, "--gpus", "8", "--json"] + limit) == 0
    assert given in capsys.readouterr().err
    assert main(["sweep", HW, TINY, "--gpus", "8", "--json"]) == 0
    assert default in capsys.readouterr().err
    assert main(["solve", HW, TINY, "--json", "--method", "greedy_size"] + limit) == 0
    assert given in capsys.readouterr().err
    assert main(["compare", HW, TINY, "--methods", "greedy_size", "--json"] + limit) == 0
    assert "time budget 60 s (--time-limit)" in capsys.readouterr().err
