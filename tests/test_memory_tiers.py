"""A third memory tier, described in a spec file and planned with no code of its own (issue: the layout, part 2).

tests/data/workstation-cxl.yaml gives a node a CXL memory expander beside its GPUs' HBM and its host's DRAM;
tests/data/tiers-workload.yaml is too big for HBM and host DRAM together. The planner keeps cold rows of some
tables in the tier, the cost model prices their reads across the links to it and its own bandwidth, the plan
checks and re-prices, and placer's runner and TorchRec refuse it by name."""
from __future__ import annotations

import json

import pytest
import yaml

from placer.cli import main
from placer.cost import CostModel
from placer.errors import SpecError
from placer.forms import table_wise
from placer.plan import Plan, SpecRef, load_plan
from placer.plan_check import check_plan
from placer.simulate import simulate
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT

HW = ROOT / "tests" / "data" / "workstation-cxl.yaml"
WL = ROOT / "tests" / "data" / "tiers-workload.yaml"


@pytest.fixture(scope="module")
def pair():
    wl = load_workload(WL)
    return Topology(load_hardware(HW), wl.dense.dtype), wl


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiers") / "plan.json"
    assert main(["solve", str(HW), str(WL), "--time-limit", "20", "-q", "-o", str(out)]) == 0
    return out


def _spec_without_tiers(tmp_path):
    doc = yaml.safe_load(HW.read_text())
    template = doc["templates"]["box"]
    template.pop("tiers")
    template["links"] = [link for link in template["links"] if "cxl0" not in link["between"]]
    path = tmp_path / "no-tier.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_tier_is_a_memory_a_resource_and_a_device(pair):
    topo, _ = pair
    assert topo.memories["node0/cxl0"].kind == "tier" and topo.memories["node0/cxl0"].usable_bytes == 256 * 2**30
    assert topo.resources["node0/cxl0:dram"].rate == 60e9
    assert topo.graph.nodes["node0/cxl0"]["kind"] == "memory" and topo.tiers_of("node0/gpu1") == ["node0/cxl0"]
    assert topo.route("node0/cxl0", "node0/gpu0") == ("node0/cxl0->node0/host", "node0/host->node0/gpu0")
    # a GPU reads the tier at its path's narrowest link x read_efficiency (at most the tier's own bandwidth)
    reads = topo.read_costs("node0/gpu0", "node0/cxl0").host_gather["fp32"](512)
    assert reads == pytest.approx(64e9 * 0.8 * 0.5)


def test_a_workload_too_big_for_hbm_and_dram_is_planned_into_the_tier(solved, pair, tmp_path, capsys):
    topo, wl = pair
    plan = load_plan(solved)
    tiered = [s for p in plan.placements for s in p.shards if s.cold_memory == "cxl0"]
    assert tiered and all(s.host_rows > 0 for s in tiered)
    devices = plan.predicted["devices"]
    assert devices["node0/cxl0"]["tier_used_bytes"] > 0
    for d, v in devices.items():  # every memory within its capacity
        for kind in ("hbm", "host", "tier"):
            if f"{kind}_used_bytes" in v:
                assert v[f"{kind}_used_bytes"] <= v[f"{kind}_capacity_bytes"], d
    assert simulate(plan, topo, wl)["step_time_s"] == pytest.approx(plan.predicted["step_time_s"], rel=1e-9)
    # the same machine without its tier cannot hold the tables: infeasible, exit 3
    assert main(["solve", str(_spec_without_tiers(tmp_path)), str(WL), "--time-limit", "10", "-q"]) == 3
    capsys.readouterr()


def test_tier_rows_load_the_tier_and_the_links_to_it(pair):
    topo, wl = pair
    model = CostModel(topo, wl)
    t = next(x for x in wl.tables if x.name == "big0")
    k = t.rows // 4
    in_host = model.placement_cost(table_wise.placement(t, "node0/gpu0", "fp32", k))
    in_tier = model.placement_cost(table_wise.placement(t, "node0/gpu0", "fp32", k, cold_memory="cxl0"))
    resources = {r for _, r in in_tier.loads}
    assert {"node0/cxl0:dram", "node0/cxl0->node0/host", "node0/host->node0/gpu0"} <= resources
    assert "node0/host:dram" not in {r for _, r in in_tier.loads}
    cold = (t.rows - k) * t.dim * 4
    assert in_tier.memory["node0/cxl0"] >= cold and "node0/cxl0" not in in_host.memory
    assert in_host.memory["node0/host"] >= cold > in_tier.memory.get("node0/host", 0.0)


