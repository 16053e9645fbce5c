"""Robust choices (issue 17 part 3): skew what-if (placer/skew.py) and the tie-break (planner/tiebreak.py)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from placer.cli import main
from placer.cost import CostModel
from placer.errors import SpecError
from placer.plan import Placement, Plan, Shard, SpecRef
from placer.simulate import predict
from placer.skew import scaled_coverage, workload_with_skew
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT

HW = str(ROOT / "hardware_specs" / "h100-pcie-host.yaml")
TINY = str(ROOT / "workloads" / "tiny.yaml")
MLPERF = str(ROOT / "workloads" / "mlperf-dlrm-v1.yaml")


def _pair(wl_path=TINY, hw_path=HW):
    wl = load_workload(wl_path)
    return Topology(load_hardware(hw_path), wl.dense.dtype), wl


def _hot_split_plan(topo, wl, fraction: float) -> Plan:
    """Every table table-wise on the first GPU with its hottest ``fraction`` of rows in HBM."""
    g = topo.gpus[0]
    placements = []
    for t in wl.tables:
        k = int(round(fraction * t.rows))
        placements.append(Placement(table=t.name, sharding="table_wise", shards=[
            Shard(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=k, host_rows=t.rows - k)]))
    return Plan(hardware=SpecRef(name=topo.spec.name), workload=SpecRef(name=wl.name), method="hand",
                placements=placements)


def test_skew_one_is_the_base():
    topo, wl = _pair()
    assert workload_with_skew(wl, 1.0) is wl
    plan = _hot_split_plan(topo, wl, 0.1)
    assert predict(CostModel(topo, workload_with_skew(wl, 1.0)), plan) == predict(CostModel(topo, wl), plan)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "1"])
def test_bad_skew_scale_is_refused(bad):
    _, wl = _pair()
    with pytest.raises(SpecError):
        workload_with_skew(wl, bad)


def test_skew_rule_per_model():
    _, wl = _pair()
    base = wl.access_models
    for scale in (0.8, 1.2):
        w = workload_with_skew(wl, scale)
        assert w.sha256 == wl.sha256 and w.name == wl.name
        models = w.access_models
        for t in wl.tables:
            kind = t.access.kind
            f = np.array([0.001, 0.01, 0.1, 0.5])
            c0, c1 = base[t.name].coverage(f), models[t.name].coverage(f)
            if kind == "uniform":
                assert np.allclose(c0, c1)
            elif kind == "zipf":
                assert w.tables[wl.table_index[t.name]].access.alpha == pytest.approx(t.access.alpha * scale)
            if kind != "uniform":  # flatter: no hot share grows; steeper: none shrinks
                assert np.all(c1 <= c0 + 1e-9) if scale < 1 else np.all(c1 >= c0 - 1e-9)
            assert models[t.name].coverage(0.0) == 0.0 and models[t.name].coverage(1.0) == pytest.approx(1.0)


def test_scaled_coverage_formulas():
    x = np.array([0.0, 0.1, 0.5, 1.0])
    c = np.array([0.0, 0.5, 0.9, 1.0])
    assert np.allclose(scaled_coverage(c, x, 0.5), 0.5 * c + 0.5 * x)
    assert np.allclose(scaled_coverage(c, x, 2.0), c ** 0.5)
    assert np.allclose(scaled_coverage(c, x, 1.0), c)


def test_steeper_zipf_makes_a_hot_split_plan_faster():
    topo, wl = _pair(MLPERF)
    plan = _hot_split_plan(topo, wl, 0.01)
    step = {s: predict(CostModel(topo, workload_with_skew(wl, s)), plan, check_memory=False)["step_time_s"]
            for s in (0.8, 1.0, 1.2)}
    assert step[1.2] < step[1.0] < step[0.8]
    # a plan with every row in HBM does not depend on the skew of its lookups' HBM share
    full = _hot_split_plan(*_pair(TINY), 1.0)
    topo_t, wl_t = _pair(TINY)
    a = predict(CostModel(topo_t, wl_t), full)["step_time_s"]
    b = predict(CostModel(topo_t, workload_with_skew(wl_t, 1.2)), full)["step_time_s"]
    assert b == pytest.approx(a, rel=0.05)


def test_solve_writes_robustness_block_and_simulate_skew_agrees(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["solve", HW, TINY, "-q", "-o", str(out), "--time-limit", "10"]) == 0
    printed = capsys.readouterr().out
    assert "skew what-if" in printed
    data = json.loads(out.read_text())
    times = data["robustness"]["step_time_s"]
    assert set(times) == {"0.8", "1", "1.2"}
    assert times["1"] == pytest.approx(data["predicted"]["step_time_s"])
    for s in ("0.8", "1.2"):
        assert main(["simulate", HW, TINY, str(out), "--skew", s, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)["predicted"]["step_time_s"]
        assert got == pytest.approx(times[s])
    assert main(["simulate", HW, TINY, str(out), "--skew", "0", "--json"]) == 2


# ---- tie-break (planner/tiebreak.py) ----

SPARE_HW = """
schema_version: 1
name: one-gpu-spare
templates:
  box:
    gpus:
      model: test GPU
      count: 1
      hbm_GiB: 2
      hbm_bw_GBps: 1000
      hbm_gather_efficiency: 0.5
      hbm_reserve_GiB: 0.25
      peak_TFLOPs: {fp32: 1}
      compute_efficiency: 0.5
      kernel_launch_us: 2
      host_read_efficiency: 0.5
    host:
      dram_GiB: 8
      dram_bw_GBps: 100
      dram_reserve_GiB: 1
      cpu_cores: 8
      cpu_gather_GBps: 10
    links:
      - {kind: pcie, between: [gpu*, host], bw_GBps: 20, latency_us: 2}
