"""TorchRec plans in and out (issue 18 parts 1, 2, 6): plan -> export -> import gives the same placements and
the same step time, for every method's plan on shipped pairs, through the JSON and through TorchRec's own
ShardingPlan / ParameterSharding objects. The torchrec tests skip without torchrec locally; CI installs it
(README) and runs them."""
from __future__ import annotations

import functools
import importlib.util
import json

import pytest

from placer.cli import main
from placer.plan import Placement, Plan, load_plan
from placer.plan_price import priced_plan
from placer.forms.storage import FORCED_FORMS
from placer.planner.solve import METHODS, SolveConfig, solve
from placer.torchrec_io.exporter import builder_module, export_document, mapped_plan
from placer.torchrec_io.importer import plan_from_document
from tests.conftest import ROOT, require_torchrec, shipped_pair

PAIRS = [("h100-pcie-host", "tiny"), ("h100-pcie-host", "mlperf-dlrm-v1"), ("dgx-h100", "tiny"),
         ("dgx-h100", "mlperf-dlrm-v1"), ("dgx-h100-2node", "tiny"), ("dgx-h100-2node", "mlperf-dlrm-v1")]
#: every method but the forced forms (no table of these workloads allows one: tests/test_forms.py covers them)
METHODS = tuple(m for m in METHODS if m not in FORCED_FORMS)
CASES = [(hw, wl, m) for hw, wl in PAIRS for m in METHODS]


@functools.lru_cache(maxsize=None)
def _plan(hw: str, wl: str, method: str) -> Plan:
    topo, w = shipped_pair(hw, wl)
    return solve(topo, w, SolveConfig(method=method, time_limit_s=10))


def _step(plan: Plan, hw: str, wl: str) -> float:
    topo, w = shipped_pair(hw, wl)
    return priced_plan(plan, topo, w, check_hashes=False)["step_time_s"]


def _dump(placements) -> list[dict]:
    return [p.model_dump() for p in placements]


@pytest.mark.parametrize("hw,wl,method", CASES)
def test_json_round_trip(hw, wl, method):
    """export -> import: TorchRec's mapping of the plan, exactly; the plan itself where TorchRec expresses it."""
    topo, w = shipped_pair(hw, wl)
    plan = _plan(hw, wl, method)
    doc = json.loads(json.dumps(export_document(plan, topo, w, price_each=False)))
    back = plan_from_document(doc, topo, w, file="<export>")
    mapped, notes = mapped_plan(plan, topo, w)
    assert _dump(back.placements) == _dump(mapped.placements)
    assert _step(back, hw, wl) == doc["predicted"]["mapped_step_time_s"]
    assert doc["predicted"]["exact"] == (not any(p.sharding == "host" for p in plan.placements)
                                         and _dump(mapped.placements) == _dump(plan.placements))
    if doc["predicted"]["exact"]:
        assert _dump(back.placements) == _dump(plan.placements)
        assert _step(back, hw, wl) == _step(plan, hw, wl)
    for name, entry in doc["tables"].items():
        assert ("mapping_note" in entry) == (name in notes or entry.get("data_type") == "FP16")


def test_only_host_tables_are_inexact():
    """Every method's plan on the shipped pairs maps exactly but for host CPU lookups: hot/cold splits come
    back exactly through the cache load factor."""
    for hw, wl, method in CASES:
        topo, w = shipped_pair(hw, wl)
        plan = _plan(hw, wl, method)
        mapped, _ = mapped_plan(plan, topo, w)
        changed = {p.table for p, q in zip(plan.placements, mapped.placements) if p.model_dump() != q.model_dump()}
        assert changed == {p.table for p in plan.placements if p.sharding == "host"}, (hw, wl, method)


