"""The runner's fused groups: the grouped executor trains exactly like the per-shard runner it replaced
(losses recorded at ab4ea90 in tests/data), and builds the groups the step program lists."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from placer.plan import Plan
from placer.program.build import ProgramBuilder
from placer.runner import Trainer
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parent.parent
REFERENCE = json.loads((ROOT / "tests" / "data" / "reference-losses-ab4ea90.json").read_text())
HW4 = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: f"{c['optimizer']}-{len(c['plan']['placements'])}-"
                         f"{'mixed' if any(p['sharding'] == 'row_wise' for p in c['plan']['placements']) else 'one'}")
def test_same_losses_as_the_per_shard_runner(case, tmp_path):
    """Row-wise shards with hot/cold splits, column-wise pieces, data-parallel replicas, host tables, fp16, a
    table with two features: every kind at once, per optimizer, 12 steps, rtol 1e-4 (as measured at ab4ea90)."""
    path = tmp_path / "wl.yaml"
    path.write_text(case["workload"])
    wl = load_workload(path)
    plan = Plan.model_validate(case["plan"])
    tr = Trainer(plan, wl, torch.device("cpu"), Topology(load_hardware(HW4)), seed=case["seed"],
                 pool_batches=case["pool_batches"])
    try:
        tr.train(case["steps"])
        got = tr.loss_history()
    finally:
        tr.close()
    np.testing.assert_allclose(got, case["losses"], rtol=1e-4, atol=1e-7)
    assert case["losses"][-1] < case["losses"][0]


def test_groups_are_the_programs(tmp_path):
    """One fused group per (device, location, dtype, width) the program lists, members in plan order; a split
    shard is a member of its device's hbm group and of its uvm group."""
    case = next(c for c in REFERENCE["cases"] if c["optimizer"] == "sgd" and
                any(p["sharding"] == "row_wise" for p in c["plan"]["placements"]))
    path = tmp_path / "wl.yaml"
    path.write_text(case["workload"])
    wl = load_workload(path)
    plan = Plan.model_validate(case["plan"])
    topo = Topology(load_hardware(HW4))
    tr = Trainer(plan, wl, torch.device("cpu"), topo, seed=1, pool_batches=1)
    try:
        builder = ProgramBuilder(topo, wl)
        want = {}
        for p in plan.placements:
            for key, m in builder.members(p):
                want.setdefault(key, []).append((m.table, m.shard, m.part))
        assert {k: [(s.member.table, s.member.shard, s.member.part) for s in g.slots]
                for k, g in tr.groups.items()} == want
        users = {k: g for k, g in tr.groups.items() if any(s.member.table == "t_users" for s in g.slots)}
        parts = sorted((k.location, s.member.part) for k, g in users.items() for s in g.slots
                       if s.member.table == "t_users" and s.member.shard == 1)
        assert parts == [("hbm", "hot"), ("uvm", "cold")]
        # the logical table reassembled from its members equals the initial rows wherever they live
        w = tr.table_weights("t_users")
        assert w.shape == (20000, 32) and torch.isfinite(w).all() and float(w.abs().max()) <= 1 / np.sqrt(20000)
    finally:
        tr.close()


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: f"{c['optimizer']}-{len(c['plan']['placements'])}")
def test_graph_safe_groups_train_the_same(case, tmp_path):
    """With ``graph_safe`` the hbm and uvm groups run the static-shape backward (runner/graph_groups.py): the same
    losses as the per-shard runner's, and every such group's backward keeps the graph contract (graph_guard)."""
    from placer.runner.graph_groups import GraphSafeGroup, graph_safe
    from placer.runner.graph_guard import GraphSafe

    path = tmp_path / "wl.yaml"
    path.write_text(case["workload"])
    wl = load_workload(path)
    plan = Plan.model_validate(case["plan"])
    tr = Trainer(plan, wl, torch.device("cpu"), Topology(load_hardware(HW4)), seed=case["seed"],
                 pool_batches=case["pool_batches"], graph_safe=True)
    try:
        safe = [g for k, g in tr.groups.items() if graph_safe(k)]
        assert safe and all(isinstance(g, GraphSafeGroup) for g in safe)
        assert not any(isinstance(g, GraphSafeGroup) for k, g in tr.groups.items() if not graph_safe(k))
        tr.train(case["steps"])
        got = tr.loss_history()
        batch = tr.pool[0]
        with GraphSafe():
            for g in safe:
                runs = g.sort(batch.groups[g.key])
                g.update(runs, g.segment_reduce(runs))
    finally:
        tr.close()
    np.testing.assert_allclose(got, case["losses"], rtol=1e-4, atol=1e-7)