nodes:
  - {template: box, count: 1}
"""

SPARE_WL = """
schema_version: 1
name: dense-bound
batch_size: 64
optimizer: {name: sgd, lr: 0.1}
tables:
  - {name: big, rows: 8000000, dim: 64, access: {kind: zipf, alpha: 1.1}}
  - {name: small, rows: 1000, dim: 16, access: {kind: uniform}}
dense:
  bottom_mlp: [13, 4096, 4096, 64]
  top_mlp: [4096, 4096, 1]
  interaction: {kind: dot}
"""


def _spare_pair(tmp_path):
    hw, wl = tmp_path / "hw.yaml", tmp_path / "wl.yaml"
    hw.write_text(SPARE_HW)
    wl.write_text(SPARE_WL)
    return str(hw), str(wl)


def _check_tie_break(plan, gap):
    tb = plan.solver.tie_break
    assert tb is not None
    assert tb["after"] <= tb["before"] + 1e-9
    step = plan.predicted["step_time_s"]
    assert step == pytest.approx(tb["step_time_after_s"], rel=1e-6)
    assert step <= tb["step_time_cap_s"] * (1 + 1e-9)
    # never worse than the gap allows: within gap of the lower bound, or no slower than the first plan
    lb = plan.solver.lower_bound_step_time_s
    assert step <= max(lb * (1 + gap), tb["step_time_before_s"]) * (1 + 1e-9)
    return tb


@pytest.mark.parametrize("wl_path", [TINY, MLPERF])
def test_tie_break_never_worsens_step_beyond_gap(wl_path):
    from placer.planner.solve import SolveConfig, solve

    topo, wl = _pair(wl_path)
    plan = solve(topo, wl, SolveConfig(time_limit_s=20))
    _check_tie_break(plan, 0.005)


def test_tie_break_fills_idle_hbm(tmp_path):
    """Dense-bound: where the big table's cold rows live hardly moves the step (UVM 26.752 ms, 50% hot
    26.782 ms), so the step-time ILP leaves it on UVM with HBM empty; within a 5% gap the tie-break takes the
    plan with the most of it in HBM that fits (50%: 100% does not fit)."""
    from placer.cost import PHASES
    from placer.options import OptionConfig, all_options
    from placer.planner import ilp
    from placer.planner.problem import build_problem
    from placer.planner.tiebreak import slow_lookups, tie_break

    topo, wl = _pair(*reversed(_spare_pair(tmp_path)))
    model = CostModel(topo, wl)
    options = all_options(topo, wl, OptionConfig(hot_levels=(1.0, 0.5, 0.1, 0.01, 0.0), fp16=False))
    names = [t.name for t in wl.tables]
    problem = build_problem([[model.placement_cost(p) for p in options[n]] for n in names], model.base_cost,
                            sum(model.fixed_latency_s.values()), model.usable_memory, len(PHASES))
    first = ilp.solve(problem, time_limit_s=20, gap=0.0)
    assert first.status == "optimal"
    placed = [options[n][oid - problem.groups[i][0]] for i, (n, oid) in enumerate(zip(names, first.chosen))]
    assert placed[0].hot_fraction == 0.0  # UVM: the fastest
    chosen, tb = tie_break(model, problem, [options[n] for n in names], first.chosen, first.lower_bound_s, 0.05)
    after = [options[n][oid - problem.groups[i][0]] for i, (n, oid) in enumerate(zip(names, chosen))]
    assert after[0].hot_fraction == pytest.approx(0.5)
    assert after[1].hot_fraction == 1.0
    assert tb["after"] < tb["before"]
    assert tb["after"] == pytest.approx(sum(slow_lookups(model, p) for p in after))
    assert problem.objective(chosen) <= first.lower_bound_s * 1.05 * (1 + 1e-9)
    assert problem.fits(chosen)
    # with the first plan's step as the ceiling nothing slower may be taken
    same, tb2 = tie_break(model, problem, [options[n] for n in names], first.chosen, first.lower_bound_s, 0.05,
                          ceiling_s=problem.objective(first.chosen))
    assert problem.objective(same) <= problem.objective(first.chosen) * (1 + 1e-9)


def test_solve_records_tie_break_on_a_dense_bound_case(tmp_path):
    from placer.planner.solve import SolveConfig, solve

    topo, wl = _pair(*reversed(_spare_pair(tmp_path)))
    plan = solve(topo, wl, SolveConfig(time_limit_s=20, gap=0.05))
    tb = _check_tie_break(plan, 0.05)
    assert tb["after"] <= tb["before"]


def test_mlperf_tie_break_fills_spare_hbm():
    """mlperf-dlrm-v1@h100-pcie-host: the step-time optimum leaves big tables partly cold with GiB of HBM
    free; fill levels plus the tie-break serve fewer lookups from host DRAM at no worse step time."""
    from placer.planner.solve import SolveConfig, solve

    topo, wl = _pair(MLPERF)
    plan = solve(topo, wl, SolveConfig(time_limit_s=20))
    tb = _check_tie_break(plan, 0.005)
    assert tb["fill_levels_added"] > 0
    assert tb["after"] < tb["before"]  # 709 -> 663 M lookups at no slower a step (issue 47's dense memory)
    gpu = plan.predicted["devices"][topo.gpus[0]]
    assert gpu["hbm_capacity_bytes"] - gpu["hbm_used_bytes"] < 6 * 2**30


# ---- two-stage path: local tie-break (planner/tiebreak_local.py) ----------------------------------------------

WORKSTATION = str(ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml")


def test_local_tie_break_cap_is_the_single_stage_one():
    from placer.planner.tiebreak_local import step_cap

    assert step_cap(1.0, 0.9, 0.05, None) == 1.0  # far from the bound: never slower than the first plan
    assert step_cap(1.0, 0.99, 0.05, None) == pytest.approx(0.99 * 1.05)
    assert step_cap(1.0, 0.99, 0.05, 1.01) == pytest.approx(1.01)  # no slower than the best baseline
    assert step_cap(1.0, 0.99, 0.05, 0.98) == 1.0  # ... unless the first plan already is


def _two_stage_with_host_table(monkeypatch, table: str):
    """Force the two-stage path on tiny@pcie-4gpu-workstation, with ``table`` put on the host by stage two and
    no baseline to choose instead: a host table whose rows idle HBM would hold."""
    from placer.planner import single_stage, two_stage_solve
    from placer.planner import solve as S

    real = two_stage_solve.solve_two_stage

    def with_host(model, *args, **kwargs):
        stages = real(model, *args, **kwargs)
        t = model.wl.tables[model.wl.table_index[table]]
        host = Placement(table=table, sharding="host", shards=[
            Shard(device=model.topo.hosts[0], rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)])
        return dataclasses.replace(stages, placements=[host if p.table == table else p for p in stages.placements])

    monkeypatch.setattr(single_stage, "FULL_ILP_MAX_PAIRS", 0)
    monkeypatch.setattr(two_stage_solve, "solve_two_stage", with_host)
    monkeypatch.setattr(two_stage_solve, "priced_baselines", lambda model, seed: iter(()))  # no baseline beats it
    topo, wl = _pair(TINY, WORKSTATION)
    return S.solve(topo, wl, S.SolveConfig(time_limit_s=10)), topo, wl


def test_two_stage_tie_break_moves_a_host_table_into_idle_hbm(monkeypatch):
    from placer.planner.tiebreak import slow_lookups

    plan, topo, wl = _two_stage_with_host_table(monkeypatch, "t_users")
    assert "two-stage" in plan.solver.backend
    tb = plan.solver.tie_break
    assert tb is not None and tb["method"].startswith("local search")
    for key in ("objective", "before", "after", "result", "wall_s", "step_time_cap_s"):
        assert key in tb
    moved = next(p for p in plan.placements if p.table == "t_users")
    assert moved.sharding == "table_wise" and moved.hot_fraction == 1.0  # host -> all rows in HBM
    assert "t_users" in [m["table"] for m in tb["moves"]]  # stage 2's kind changes may leave others to move too
    assert tb["before"] > 0 and tb["after"] < tb["before"]
    model = CostModel(topo, wl)
    assert tb["after"] == pytest.approx(sum(slow_lookups(model, p) for p in plan.placements))
    # never worse than the cap; the plan's step is the re-priced one
    step = plan.predicted["step_time_s"]
    assert step == pytest.approx(tb["step_time_after_s"], rel=1e-9)
    assert step <= tb["step_time_cap_s"] * (1 + 1e-9)
    assert step <= max(tb["step_time_before_s"] * (1 + plan.solver.gap_tolerance),
                       tb["step_time_before_s"]) * (1 + 1e-9)
    assert plan.solver.objective_step_time_s == pytest.approx(step, rel=1e-9)


def test_two_stage_tie_break_keeps_a_host_table_that_is_faster_there(monkeypatch):
    """t_geo (300 uniform rows) is faster looked up on the host than table-wise on any GPU (0.540 vs 0.596 ms
    step, on stage 2's plan before kind changes): at a cap of the first plan's step the local search leaves it
    there, and says so, unless the first plan has room for it on a GPU within the cap."""
    plan, _, _ = _two_stage_with_host_table(monkeypatch, "t_geo")
    tb = plan.solver.tie_break
    assert tb["options_priced"] > 0
    # stage 2's kind changes (rekind.py) can leave a first plan where t_geo fits a GPU within the cap; either way
    # the step never exceeds the first plan's
    if next(p for p in plan.placements if p.table == "t_geo").sharding == "host":
        assert tb["moves"] == [] and tb["after"] == tb["before"] > 0 and "first plan kept" in tb["result"]
    assert plan.predicted["step_time_s"] <= tb["step_time_before_s"] * (1 + 1e-9)


def test_local_tie_break_keeps_the_cap_and_is_deterministic():
    """Priced directly on an all-host plan: with the cap at the first plan's step no move may slow the plan, the
    result fits memory and is the exact re-priced plan, and the same inputs give the same moves."""
    from placer.options import OptionConfig
    from placer.planner.tiebreak_local import local_tie_break
    from placer.simulate import memory_overflows, total_cost

    topo, wl = _pair(TINY, WORKSTATION)
    model = CostModel(topo, wl)
    host = topo.hosts[0]
    placements = [Placement(table=t.name, sharding="host", shards=[
        Shard(device=host, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)]) for t in wl.tables]
    plan = Plan(hardware=SpecRef(name=topo.spec.name), workload=SpecRef(name=wl.name), method="hand",
                placements=placements)
    step0 = predict(model, plan)["step_time_s"]
    out, tb = local_tie_break(model, placements, step0, OptionConfig(), time_limit_s=10)
    assert tb["after"] < tb["before"]
    new = plan.model_copy(update={"placements": out})
    cost = total_cost(model, new)
    assert not memory_overflows(model, cost)
    assert predict(model, new)["step_time_s"] == pytest.approx(tb["step_time_after_s"], rel=1e-9)
    assert tb["step_time_after_s"] <= step0 * (1 + 1e-9)
    # same inputs, same answer (deterministic order)
    out2, tb2 = local_tie_break(model, placements, step0, OptionConfig(), time_limit_s=10)
    assert [p.label() for p in out2] == [p.label() for p in out] and tb2["moves"] == tb["moves"]