def test_cache_load_factor_round_trip():
    """A row-wise table with a hot/cold split per shard -> fused_uvm_caching whose load factor gives every
    shard's split back; the ILP's plans have such tables too (checked by the JSON round trip)."""
    topo, w = shipped_pair("dgx-h100", "tiny")
    base = _plan("dgx-h100", "tiny", "greedy_size")
    t = next(t for t in w.tables if t.rows >= 1000)
    gpus = topo.gpus_of_node("node0")
    from placer.forms.row_wise import placement as row_wise_placement

    rw = row_wise_placement(t, gpus, "fp32", 0.37)
    rw = Placement.model_validate(rw.model_dump())
    plan = base.model_copy(update={"placements": [rw if p.table == t.name else p for p in base.placements]})
    doc = export_document(plan, topo, w)
    ps = doc["tables"][t.name]["parameter_sharding"]
    assert ps["compute_kernel"] == "fused_uvm_caching" and ps["sharding_type"] == "row_wise"
    assert "static hot/cold split" in doc["tables"][t.name]["mapping_note"]
    back = plan_from_document(doc, topo, w, file="<export>")
    assert _dump(back.placements) == _dump(plan.placements) and doc["predicted"]["exact"]


def test_export_refuses_a_mapping_that_does_not_fit(monkeypatch):
    """The plan fits, what TorchRec would run instead does not: exit 2 saying so (not a bare capacity error
    about a plan the user did not write)."""
    from placer.errors import SpecError
    from placer.torchrec_io import exporter

    topo, w = shipped_pair("dgx-h100", "mlperf-dlrm-v1")
    plan = _plan("dgx-h100", "mlperf-dlrm-v1", "host_cpu")
    gpu = topo.gpus[0]

    def everything_on_one_gpu(plan, topo, wl):  # stands in for a mapping that overflows a GPU's HBM
        from placer.forms.row_wise import placement as row_wise_placement

        tables = {t.name: t for t in wl.tables}
        return plan.model_copy(update={"placements": [
            row_wise_placement(tables[p.table], [gpu], "fp32", 1.0) for p in plan.placements]}), {}

    monkeypatch.setattr(exporter, "mapped_plan", everything_on_one_gpu)
    with pytest.raises(SpecError, match="TorchRec cannot run this plan") as err:
        exporter.export_document(plan, topo, w, file="p.json")
    assert "host CPU lookup tables map to fused_uvm" in str(err.value) and err.value.file == "p.json"


def test_two_node_row_wise_is_table_row_wise():
    topo, w = shipped_pair("dgx-h100-2node", "tiny")
    t = w.tables[0]
    from placer.forms.row_wise import placement as row_wise_placement

    one = row_wise_placement(t, topo.gpus_of_node("node1"), "fp32", 1.0)
    every = row_wise_placement(t, topo.gpus, "fp32", 0.0)
    from placer.torchrec_io import mapping

    ranks = mapping.Ranks(topo)
    a, b = mapping.parameter_sharding(one, ranks), mapping.parameter_sharding(every, ranks)
    assert a["sharding_type"] == "table_row_wise" and a["ranks"] == list(range(8, 16))
    assert a["sharding_spec"]["shards"][3]["placement"] == "rank:11/cuda:3"
    assert b["sharding_type"] == "row_wise" and b["compute_kernel"] == "fused_uvm"


# ---- through TorchRec's own types ------------------------------------------------------------------------


