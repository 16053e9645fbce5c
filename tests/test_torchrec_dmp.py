"""Exported plans train what they say: every method's plan for a small workload, and hand-made plans of every
TorchRec sharding type, exported with ``--device cpu`` and trained under DistributedModelParallel on 2 and on 4
gloo ranks (placer/torchrec_io/dmp_check.py), the sharded forward and weights equal to an unsharded model's to
rounding; the same plans with every shard's rows shifted by one (the negative control) fail the check.

One spawned process group per world size runs all plans (torch and torchrec imported once per rank)."""
from __future__ import annotations

import functools
import json

import pytest

from tests.conftest import ROOT, require_torchrec

DATA = ROOT / "tests/data"
WORKLOAD = DATA / "torchrec-dmp-small.yaml"
METHODS = ("ilp", "host_cpu", "uvm", "greedy_size", "round_robin", "random", "fae", "torchrec")


@functools.lru_cache(maxsize=None)
def _pair(world: int):
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(WORKLOAD)
    return Topology(load_hardware(DATA / f"torchrec-dmp-cpu{world}.yaml"), wl.dense.dtype), wl


def _kind_plans(topo, wl) -> dict:
    """Hand-made plans with every sharding TorchRec has: row_wise over every rank (uneven: 20001 rows),
    table_row_wise on one node (where the spec has two), column_wise with 6-wide pieces (exported as 8 + 4),
    data_parallel, a hot/cold split and table_wise."""
    from placer.forms import data_parallel, row_wise
    from placer.plan import Placement, Plan, Shard, SpecRef

    t = {x.name: x for x in wl.tables}
    g = list(topo.gpus)
    node0 = topo.gpus_of_node(topo.nodes[0])
    last = topo.gpus_of_node(topo.nodes[-1])

    def tw(name, dev, hot=1.0):
        k = int(round(hot * t[name].rows))
        return Placement(table=name, sharding="table_wise", precision="fp32", shards=[
            Shard(device=dev, rows=(0, t[name].rows), cols=(0, t[name].dim), hbm_rows=k, host_rows=t[name].rows - k)])

    def cw(name, devs):
        w = t[name].dim // len(devs)
        return Placement(table=name, sharding="column_wise", precision="fp32", shards=[
            Shard(device=d, rows=(0, t[name].rows), cols=(i * w, (i + 1) * w), hbm_rows=t[name].rows, host_rows=0)
            for i, d in enumerate(devs)])

    placements = [row_wise.placement(t["big"], g, "fp32", 0.0),
                  row_wise.placement(t["wide"], last, "fp32", 0.5),
                  cw("odd", node0),
                  data_parallel.placement(t["small"], g, "fp32"),
                  tw("mid", g[-1], 0.5)]
    ref = dict(hardware=SpecRef(name=topo.spec.name), workload=SpecRef(name=wl.name))
    return {"kinds": Plan(method="kinds", placements=placements, **ref)}


def _documents(world: int) -> dict:
    """name -> export document (device cpu) of every method's plan and the hand-made ones."""
    from placer.errors import InfeasibleError
    from placer.planner.solve import SolveConfig, solve
    from placer.torchrec_io.exporter import export_document

    topo, wl = _pair(world)
    plans = {}
    for m in METHODS:
        try:
            plans[m] = solve(topo, wl, SolveConfig(method=m, time_limit_s=2))
        except InfeasibleError:
            continue
    plans.update(_kind_plans(topo, wl))
    return {name: json.loads(json.dumps(export_document(p, topo, wl, price_each=False, device="cpu")))
            for name, p in plans.items()}


def _near_equal(doc: dict, table: str) -> dict:
    """``doc`` with ``table``'s row-wise shards at placer's near-equal split (what the export wrote before it
    followed TorchRec's routing)."""
    from placer.forms.row_wise import row_split

    doc = json.loads(json.dumps(doc))
    shards = doc["tables"][table]["parameter_sharding"]["sharding_spec"]["shards"]
    rows = sum(s["shard_sizes"][0] for s in shards)
    for s, (a, b) in zip(shards, row_split(rows, len(shards))):
        s["shard_offsets"][0], s["shard_sizes"][0] = a, b - a
    return doc


@pytest.mark.parametrize("world", [2, 4])
def test_exported_plans_train_under_dmp(world):
    """Every method's plan and the hand-made one train under DMP as the unsharded model does; the controls
    (rows shifted by one; on 4 ranks also the near-equal row split of 20001 rows) fail."""
    require_torchrec()
    from placer.torchrec_io.dmp_check import DEFAULT_TOL, run_check, tables_of

    topo, wl = _pair(world)
    docs = _documents(world)
    kinds = docs["kinds"]["tables"]
    types = {n: (e["parameter_sharding"]["sharding_type"], e["parameter_sharding"]["compute_kernel"])
             for n, e in kinds.items()}
    assert types == {"big": ("row_wise", "fused"),
                     "wide": ("table_row_wise" if world == 4 else "row_wise", "fused"),
                     "odd": ("column_wise", "fused"), "small": ("data_parallel", "dense"),
                     "mid": ("table_wise", "fused")}
    big = kinds["big"]["parameter_sharding"]["sharding_spec"]["shards"]
    block = -(-20001 // world)
    assert [s["shard_sizes"][0] for s in big] == [min(block, 20001 - i * block) for i in range(world)]
    assert all(s["placement"] == f"rank:{i}/cpu" for i, s in enumerate(big))
    assert [s["shard_sizes"][1] for s in kinds["odd"]["parameter_sharding"]["sharding_spec"]["shards"]] == [8, 4]
    assert "kinds" in docs and {"ilp", "torchrec", "uvm", "round_robin"} <= set(docs)

    controls = {"control: rows shifted by one": docs["kinds"]}
    shifts = {"control: rows shifted by one": 1}
    if world == 4:  # 20001 % 4 == 1: near-equal 5001, 5000, 5000, 5000 vs TorchRec's 5001, 5001, 5001, 4998
        controls["control: near-equal row split"] = _near_equal(docs["kinds"], "big")
    res = run_check({**docs, **controls}, tables_of(wl), world, shift_rows=shifts)
    bad = {n: r for n, r in res.items() if n in docs and not r["ok"]}
    assert not bad, bad
    for n in controls:
        assert not res[n]["ok"] and res[n]["max_error"] > 100 * DEFAULT_TOL, (n, res[n])
