"""The torchrec method (issue 18 part 3): TorchRec's own EmbeddingShardingPlanner on the same machine and
workload, its plan imported and priced by placer's model; `compare` lists it; without torchrec `--method
torchrec` exits 2 with the install line and `compare` skips it with a note. The tests that run TorchRec skip
without it locally and fail instead under CI (CI installs torchrec, README's test command)."""
from __future__ import annotations

import json
import sys
import time

import pytest

from placer.cli import main
from placer.cost import CostModel
from placer.forms.storage import FORCED_FORMS
from placer.plan_price import priced_plan
from placer.planner.schedule import SCHEDULE
from placer.planner.solve import METHODS, SolveConfig, solve
from placer.specs import load_hardware
from placer.topology import Topology
from placer.torchrec_io import INSTALL_HINT
from placer.torchrec_io import planner as trec_planner
from placer.units import GiB
from tests.conftest import ROOT, require_torchrec, shipped_pair


def _paths(hw: str, wl: str) -> tuple[str, str]:
    return str(ROOT / f"hardware_specs/{hw}.yaml"), str(ROOT / f"workloads/{wl}.yaml")


def _no_torchrec(monkeypatch):
    """Make `import torchrec` fail, as on a machine without it."""
    monkeypatch.setitem(sys.modules, "torchrec", None)


@pytest.mark.parametrize("hw", ["h100-pcie-host", "dgx-h100"])
@pytest.mark.parametrize("wl", ["tiny", "mlperf-dlrm-v1"])
def test_torchrec_plan_fits_and_prices(hw, wl):
    require_torchrec()
    topo, w = shipped_pair(hw, wl)
    t0 = time.perf_counter()
    plan = solve(topo, w, SolveConfig(method="torchrec", time_limit_s=60))
    assert time.perf_counter() - t0 < 180  # a hang, not the machine's speed (the planner's own limit is 60 s)
    assert plan.method == "torchrec" and plan.solver.backend == "torchrec"
    assert "EmbeddingShardingPlanner" in plan.solver.note
    assert [p.table for p in plan.placements] == [t.name for t in w.tables]
    priced = priced_plan(plan, topo, w)  # check_plan + every memory's capacity, then placer's price
    assert priced["step_time_s"] == pytest.approx(plan.predicted["step_time_s"], rel=1e-9)
    assert plan.solver.objective_step_time_s == pytest.approx(plan.predicted["step_time_s"], rel=1e-9)
    # the ILP is priced by the same model; TorchRec's plan is a real plan, never better than a proven optimum
    # by more than the gap
    if wl == "tiny":
        best = solve(topo, w, SolveConfig(method="ilp", time_limit_s=30))
        if best.solver.status == "optimal":
            assert (best.predicted["step_time_s"]
                    <= plan.predicted["step_time_s"] * (1 + best.solver.gap_tolerance) + 1e-12)


def test_planner_inputs_from_the_specs():
    """What TorchRec is told: world and local sizes, per-rank capacities, bandwidths (bytes/ms), batch."""
    topo, w = shipped_pair("dgx-h100", "mlperf-dlrm-v1")
    inp = trec_planner.planner_inputs(CostModel(topo, w))
    t = inp.topology
    assert t["world_size"] == 8 and t["local_world_size"] == 8 and t["compute_device"] == "cuda"
    assert t["hbm_cap"] == int((79.6 - 4) * GiB)
    assert t["ddr_cap"] == int((2048 - 64) * GiB / 8)
    assert t["hbm_mem_bw"] == pytest.approx(3350e9 * 0.35 / 1e3)
    assert "inter_host_bw" not in t and t["intra_host_bw"] > 0
    assert inp.batch_size == 16384 // 8
    assert inp.pooling_factors["C1"] == [1.0] and inp.optimizer == "sgd"
    topo2, _ = shipped_pair("dgx-h100-2node", "mlperf-dlrm-v1")
    t2 = trec_planner.planner_inputs(CostModel(topo2, w)).topology
    assert t2["world_size"] == 16 and t2["local_world_size"] == 8
    assert t2["inter_host_bw"] == pytest.approx(8 * 50e9 / 8 / 1e3)
    topo3, tiny = shipped_pair("h100-pcie-host", "tiny")
    inp3 = trec_planner.planner_inputs(CostModel(topo3, tiny))
    assert inp3.pooling_factors["t_shared"] == [1.0, 1.0] and inp3.feature_names["t_shared"] == ["f_cat_a", "f_cat_b"]
    assert inp3.pooling_factors["t_hist"] == [2.0]


