"""Node-local tables on the planner's menu (issue 39, items 2-3): a replica per node (Placement.replicated
'per_node'), offered only where the workload allows it and the machine has several nodes, priced with its
all-to-all inside each node (program/node_local_ops.py), checked (plan_check.check_plan), folded by the two-stage
planner, refused by placer run and export --torchrec."""
from __future__ import annotations

import json

import pytest
import yaml

from placer.cli import main
from placer.cost import CostModel
from placer.errors import SpecError
from placer.node_local import per_node
from placer.options import OptionConfig, table_options
from placer.plan import Placement, Shard, plan_from_json
from placer.plan_check import check_plan
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.symmetry import Symmetry
from placer.planner.types import Family
from placer.program.build import plan_ops
from placer.program.node_local_ops import network_bytes
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

TWO = "hardware_specs/dgx-h100-2node.yaml"
ONE = "hardware_specs/dgx-h100.yaml"


def tiny(tmp_path, local=("t_users",), batch=None):
    """The tiny workload with node_local on ``local``, written to a file; its path."""
    doc = yaml.safe_load(open("workloads/tiny.yaml"))
    for t in doc["tables"]:
        if t["name"] in local:
            t["node_local"] = True
    if batch:
        doc["batch_size"] = batch
    path = tmp_path / "tiny-nl.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def table(wl, name):
    return next(t for t in wl.tables if t.name == name)