def _builder(tmp_path, doc: dict):
    """Write the export and its generated module; import the module (as a user would)."""
    (tmp_path / "plan.torchrec.json").write_text(json.dumps(doc))
    (tmp_path / "plan_torchrec.py").write_text(builder_module("plan.torchrec.json"))
    spec = importlib.util.spec_from_file_location(f"plan_torchrec_{abs(hash(str(tmp_path)))}",
                                                  tmp_path / "plan_torchrec.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("hw,wl,method", CASES)
def test_torchrec_types_round_trip(tmp_path, hw, wl, method):
    """export -> TorchRec ShardingPlan / ParameterSharding / ParameterConstraints (the generated module)
    -> back to the document -> import: same placements, same step time."""
    require_torchrec()
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import EnumerableShardingSpec, ParameterSharding, ShardingPlan

    from placer.torchrec_io.torchrec_types import document_from_plan

    topo, w = shipped_pair(hw, wl)
    plan = _plan(hw, wl, method)
    doc = export_document(plan, topo, w, price_each=False)
    module = _builder(tmp_path, doc)
    sp = module.sharding_plan()
    assert isinstance(sp, ShardingPlan)
    ebc = sp.get_plan_for_module("sparse_arch.embedding_bag_collection")
    assert set(ebc) == {t.name for t in w.tables}
    for name, ps in ebc.items():
        assert isinstance(ps, ParameterSharding)
        if ps.sharding_type != "data_parallel":
            assert isinstance(ps.sharding_spec, EnumerableShardingSpec)
            for s in ps.sharding_spec.shards:
                assert str(s.placement).startswith("rank:") and s.placement.device().type == "cuda"
        if ps.compute_kernel == "fused_uvm_caching":
            assert 0 < ps.cache_params.load_factor < 1
    constraints = module.parameter_constraints()
    assert all(isinstance(c, ParameterConstraints) for c in constraints.values())
    data_types = {n: "FP16" for n in module.fp16_tables()}
    back_doc = document_from_plan(sp, data_types=data_types)
    back = plan_from_document(back_doc, topo, w, file="<ShardingPlan>")
    mapped, _ = mapped_plan(plan, topo, w)
    assert _dump(back.placements) == _dump(mapped.placements)
    assert _step(back, hw, wl) == doc["predicted"]["mapped_step_time_s"]


def test_cli_export_import_pickle(tmp_path, capsys):
    """The commands end to end, and a torch.save'd ShardingPlan read only with --allow-pickle."""
    require_torchrec()
    import torch

    hw, wl = str(ROOT / "hardware_specs/dgx-h100.yaml"), str(ROOT / "workloads/mlperf-dlrm-v1.yaml")
    plan_path, out = tmp_path / "p.json", tmp_path / "p.torchrec.json"
    _plan("dgx-h100", "mlperf-dlrm-v1", "ilp").write(plan_path)
    assert main(["export", "--torchrec", hw, wl, str(plan_path), "-o", str(out)]) == 0
    assert (tmp_path / "p_torchrec.py").exists()
    doc = json.loads(out.read_text())
    assert main(["import", "--torchrec", str(out), hw, wl, "-o", str(tmp_path / "back.json")]) == 0
    back = load_plan(tmp_path / "back.json")
    assert back.predicted["step_time_s"] == doc["predicted"]["mapped_step_time_s"]
    module = _builder(tmp_path, doc)
    torch.save(module.sharding_plan(), tmp_path / "sp.pt")
    capsys.readouterr()
    assert main(["import", "--torchrec", str(tmp_path / "sp.pt"), hw, wl, "-o", str(tmp_path / "x.json")]) == 2
    assert "--allow-pickle" in capsys.readouterr().err
    assert main(["import", "--torchrec", str(tmp_path / "sp.pt"), hw, wl, "-o", str(tmp_path / "x.json"),
                 "--allow-pickle"]) == 0
    assert _dump(load_plan(tmp_path / "x.json").placements) == _dump(back.placements)


# ---- bad input ------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_export(tmp_path):
    hw, wl = str(ROOT / "hardware_specs/dgx-h100.yaml"), str(ROOT / "workloads/tiny.yaml")
    plan_path = tmp_path / "p.json"
    _plan("dgx-h100", "tiny", "greedy_size").write(plan_path)
    out = tmp_path / "t.json"
    assert main(["export", "--torchrec", hw, wl, str(plan_path), "-o", str(out)]) == 0
    return hw, wl, out


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["tables"]["t_users"]["parameter_sharding"]["sharding_spec"]["shards"][0].update(
        placement="rank:99/cuda:0"), "tables.t_users.parameter_sharding.sharding_spec.shards[0].placement"),
    (lambda d: d["tables"]["t_users"]["parameter_sharding"].update(compute_kernel="quant"),
     "tables.t_users.parameter_sharding.compute_kernel"),
    (lambda d: d["tables"]["t_users"]["parameter_sharding"].update(sharding_type="grid_shard"),
     "tables.t_users.parameter_sharding.sharding_type"),
    (lambda d: d.update(world_size=3), "world_size"),
    (lambda d: d["tables"].update(nope=d["tables"]["t_users"]), "tables.nope"),
])
def test_bad_import_names_file_and_field(tiny_export, tmp_path, capsys, edit, field):
    hw, wl, out = tiny_export
    doc = json.loads(out.read_text())
    edit(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["import", "--torchrec", str(bad), hw, wl, "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err.replace("\n", "") and field in err.replace("\n", "") and "Traceback" not in err


def test_export_checks_output_first(tmp_path, capsys):
    hw, wl = str(ROOT / "hardware_specs/dgx-h100.yaml"), str(ROOT / "workloads/tiny.yaml")
    capsys.readouterr()
    assert main(["export", "--torchrec", hw, wl, str(tmp_path / "missing.json"), "-o", str(tmp_path)]) == 2
    assert "-o" in capsys.readouterr().err


def test_imported_plan_is_a_plan(tiny_export, tmp_path, capsys):
    """What import writes is a placer plan: simulate and check accept it; it records the specs' fields as placer
    solve does, so a what-if on it names what changed."""
    hw, wl, out = tiny_export
    assert main(["import", "--torchrec", str(out), hw, wl, "-o", str(tmp_path / "b.json")]) == 0
    assert main(["simulate", hw, wl, str(tmp_path / "b.json")]) == 0
    plan = load_plan(tmp_path / "b.json")
    assert plan.hardware.fields and plan.workload.fields["batch_size"] > 0
    capsys.readouterr()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # pyproject's filterwarnings ignores SpecWarning in the suite
        assert main(["simulate", hw, wl, str(tmp_path / "b.json"), "--batch", "1000"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"batch_size {plan.workload.fields['batch_size']} -> 1000" in err


# ---- what TorchRec runs (issue 37 items 4-5; trained under DMP by tests/test_torchrec_dmp.py) ------------

ODD_YAML = """
schema_version: 1
name: odd-tables
batch_size: 64
optimizer: {name: sgd, lr: 0.1}
tables:
  - {name: a, rows: 49, dim: 8, access: {kind: uniform}}
  - {name: b, rows: 300, dim: 12, access: {kind: uniform}}
  - {name: c, rows: 100, dim: 10, access: {kind: uniform}}
dense:
  num_dense_features: 4
  bottom_mlp: [8]
  interaction: {kind: concat}
  top_mlp: [1]
"""


@pytest.fixture
def odd_plan(tmp_path):
    """dgx-h100 (8 GPUs) and three tables: a row-wise over 8 GPUs (49 rows: TorchRec's blocks of 7 leave rank 7
    empty), b column-wise in two 6-wide pieces, c table-wise (dim 10)."""
    from placer.forms.row_wise import placement as row_wise_placement
    from placer.plan import Shard, SpecRef
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    p = tmp_path / "odd.yaml"
    p.write_text(ODD_YAML)
    w = load_workload(p)
    topo = Topology(load_hardware(ROOT / "hardware_specs/dgx-h100.yaml"), w.dense.dtype)
    t = {x.name: x for x in w.tables}
    g = list(topo.gpus)
    placements = [
        row_wise_placement(t["a"], g, "fp32", 1.0),
        Placement(table="b", sharding="column_wise", precision="fp32", shards=[
            Shard(device=g[i], rows=(0, 300), cols=(6 * i, 6 * i + 6), hbm_rows=300, host_rows=0) for i in range(2)]),
        Placement(table="c", sharding="table_wise", precision="fp32", shards=[
            Shard(device=g[2], rows=(0, 100), cols=(0, 10), hbm_rows=0, host_rows=100)])]
    plan = Plan(hardware=SpecRef(name=topo.spec.name), workload=SpecRef(name=w.name), method="hand",
                placements=placements)
    return topo, w, plan


def test_row_wise_and_column_pieces_as_torchrec_runs_them(odd_plan):
    """Row-wise shards are written as TorchRec routes ids (blocks of ceil(rows / ranks), one per rank, the
    empty one included), not placer's near-equal split; 6-wide column pieces become 8 + 4 on the same GPUs;
    both noted; the import gives the mapped plan back."""
    from placer.torchrec_io import mapping

    topo, w, plan = odd_plan
    assert mapping.row_blocks(49, 8) == [(0, 7), (7, 14), (14, 21), (21, 28), (28, 35), (35, 42), (42, 49), (49, 49)]
    assert mapping.row_blocks(20001, 4) == [(0, 5001), (5001, 10002), (10002, 15003), (15003, 20001)]
    assert mapping.column_blocks(12, 2) == [(0, 8), (8, 12)] and mapping.column_blocks(10, 2) is None
    doc = json.loads(json.dumps(export_document(plan, topo, w)))
    a = doc["tables"]["a"]["parameter_sharding"]
    assert a["ranks"] == list(range(8))
    assert [s["shard_sizes"] for s in a["sharding_spec"]["shards"]] == [[7, 8]] * 7 + [[0, 8]]
    assert [s["shard_offsets"][0] for s in a["sharding_spec"]["shards"]] == [0, 7, 14, 21, 28, 35, 42, 49]
    assert "blocks of ceil(49 / 8) = 7 rows" in doc["tables"]["a"]["mapping_note"]
    b = doc["tables"]["b"]["parameter_sharding"]["sharding_spec"]["shards"]
    assert [(s["shard_offsets"], s["shard_sizes"], s["placement"]) for s in b] == [
        ([0, 0], [300, 8], "rank:0/cuda:0"), ([0, 8], [300, 4], "rank:1/cuda:1")]
    assert "multiples of 4" in doc["tables"]["b"]["mapping_note"]
    assert not doc["predicted"]["exact"] and doc["device"] == "cuda"
    back = plan_from_document(doc, topo, w, file="<export>")
    mapped, _ = mapped_plan(plan, topo, w)
    assert _dump(back.placements) == _dump(mapped.placements)
    assert [s.rows for s in back.placements[0].shards] == mapping.row_blocks(49, 8)[:7]


def test_column_pieces_that_cannot_be_multiples_of_4_are_refused(odd_plan):
    from placer.errors import SpecError
    from placer.plan import Shard

    topo, w, plan = odd_plan
    g = list(topo.gpus)
    c = Placement(table="c", sharding="column_wise", precision="fp32", shards=[
        Shard(device=g[i], rows=(0, 100), cols=(5 * i, 5 * i + 5), hbm_rows=100, host_rows=0) for i in range(2)])
    bad = plan.model_copy(update={"placements": plan.placements[:2] + [c]})
    with pytest.raises(SpecError, match=r"TorchRec cannot run this plan: table 'c': column_wise pieces \[5, 5\] wide"):
        export_document(bad, topo, w, file="p.json")


def test_device_cpu_placements_and_import(odd_plan):
    """--device cpu: placements rank:R/cpu, UVM and cached tables as fused (TorchRec's host kernel on CPU,
    noted), data_parallel stays dense; the import reads cpu placements (fused: every row in device memory) and
    refuses 'rank:R/cpu:N' and meta."""
    from placer.errors import SpecError
    from placer.torchrec_io import mapping

    topo, w, plan = odd_plan
    doc = json.loads(json.dumps(export_document(plan, topo, w, device="cpu")))
    assert doc["device"] == "cpu"
    shards = doc["tables"]["a"]["parameter_sharding"]["sharding_spec"]["shards"]
    assert [s["placement"] for s in shards] == [f"rank:{r}/cpu" for r in range(8)]
    c = doc["tables"]["c"]
    assert c["parameter_sharding"]["compute_kernel"] == "fused"
    assert c["parameter_constraints"]["compute_kernels"] == ["fused"]
    assert "plain host kernel" in c["mapping_note"]
    back = plan_from_document(doc, topo, w, file="<export>")
    assert back.placements[2].shards[0].hbm_rows == 100 and back.placements[2].shards[0].device == topo.gpus[2]
    dp = export_document(_plan("dgx-h100", "tiny", "torchrec"), *shipped_pair("dgx-h100", "tiny"), device="cpu",
                         price_each=False)
    assert all(e["parameter_sharding"]["compute_kernel"] == "dense" for e in dp["tables"].values()
               if e["parameter_sharding"]["sharding_type"] == "data_parallel")
    ranks = mapping.Ranks(topo)
    assert ranks.device_of_placement("rank:3/cpu", file="f", field="x") == topo.gpus[3]
    for text in ("rank:3/cpu:1", "rank:3/meta"):
        with pytest.raises(SpecError):
            ranks.device_of_placement(text, file="f", field="x")