def test_compare_lists_torchrec(capsys):
    require_torchrec()
    hw, wl = _paths("h100-pcie-host", "tiny")
    assert "torchrec" in METHODS
    assert main(["compare", hw, wl, "--json", "--methods", "ilp,greedy_size,torchrec", "--time-limit", "10"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"ilp", "greedy_size", "torchrec"}
    assert rows["torchrec"]["status"] == "heuristic" and rows["torchrec"]["step_time_s"] > 0
    assert rows["ilp"]["step_time_s"] <= rows["torchrec"]["step_time_s"] * 1.005


def test_compare_dgx_h100_mlperf_with_torchrec(capsys):
    """issue 18's target: compare with the torchrec method on mlperf-dlrm-v1 @ dgx-h100 in < 60 s at the default
    budget. --time-limit is the budget of the whole comparison; checked here at 20 s (the default's 60 s would
    make this the suite's slowest test): the ILP's solver limit what was left, TorchRec's deadline within it (the
    command's wall time is a benchmark's to measure, not asserted here: it flaked on a loaded machine)."""
    require_torchrec()
    hw, wl = _paths("dgx-h100", "mlperf-dlrm-v1")
    assert main(["compare", hw, wl, "--json", "--time-limit", "20"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(METHODS) - set(FORCED_FORMS)  # no table of mlperf-dlrm-v1 allows a forced form
    assert rows["torchrec"]["step_time_s"] > 0 and 0 < rows["torchrec"]["solve_wall_s"] < 20
    assert rows["torchrec"]["deadline_s"] <= 20
    ilp = rows["ilp"]
    assert 1 <= ilp["time_limit_s"] < 20 - SCHEDULE.compare_margin_s
    assert ilp["status"] in ("optimal", "feasible") and ilp["gap"] >= 0 and ilp["lower_bound_step_time_s"] > 0
    assert all(r["solve_wall_s"] >= 0 for r in rows.values())


def test_compare_prints_the_budget_and_the_ilp_gap(capsys):
    require_torchrec()
    hw, wl = _paths("h100-pcie-host", "tiny")
    assert main(["compare", hw, wl, "--methods", "ilp,greedy_size,torchrec", "--time-limit", "15"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "time budget 15 s (--time-limit, the whole comparison); took" in out
    assert "ilp: solver limit" in out and "gap" in out and "lower bound" in out
    assert "torchrec: planned in a child process alongside the others" in out


def test_ilp_time_limit_leaves_room_for_the_tie_break():
    tie_break_limit, margin = SCHEDULE.tie_break_limit_s, SCHEDULE.compare_margin_s
    for left in (4.5, 8.0, 20.0, 57.5, 100.0, 1000.0):  # from the least limit + 1 s + margin = 4 s up
        limit = SCHEDULE.compare_search_s(left)
        assert limit + tie_break_limit(limit) + margin <= left + 1e-6
        assert limit + tie_break_limit(limit) + margin >= left - 1e-3  # nothing wasted
        two = SCHEDULE.compare_search_s(2 * left, 2)  # two searches share twice as long: each the same
        assert abs(two - limit) < 1e-9
    assert SCHEDULE.compare_search_s(0.5) == SCHEDULE.compare_search_min_s
    assert SCHEDULE.compare_torchrec_s(10.0) == (9.0, 10.0) and SCHEDULE.compare_torchrec_s(0.2) == (1.0, 1.0)


def test_start_returns_at_once_and_collect_gives_the_plan():
    """start() forks TorchRec's planner and returns; the parent plans meanwhile; collect() gives the same plan
    as torchrec_plan()."""
    require_torchrec()
    topo, w = shipped_pair("h100-pcie-host", "mlperf-dlrm-v1")
    model = CostModel(topo, w)
    model.base_cost  # the dense model's trace, cached: not part of what start() is timed for
    t0 = time.perf_counter()
    run = trec_planner.start(model, time_limit_s=30)
    # start() does not wait for the plan (30 s at most); a loaded machine forks slowly, hence 10 s
    assert time.perf_counter() - t0 < 10.0 and run.deadline_s == 30 + trec_planner.WATCHDOG_GRACE_S
    other = solve(topo, w, SolveConfig(method="greedy_size"))  # the parent's own work, while TorchRec plans
    res = trec_planner.collect(run)
    again = trec_planner.torchrec_plan(CostModel(topo, w), time_limit_s=30)
    assert [p.model_dump() for p in res.placements] == [p.model_dump() for p in again.placements]
    assert res.predicted["step_time_s"] == pytest.approx(again.predicted["step_time_s"], rel=1e-12)
    assert 0 < res.planner_s <= res.wall_s and other.predicted["step_time_s"] > 0


def test_compare_kills_torchrec_at_the_budget(monkeypatch, capsys):
    """A TorchRec planner that outlives the comparison's budget is killed there: a 'failed' row, on time."""
    require_torchrec()
    monkeypatch.setattr(trec_planner, "_run_torchrec", lambda inputs, limit: time.sleep(60))
    hw, wl = _paths("h100-pcie-host", "tiny")
    t0 = time.perf_counter()
    assert main(["compare", hw, wl, "--json", "--methods", "greedy_size,torchrec", "--time-limit", "4"]) == 0
    assert time.perf_counter() - t0 < 30  # the stub sleeps 60 s: killed at the 4 s budget, not waited for
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["greedy_size"]["step_time_s"] > 0
    assert rows["torchrec"]["status"] == "failed" and "no plan within" in rows["torchrec"]["note"]


def test_solve_torchrec_writes_a_plan_that_simulates(tmp_path, capsys):
    require_torchrec()
    hw, wl = _paths("h100-pcie-host", "tiny")
    out = tmp_path / "trec.json"
    assert main(["solve", hw, wl, "--method", "torchrec", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["simulate", hw, wl, str(out), "--json"]) == 0
    plan = json.loads(out.read_text())
    assert plan["method"] == "torchrec"
    sim = json.loads(capsys.readouterr().out)
    assert sim["predicted"]["step_time_s"] == pytest.approx(plan["predicted"]["step_time_s"], rel=1e-6)


def test_without_torchrec_solve_exits_2_with_the_install_line(monkeypatch, tmp_path, capsys):
    _no_torchrec(monkeypatch)
    assert trec_planner.available()[0] is False
    hw, wl = _paths("h100-pcie-host", "tiny")
    assert main(["solve", hw, wl, "--method", "torchrec", "-o", str(tmp_path / "p.json")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "torchrec==1.8.0" in err and "--no-deps" in err and "docs/torchrec.md" in err
    assert not (tmp_path / "p.json").exists()


def test_without_torchrec_compare_skips_it_with_a_note(monkeypatch, capsys):
    _no_torchrec(monkeypatch)
    hw, wl = _paths("h100-pcie-host", "tiny")
    assert main(["compare", hw, wl, "--json", "--methods", "greedy_size,torchrec"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["greedy_size"]["step_time_s"] > 0
    assert rows["torchrec"]["status"] == "skipped" and rows["torchrec"]["step_time_s"] is None
    assert INSTALL_HINT in rows["torchrec"]["note"]
    assert main(["compare", hw, wl, "--methods", "greedy_size,torchrec"]) == 0  # the table prints the row
    assert "skipped" in capsys.readouterr().out


def test_planner_failure_is_a_row_not_a_crash(monkeypatch, capsys):
    require_torchrec()

    def boom(inputs, time_limit_s):
        raise RuntimeError("no sharding fits")

    monkeypatch.setattr(trec_planner, "_run_torchrec", boom)
    hw, wl = _paths("h100-pcie-host", "tiny")
    assert main(["compare", hw, wl, "--json", "--methods", "greedy_size,torchrec"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["torchrec"]["status"] == "failed"
    assert rows["torchrec"]["note"] == "torchrec planner failed: RuntimeError: no sharding fits"
    assert main(["solve", hw, wl, "--method", "torchrec"]) == 1
    assert "torchrec planner failed" in capsys.readouterr().err


def test_planner_time_limit(monkeypatch):
    require_torchrec()
    monkeypatch.setattr(trec_planner, "WATCHDOG_GRACE_S", 0.0)
    monkeypatch.setattr(trec_planner, "_run_torchrec", lambda inputs, limit: time.sleep(60))
    topo, w = shipped_pair("h100-pcie-host", "tiny")
    t0 = time.perf_counter()
    with pytest.raises(trec_planner.TorchRecPlannerError, match="no plan within 1 s"):
        trec_planner.torchrec_plan(CostModel(topo, w), time_limit_s=1.0)
    assert time.perf_counter() - t0 < 30  # the stub sleeps 60 s: stopped at the 1 s limit, not waited for


def test_machines_torchrec_cannot_describe():
    topo, w = shipped_pair("dgx-h100", "tiny")
    model = CostModel(topo, w)
    model_copy = trec_planner.planner_inputs(model)
    assert model_copy.topology["world_size"] == 8


def test_cpu_ranks_are_planned_as_torchrec_cpu_ranks():
    """A unified-memory machine (CPU rank processes) is TorchRec's CPU topology: no HBM, each rank its share of
    the one RAM (the planner then proposes its CPU kernels, placed rank:R/cpu)."""
    topo, w = shipped_pair("measured-cpu-2026-11-23", "tiny")
    assert all(topo.is_unified(g) for g in topo.gpus)
    inputs = trec_planner.planner_inputs(CostModel(topo, w))
    assert inputs.topology["compute_device"] == "cpu" and inputs.topology["hbm_cap"] == 0
    host = topo.memories[f"{topo.nodes[0]}/host"].usable_bytes
    assert inputs.topology["ddr_cap"] == int(host / len(topo.gpus))