def test_offered_only_where_allowed_and_on_several_nodes(tmp_path):
    wl = load_workload(tiny(tmp_path))
    two, one = Topology(load_hardware(TWO)), Topology(load_hardware(ONE))
    opts = table_options(table(wl, "t_users"), two, wl)
    local = [p for p in opts if p.node_local]
    tw = [p for p in local if p.sharding == "table_wise"]
    assert len(tw) == 8 * len(OptionConfig().hot_levels)  # each local GPU x each hot-row level
    assert any(p.sharding == "row_wise" and len(p.shards) == 16 for p in local)
    for p in local:  # every node's replica, node by node, laid out alike
        assert [s.device.split("/")[0] for s in p.shards] == ["node0"] * (len(p.shards) // 2) + ["node1"] * (
            len(p.shards) // 2)
    assert not [p for p in table_options(table(wl, "t_items"), two, wl) if p.node_local]
    assert not [p for p in table_options(table(wl, "t_users"), one, wl) if p.node_local]


def test_priced_inside_the_node(tmp_path):
    """A node-local table-wise replica: no byte of its exchange crosses the network, each replica pools half the
    batch (half the lookups of the shared copy), and every node's GPU holds a full copy."""
    wl = load_workload(tiny(tmp_path))
    topo = Topology(load_hardware(TWO))
    model = CostModel(topo, wl)
    t = table(wl, "t_users")
    shared = Placement(table=t.name, sharding="table_wise", shards=[
        Shard(device="node0/gpu0", rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows, host_rows=0)])
    local = per_node(shared, topo.nodes)
    net = lambda p: network_bytes(model.builder.placement_ops(p), topo).get(t.name, 0.0)
    per_gpu = model.builder.exchange_bytes_per_gpu(t.name, t.dim)
    assert net(shared) == pytest.approx(2 * 8 * per_gpu)  # to node1's 8 GPUs and back
    assert net(local) == 0.0
    lookups = lambda p: [m.lookups for _, m in model.builder.members(p)]
    assert lookups(local) == pytest.approx([lookups(shared)[0] / 2] * 2)
    mem_shared, mem_local = model.placement_cost(shared).memory, model.placement_cost(local).memory
    assert set(mem_local) == {"node0/gpu0", "node1/gpu0"}
    assert mem_local["node1/gpu0"] >= t.rows * t.dim * 4 and mem_local["node0/gpu0"] <= mem_shared["node0/gpu0"]


def test_check_refuses_what_the_workload_does_not_allow_and_uneven_replicas(tmp_path):
    wl = load_workload(tiny(tmp_path))
    topo = Topology(load_hardware(TWO))
    plan = json.loads(_plan_json(tmp_path))
    check_plan(plan_from_json(json.dumps(plan)), topo, wl, check_hashes=False)
    users = next(i for i, p in enumerate(plan["placements"]) if p["table"] == "t_users")
    bad = json.loads(json.dumps(plan))
    bad["placements"][users]["shards"][1]["device"] = "node1/gpu3"  # node1's replica elsewhere than node0's
    with pytest.raises(SpecError, match="laid out unlike") as e:
        check_plan(plan_from_json(json.dumps(bad)), topo, wl, check_hashes=False, file="p.json")
    assert e.value.field == f"placements[{users}].shards"
    items = next(i for i, p in enumerate(plan["placements"]) if p["table"] == "t_items")
    bad = json.loads(json.dumps(plan))
    p = bad["placements"][items]
    p["sharding"], p["replicated"] = "table_wise", "per_node"
    p["shards"] = [{"device": f"node{n}/gpu0", "rows": [0, 5000], "cols": [0, 16], "hbm_rows": 5000, "host_rows": 0}
                   for n in (0, 1)]
    with pytest.raises(SpecError, match="does not allow it") as e:
        check_plan(plan_from_json(json.dumps(bad)), topo, wl, check_hashes=False, file="p.json")
    assert e.value.field == f"placements[{items}].replicated"
    one = json.loads(json.dumps(plan))
    one["placements"][users]["shards"] = one["placements"][users]["shards"][:1]  # node0's replica alone
    with pytest.raises(SpecError, match="one node"):
        check_plan(plan_from_json(json.dumps(one)), Topology(load_hardware(ONE)), wl, check_hashes=False)


def _plan_json(tmp_path) -> str:
    """A plan of tiny on 2 nodes: t_users node-local table-wise on every node's gpu0, the rest on node0/gpu1."""
    wl = load_workload(tiny(tmp_path))
    placements = []
    for t in wl.tables:
        devices = ["node0/gpu0", "node1/gpu0"] if t.name == "t_users" else ["node0/gpu1"]
        placements.append({"table": t.name, "sharding": "table_wise", "shards": [
            {"device": d, "rows": [0, t.rows], "cols": [0, t.dim], "hbm_rows": t.rows, "host_rows": 0}
            for d in devices], **({"replicated": "per_node"} if t.name == "t_users" else {})})
    return json.dumps({"hardware": {"name": "dgx-h100-2node"}, "workload": {"name": "tiny"}, "method": "manual",
                       "placements": placements})


def test_plans_without_it_load_and_write_as_before():
    p = Placement(table="t", sharding="table_wise", shards=[
        Shard(device="node0/gpu0", rows=(0, 4), cols=(0, 4), hbm_rows=4, host_rows=0)])
    assert not p.node_local and "replicated" not in p.model_dump_json(exclude_none=True)


def test_run_and_export_refuse_node_local_plans(tmp_path, capsys):
    wl_path = tiny(tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(_plan_json(tmp_path))
    assert main(["run", TWO, wl_path, str(plan), "--steps", "1"]) == 2
    assert "node-local" in capsys.readouterr().err
    assert main(["export", "--torchrec", TWO, wl_path, str(plan), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "placements[0].replicated" in err and "TorchRec" in err


def test_two_stage_kinds_fold_node_local_options(tmp_path):
    """The two-stage planner's kinds: a node-local table gets LOCAL kinds (a replica on both nodes, no network
    load in its exchange), a table that does not allow it none."""
    wl = load_workload(tiny(tmp_path))
    topo = Topology(load_hardware(TWO))
    model = CostModel(topo, wl)
    ctx = Context.of(model, Symmetry.of(topo), OptionConfig())
    kinds = KindFolder(ctx).kinds(processes=1)
    users = [i for i, t in enumerate(wl.tables) if t.name == "t_users"][0]
    local = [k for k in kinds[users] if k.family == Family.LOCAL]
    assert local and all(k.placement.node_local for k in local)
    assert not any(r.endswith("->fabric") or "fabric->" in r for k in local for (_, r) in k.totals)
    assert all(k.family != Family.LOCAL for i, ks in enumerate(kinds) if i != users for k in ks)


def test_solve_on_two_nodes_makes_the_allowed_table_node_local_and_saves_network_bytes(tmp_path):
    """The two-stage planner on 2 nodes: the plan is valid, places the allowed table node-local where that
    lowers the step, and sends fewer bytes between nodes than the plan of the same workload without it."""
    from placer.planner.solve import SolveConfig, solve

    wl = load_workload(tiny(tmp_path, local=("t_users", "t_items", "t_ads")))
    plain = wl.model_copy(update={"tables": [t.model_copy(update={"node_local": False}) for t in wl.tables]})
    topo = Topology(load_hardware(TWO))
    got = {}
    for name, w in (("local", wl), ("plain", plain)):
        plan = solve(topo, w, SolveConfig(work_limit=2000))
        check_plan(plan, topo, w, check_hashes=False)
        model = CostModel(topo, w)
        got[name] = (plan, sum(network_bytes(plan_ops(model.builder, plan.placements), topo).values()))
    assert any(p.node_local for p in got["local"][0].placements)
    assert not any(p.node_local for p in got["plain"][0].placements)
    assert got["local"][1] < got["plain"][1]
    assert got["local"][0].predicted["step_time_s"] <= got["plain"][0].predicted["step_time_s"] * 1.001
