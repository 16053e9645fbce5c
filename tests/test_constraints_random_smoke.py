"""validation/constraints_random.py's core on tiny: its judge tells a plan that holds the constraints from one that
breaks them, an exit 3 that names the conflict, an exit 2 naming the field, an invalid set let through and a bug;
three random sets solved by the ILP and two baselines get only good verdicts; one solve through the CLI exits as
the API said."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from placer.constraints import Rules
from placer.errors import SpecError
from placer.planner.solve import SolveConfig, solve
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from validation.constraints_cli import cli_checks
from validation.constraints_draw import device_patterns, draw_set
from validation.constraints_random import (ROOT, VERDICTS, judge_error, judge_plan, problems, run_case, run_pair,
                                           tally, workload_text)

HW = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"
TINY = ROOT / "workloads" / "tiny.yaml"
GOOD = {"verdict", "plan", "exit3_named", "exit2_named"}


def _file(tmp_path: Path, constraints: dict, name: str = "w") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(workload_text(TINY, constraints))
    return path


def test_a_plan_is_judged_against_the_constraints(tmp_path):
    wl = load_workload(TINY)
    topo = Topology(load_hardware(HW), wl.dense.dtype)
    plan = solve(topo, wl, SolveConfig(method="greedy_size"))
    assert judge_plan(plan, wl, topo)[0] == "plan"
    strict = load_workload(_file(tmp_path, {"tables": [{"tables": ["t_*"], "memory": ["host"]}]}))
    verdict, detail = judge_plan(plan, strict, topo)
    assert verdict == "plan_breaks" and "constraints.tables[0]" in detail


def test_exits_are_judged(tmp_path):
    impossible = _file(tmp_path, {"tables": [{"tables": ["t_users"], "shardings": ["host"]},
                                             {"tables": ["t_*"], "memory": ["hbm"]}]}, "impossible")
    r = run_case(HW, impossible, "greedy_size", 500, None)
    assert (r["verdict"], r["detail"]) == ("exit3_named", "constraint") and "constraints.tables[" in r["message"]
    lacking = _file(tmp_path, {"tables": [{"tables": ["t_geo"], "devices": ["gpu9"]}]}, "lacking")
    assert run_case(HW, lacking, "host_cpu", 500, "constraints.tables[0].devices[0]")["verdict"] == "exit2_named"
    assert run_case(HW, lacking, "host_cpu", 500, "constraints.tables[1]")["verdict"] == "exit2_unnamed"
    feasible = _file(tmp_path, {"tables": [{"tables": ["t_geo"], "devices": ["gpu1"]}]}, "feasible")
    assert run_case(HW, feasible, "host_cpu", 500, "constraints.tables[0]")["verdict"] == "missed_bad"
    assert judge_error(RuntimeError("boom"), None) == ("error", "RuntimeError: boom")


def test_a_valid_draw_loads_and_an_invalid_one_names_its_field(tmp_path):
    wl = load_workload(TINY)
    topo = Topology(load_hardware(HW), wl.dense.dtype)
    assert {"node0/gpu3", "gpu3", "host", "node0/*"} <= set(device_patterns(topo))
    rng = random.Random(0)
    for k in range(30):  # every pattern names a table and a device: the workload loads and compiles
        d = draw_set(rng, wl, topo, bad_p=0.0)
        assert d.expect is None and 1 <= len(d.constraints["tables"]) <= 4
        drawn = load_workload(_file(tmp_path, d.constraints, f"ok{k}"))
        Rules.of(drawn, topo)
    for k in range(10):
        d = draw_set(rng, wl, topo, bad_p=1.0)
        with pytest.raises(SpecError) as err:
            Rules.of(load_workload(_file(tmp_path, d.constraints, f"bad{k}")), topo)
        assert d.expect in str(err.value)


@pytest.fixture(scope="module")
def three_sets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sets")
    return run_pair("tiny", "pcie-4gpu-workstation", 3, 500, random.Random(7), folder,
                    methods=["ilp", "greedy_size", "fae"], log=lambda s: None)


def test_three_random_sets_get_good_verdicts(three_sets):
    t = tally(three_sets)
    assert t["sets"] == 3 and t["solves"] == 9 == sum(t[v] for v in VERDICTS)
    assert problems(three_sets) == []
    assert {r["verdict"] for c in three_sets for r in c["results"]} <= GOOD


def test_the_cli_exits_as_the_api_said(three_sets):
    [check] = cli_checks(three_sets, 1, 500, random.Random(0))
    assert check["ok"], check
    assert check["exit"] in (0, 2, 3) and not check["traceback"]
