"""TorchRec's own estimate of any plan (placer/torchrec_io/estimate.py, issue 51 item 5): its perf model rates the
plan placer exports shard by shard on the ranks the document names, and TorchRec's planner can be told only its
default Topology. The tests run TorchRec: they skip without it locally and fail instead under CI."""
from __future__ import annotations

import pytest

from placer.cost import CostModel
from placer.forms import data_parallel, row_wise
from placer.plan import Placement, Shard
from placer.planner.solve import SolveConfig, solve
from placer.planner.solve_run import make_plan
from placer.torchrec_io import planner as trec_planner
from placer.torchrec_io.exporter import export_document
from tests.conftest import require_torchrec, shipped_pair

HW, WL = "dgx-h100", "tiny"


def _setup():
    topo, wl = shipped_pair(HW, WL)
    model = CostModel(topo, wl)
    return topo, wl, model, trec_planner.planner_inputs(model)


def _estimate(plan, topo, wl, inputs, topology=None):
    from placer.torchrec_io.estimate import torchrec_estimate

    return torchrec_estimate(export_document(plan, topo, wl, price_each=False), inputs, topology)


def test_one_rank_plan_is_rated_on_that_rank_and_worse_than_a_spread_one():
    require_torchrec()
    topo, wl, model, inputs = _setup()
    g = topo.gpus[0]
    one = make_plan(model, "one", [Placement(table=t.name, sharding="table_wise", precision=t.dtype, shards=[
        Shard(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows, host_rows=0)]) for t in wl.tables], None)
    spread = solve(topo, wl, SolveConfig(method="round_robin"))
    a, b = _estimate(one, topo, wl, inputs), _estimate(spread, topo, wl, inputs)
    assert len(a.per_rank_ms) == len(topo.gpus)
    assert a.per_rank_ms[0] > 0 and all(x == 0 for x in a.per_rank_ms[1:])
    assert a.rating_ms == pytest.approx(a.per_rank_ms[0])
    assert sum(x > 0 for x in b.per_rank_ms) > 1 and b.rating_ms < a.rating_ms
    assert a.critical_path_ms is None or a.critical_path_ms > 0
    assert a.parts_ms["fwd_compute"] > 0 and a.parts_ms["bwd_compute"] > 0
    # TorchRec's defaults are other numbers for the same shards
    d = _estimate(one, topo, wl, inputs, trec_planner.default_topology(inputs))
    assert d.rating_ms > 0 and d.rating_ms != pytest.approx(a.rating_ms)


def test_row_wise_and_data_parallel_tables_are_rated_on_every_rank():
    require_torchrec()
    topo, wl, model, inputs = _setup()
    gpus = list(topo.gpus)
    big, small = max(wl.tables, key=lambda t: t.rows), min(wl.tables, key=lambda t: t.rows)
    base = {p.table: p for p in solve(topo, wl, SolveConfig(method="round_robin")).placements}
    base[big.name] = row_wise.placement(big, gpus, big.dtype, 1.0)
    base[small.name] = data_parallel.placement(small, gpus, small.dtype)
    plan = make_plan(model, "mixed", [base[t.name] for t in wl.tables], None)
    e = _estimate(plan, topo, wl, inputs)
    assert all(x > 0 for x in e.per_rank_ms)
    assert e.parts_ms["bwd_comms"] > 0  # the row-wise reduce-scatter and the data-parallel all-reduce


def test_a_document_naming_other_tables_is_refused():
    require_torchrec()
    from placer.torchrec_io.estimate import torchrec_estimate

    topo, wl, model, inputs = _setup()
    doc = export_document(solve(topo, wl, SolveConfig(method="round_robin")), topo, wl, price_each=False)
    doc["tables"]["not_a_table"] = next(iter(doc["tables"].values()))
    with pytest.raises(ValueError, match="not_a_table"):
        torchrec_estimate(doc, inputs)


def test_planner_told_its_defaults_plans_every_table():
    require_torchrec()
    topo, wl, model, _ = _setup()
    got = trec_planner.collect(trec_planner.start(model, 10, topology="defaults"))
    assert {p.table for p in got.placements} == {t.name for t in wl.tables}
    assert "default Topology" in trec_planner.describe(got) and "default capacities" in trec_planner.describe(got)
    with pytest.raises(ValueError):
        trec_planner.start(model, 10, topology="mine")