def test_the_options_offer_the_tier_only_where_a_spec_has_one(pair, tmp_path):
    from placer.options import table_options

    topo, wl = pair
    t = wl.tables[0]
    tiers = [p for p in table_options(t, topo, wl) if any(s.cold_memory for s in p.shards)]
    assert tiers and {p.sharding for p in tiers} == {"table_wise"}
    plain = Topology(load_hardware(_spec_without_tiers(tmp_path)))
    assert not [p for p in table_options(t, plain, wl) if any(s.cold_memory for s in p.shards)]


def _plan(topo, wl, **shard) -> Plan:
    placements = [table_wise.placement(t, topo.gpus[i % 2], "fp32", t.rows // 10 if t.rows > 10**6 else t.rows)
                  for i, t in enumerate(wl.tables)]
    first = placements[0]
    placements[0] = first.model_copy(update={"shards": [first.shards[0].model_copy(update=shard)]})
    return Plan(method="test", placements=placements, hardware=SpecRef(name=topo.spec.name),
                workload=SpecRef(name=wl.name))


@pytest.mark.parametrize("shard, says", [
    ({"cold_memory": "cxl9"}, "unknown memory tier 'cxl9' of node0 (its tiers: cxl0)"),
    ({"cold_memory": "cxl0", "hbm_rows": 50_000_000, "host_rows": 0}, "every row in HBM"),
])
def test_check_names_a_tier_the_node_lacks_or_a_shard_without_cold_rows(pair, shard, says):
    topo, wl = pair
    with pytest.raises(SpecError) as err:
        check_plan(_plan(topo, wl, **shard), topo, wl)
    assert says in str(err.value) and err.value.field == "placements[0].shards[0].cold_memory"


def test_the_runner_and_torchrec_refuse_tier_rows_by_name(solved, tmp_path, capsys):
    capsys.readouterr()
    assert main(["run", str(HW), str(WL), str(solved), "--device", "cpu", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "memory tier 'cxl0'" in err and "placer's runner keeps cold rows in host memory only" in err
    assert main(["export", "--torchrec", str(HW), str(WL), str(solved), "-o", str(tmp_path / "tr")]) == 2
    assert "TorchRec's kernels read rows in HBM or host memory only" in capsys.readouterr().err
    assert main(["simulate", str(HW), str(WL), str(solved), "--trainer", "torchrec", "--json"]) == 2
    assert "memory tier" in capsys.readouterr().err


@pytest.mark.parametrize("edit, says", [
    (lambda t: t["tiers"].__setitem__(0, {**t["tiers"][0], "name": "host"}), "clashes with a GPU, host or NIC"),
    (lambda t: t.__setitem__("links", t["links"][:1]), "memory tier node0/cxl0 has no link path"),
    (lambda t: t["tiers"][0].__setitem__("reserve_GiB", 300), "the reserve must be below GiB"),
])
def test_a_bad_tier_is_refused_naming_it(tmp_path, capsys, edit, says):
    doc = yaml.safe_load(HW.read_text())
    edit(doc["templates"]["box"])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["solve", str(path), str(WL), "--time-limit", "5", "-q", "--json"]) == 2
    assert says in capsys.readouterr().err


def test_show_lists_the_tier(capsys):
    assert main(["show", str(HW)]) == 0
    out = capsys.readouterr().out
    assert "Memory tiers of template box" in out and "cxl0" in out and "GPU -> memory tier cxl0" in out


def test_the_json_plan_of_a_tierless_machine_has_no_cold_memory(tmp_path, capsys):
    hw, wl = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml", ROOT / "workloads" / "tiny.yaml"
    assert main(["solve", str(hw), str(wl), "--time-limit", "5", "--json"]) == 0
    assert "cold_memory" not in json.dumps(json.loads(capsys.readouterr().out))
