"""Plans that do not match their hardware or workload are refused with the reason, exit 2."""
from __future__ import annotations

import json
import warnings

import pytest

from placer.cli import main
from tests.conftest import ROOT

HW = str(ROOT / "hardware_specs/dgx-h100.yaml")
WL = str(ROOT / "workloads/tiny.yaml")


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["solve", HW, WL, "--method", "greedy_size", "-o", str(out), "--json"]) == 0
    return json.loads(out.read_text())


def _simulate(tmp_path, plan: dict, capsys) -> tuple[int, str]:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(plan))
    capsys.readouterr()
    code = main(["simulate", HW, WL, str(p)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_good_plan_simulates(tmp_path, good_plan, capsys):
    assert _simulate(tmp_path, good_plan, capsys)[0] == 0


def test_hash_mismatch_is_a_what_if(tmp_path, good_plan, capsys):
    """A workload other than the plan's is re-priced with a warning, not refused (tests/test_whatif.py)."""
    plan = json.loads(json.dumps(good_plan))
    plan["workload"]["sha256"] = "0" * 64
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # pyproject's filterwarnings ignores SpecWarning in the suite
        code, err = _simulate(tmp_path, plan, capsys)
    assert code == 0 and "warning:" in err and "workload differs" in err and "re-priced" in err


def test_unknown_device(tmp_path, good_plan, capsys):
    plan = json.loads(json.dumps(good_plan))
    plan["placements"][0]["shards"][0]["device"] = "node0/gpu42"
    code, err = _simulate(tmp_path, plan, capsys)
    assert code == 2 and "node0/gpu42" in err and "placements[0].shards[0].device" in err


def test_missing_table(tmp_path, good_plan, capsys):
    plan = json.loads(json.dumps(good_plan))
    dropped = plan["placements"].pop()["table"]
    code, err = _simulate(tmp_path, plan, capsys)
    assert code == 2 and dropped in err and "without a placement" in err


def test_rows_not_covered(tmp_path, good_plan, capsys):
    plan = json.loads(json.dumps(good_plan))
    shard = plan["placements"][0]["shards"][0]
    shard["rows"][1] -= 10
    shard["hbm_rows"] = shard["rows"][1] - shard["rows"][0] - shard["host_rows"]
    code, err = _simulate(tmp_path, plan, capsys)
    assert code == 2 and "not placed" in err


def test_over_capacity(tmp_path, capsys):
    big = str(ROOT / "workloads/mlperf-dlrm-v1.yaml")
    hw = str(ROOT / "hardware_specs/h100-pcie-host.yaml")
    out = tmp_path / "plan.json"
    assert main(["solve", hw, big, "--method", "uvm", "-o", str(out), "--json"]) == 0
    plan = json.loads(out.read_text())
    for p in plan["placements"]:  # everything into HBM: 97 GiB into 80 GB
        for s in p["shards"]:
            s["hbm_rows"], s["host_rows"] = s["rows"][1] - s["rows"][0], 0
    out.write_text(json.dumps(plan))
    capsys.readouterr()
    assert main(["simulate", hw, big, str(out)]) == 2
    err = capsys.readouterr().err
    assert "node0/gpu0" in err and "GiB" in err and "Traceback" not in err


def test_check_validates_plans_against_specs(tmp_path, good_plan, capsys):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(good_plan))
    assert main(["check", str(p), "--hardware", HW, "--workload", WL]) == 0
    assert "maps onto the hardware and workload" in capsys.readouterr().out
    bad = json.loads(json.dumps(good_plan))
    bad["placements"][0]["sharding"] = "diagonal"
    p.write_text(json.dumps(bad))
    assert main(["check", str(p)]) == 2
    assert "placements[0].sharding" in capsys.readouterr().err
