"""Caches owned by their owners (issue 38 item 4): a Cost keeps its indexed form in its own declared field (dropped by
``+=``), a Topology its Traffic and routes in its own attributes, a Workload copy derives its own access models; the
local tie-break prices through the Accumulator (exactly as predict() does) and explain.py is not part of it."""
from __future__ import annotations

import dataclasses

import pytest

from placer.cost import Cost, CostModel
from placer.plan import Placement, Plan, Shard, SpecRef
from placer.planner import tiebreak_local
from placer.planner.accumulator import Accumulator, load_index
from placer.planner.baselines import run_baseline
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def model() -> CostModel:
    workload = load_workload(ROOT / "workloads" / "tiny.yaml")
    return CostModel(Topology(load_hardware(ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml")), workload)


def _host_plan(model: CostModel) -> list[Placement]:
    host = model.topo.hosts[0]
    return [Placement(table=t.name, sharding="host", shards=[
        Shard(device=host, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)]) for t in model.wl.tables]


def test_a_cost_keeps_its_indexed_form_in_its_own_field(model):
    index = load_index(model)
    cost = model.placement_cost(_host_plan(model)[0])
    arrays = cost.indexed(index)
    assert cost.indexed(index) is arrays  # kept
    assert set(vars(cost)) == {f.name for f in dataclasses.fields(Cost)}  # nothing but its declared fields
    assert cost == dataclasses.replace(cost, indexed_as=None)  # not compared
    cost += model.placement_cost(_host_plan(model)[1])
    assert cost.indexed_as is None  # += changed the loads: the arrays are gone
    again = cost.indexed(index)
    assert len(again[0]) == len(cost.loads)


def test_a_topology_owns_its_traffic_and_routes(model):
    topo = Topology(model.topo.spec)
    before = set(vars(topo))
    first, second = CostModel(topo, model.wl), CostModel(topo, model.wl)
    assert first.traffic is second.traffic is topo.traffic  # one Traffic per machine, shared by its models
    predict(first, Plan(hardware=SpecRef(name="x"), workload=SpecRef(name="y"), method="hand",
                        placements=_host_plan(first)), check_memory=False)
    assert set(vars(topo)) - before == {"traffic"}  # its own cached property; nothing written by other modules


def test_a_workload_copy_derives_its_own_access_models(model):
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    rows = {name: m.rows for name, m in wl.access_models.items()}
    scaled = wl.with_scaled_rows(4)
    assert "access_models" not in vars(scaled)
    assert {name: m.rows for name, m in scaled.access_models.items()} == {t.name: t.rows for t in scaled.tables}
    assert any(scaled.access_models[n].rows != r for n, r in rows.items())


def test_tie_break_prices_through_the_accumulator_as_predict_does(model):
    assert not hasattr(tiebreak_local, "Explainer")  # explain.py is a consumer, not the planner's pricer
    placements = run_baseline("uvm", model)
    plan = Plan(hardware=SpecRef(name="x"), workload=SpecRef(name="y"), method="uvm", placements=placements)
    pricer = tiebreak_local._Pricer(model, placements)
    assert isinstance(pricer.acc, Accumulator)
    assert pricer.step == predict(model, plan, check_memory=False)["step_time_s"]  # bit for bit
    # a swap priced, then kept: the step of the new plan priced from scratch
    p = placements[0]
    q = next(o for o in tiebreak_local.candidates(model, p, tiebreak_local.OptionConfig(), {g: 1e12 for g in
                                                                                           model.topo.gpus}))
    step, _ = pricer.swap(p.table, model.placement_cost(q))
    pricer.keep(p.table, model.placement_cost(q))
    moved = plan.model_copy(update={"placements": [q, *placements[1:]]})
    assert step == pricer.step == pytest.approx(predict(model, moved, check_memory=False)["step_time_s"], rel=1e-12)


def test_an_accumulator_built_holding_costs_is_one_that_added_them(model):
    costs = [model.placement_cost(p) for p in run_baseline("greedy_size", model)]
    held, added = Accumulator(model, costs), Accumulator(model)
    for cost in costs:
        added.add(cost)
    assert held.step == pytest.approx(added.step, rel=1e-12)
    assert list(held.memory_array) == pytest.approx(list(added.memory_array), rel=1e-12)
    for cost in costs:
        assert all(held.users(g) == added.users(g) for g in cost.once)
