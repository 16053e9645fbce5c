"""Tensor-train (TT-Rec) tables on the planner's menu (issue 39 item 2): options only where the workload allows tt,
their memory and ops (program/tt_ops.py), plan checks, the export refusal, and the runner's TTGroup stepped
against a reference TTEmbeddingBag (runner/compressed.py) stepped by hand."""
from __future__ import annotations

import json

import pytest
import torch

from placer.cli import main
from placer.cost import CostModel
from placer.options import OptionConfig, table_options
from placer.plan import load_plan, plan_from_json
from placer.plan_check import check_plan
from placer.program.build import ProgramBuilder
from placer.program.ops import BWD, FWD
from placer.program.tt_shape import TTShape
from placer.runner.compressed import TTEmbeddingBag
from placer.runner.compressed_groups import qr_seed
from placer.runner.trainer import Trainer
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

HW = "hardware_specs/h100-pcie-host.yaml"
TABLES = [{"name": "a", "rows": 1000, "dim": 16, "compression": {"tt": {"ranks": [4, 8]}}},
          {"name": "b", "rows": 500, "dim": 16, "frozen": True, "compression": {"tt": {"ranks": [4, 4]}}},
          {"name": "c", "rows": 300, "dim": 16, "compression": {"qr": {"max_collisions": 4}}},
          {"name": "e", "rows": 100, "dim": 16}]


def workload(optimizer="sgd"):
    return {"schema_version": 1, "name": "tq", "batch_size": 64, "optimizer": {"name": optimizer, "lr": 0.5},
            "tables": TABLES, "dense": {"bottom_mlp": [16], "top_mlp": [8, 1]}}


def shard(rows, hbm=None):
    return {"device": "node0/gpu0", "rows": [0, rows], "cols": [0, 16], "hbm_rows": rows if hbm is None else hbm,
            "host_rows": 0 if hbm is None else rows - hbm}


PLAN = {"schema_version": 1, "hardware": {"name": "h"}, "workload": {"name": "tq"}, "method": "hand", "placements": [
    {"table": "a", "sharding": "table_wise", "shards": [shard(1000)], "compression": {"tt": {"ranks": [4, 8]}}},
    {"table": "b", "sharding": "table_wise", "shards": [shard(500)]},
    {"table": "c", "sharding": "table_wise", "shards": [shard(300)], "compression": {"qr": {"collisions": 4}}},
    {"table": "e", "sharding": "table_wise", "shards": [shard(100)]}]}


def write(tmp_path, optimizer="sgd", plan=PLAN):
    wl, p = tmp_path / "w.json", tmp_path / "p.json"
    wl.write_text(json.dumps(workload(optimizer)))
    p.write_text(json.dumps(plan))
    return str(wl), str(p)


def test_tt_is_offered_only_where_allowed(tmp_path):
    wl_path, _ = write(tmp_path)
    topo, wl = Topology(load_hardware(HW)), load_workload(wl_path)
    forms = {t.name: [p.compression.tt.ranks for p in table_options(t, topo, wl)
                      if p.compression is not None and p.compression.tt is not None] for t in wl.tables}
    assert forms == {"a": [(4, 8)], "b": [], "c": [], "e": []}  # b: frozen (int8 is the frozen tables' form)
    assert not [p for p in table_options(wl.tables[0], topo, wl, OptionConfig(compressed=False)) if p.compression]
    tt = [p for p in table_options(wl.tables[0], topo, wl) if p.form == "tt"]
    assert all(p.sharding == "table_wise" and p.precision == "fp32" and p.shards[0].hbm_rows == 1000 for p in tt)
    assert tt[0].label() == "table_wise node0/gpu0 tt r=4x8"


@pytest.mark.parametrize("optimizer, state_values", [("sgd", 0), ("adagrad", 1), ("rowwise_adagrad", None)])
def test_tt_memory_is_the_cores_and_their_state(tmp_path, optimizer, state_values):
    wl_path, _ = write(tmp_path, optimizer)
    topo, wl = Topology(load_hardware(HW)), load_workload(wl_path)
    b = ProgramBuilder(topo, wl)
    p = plan_from_json(json.dumps(PLAN)).placements[0]
    shape = TTShape.of(1000, 16, (4, 8))
    assert shape.n == (10, 10, 10) and shape.d == (2, 2, 4) and shape.widths == (8, 64, 32)
    rows = sum(x.bytes for x in b.placement_buffers(p) if x.purpose == "rows and optimizer state")
    state = sum(shape.n) if state_values is None else state_values * shape.params  # rowwise: one per slice
    assert rows == pytest.approx((shape.params + state) * 4)
    assert rows < 1000 * 16 * 4  # smaller than the table's rows


def test_tt_ops_price_the_products_and_their_gradients(tmp_path):
    wl_path, _ = write(tmp_path)
    topo, wl = Topology(load_hardware(HW)), load_workload(wl_path)
    b = ProgramBuilder(topo, wl)
    p = plan_from_json(json.dumps(PLAN)).placements[0]
    (key, m), = b.members(p)
    assert key.tt and key.form == "tt:a" and m.lookups == 64
    ops = b.member_ops(key, m)
    gemm = {op.phase: op for op in ops if op.kind == "gemm"}
    shape = TTShape.of(1000, 16, (4, 8))
    assert gemm[FWD].sizes["flops"] == pytest.approx(m.unique_rows * sum(shape.forward_flops))
    assert gemm[BWD].sizes["flops"] == 2 * gemm[FWD].sizes["flops"] and gemm[BWD].seconds > gemm[FWD].seconds
    assert {op.kind for op in ops if op.phase == BWD} >= {"sort", "segment_reduce", "update"}
    fixed = b.group_fixed_ops(key)
    assert all(op.once for op in fixed) and len({op.once_key for op in fixed}) == len(fixed)
    assert CostModel(topo, wl).placement_cost(p).memory  # priced like any option


@pytest.mark.parametrize("i, change, field, words", [
    (3, {"compression": {"tt": {"ranks": [4, 8]}}}, "compression", "does not allow"),  # tt not allowed on e
    (0, {"compression": {"tt": {"ranks": [4, 4]}}}, "compression.tt.ranks", "not the workload's"),
    (1, {"compression": {"tt": {"ranks": [4, 4]}}}, "compression", "frozen"),
    (0, {"shards": [shard(1000, 500)]}, "sharding", "every row in"),
    (0, {"precision": "fp16"}, "compression", "fp32"),
])
def test_check_refuses_tt_the_workload_did_not_allow(tmp_path, capsys, i, change, field, words):
    doc = json.loads(json.dumps(PLAN))
    doc["placements"][i].update(change)
    wl_path, plan_path = write(tmp_path, plan=doc)
    if "precision" in change:  # fp16 needs allow_fp16 first, so the TT check is what refuses it
        w = workload()
        w["tables"] = [dict(t, allow_fp16=True) for t in TABLES]
        open(wl_path, "w").write(json.dumps(w))
    assert main(["simulate", HW, wl_path, plan_path]) == 2
    err = capsys.readouterr().err
    assert plan_path in err and f"placements[{i}].{field}" in err and words in err and "Traceback" not in err


def test_a_plan_naming_two_forms_is_refused(tmp_path, capsys):
    doc = json.loads(json.dumps(PLAN))
    doc["placements"][0]["compression"] = {"tt": {"ranks": [4, 8]}, "int8": True}
    wl_path, plan_path = write(tmp_path, plan=doc)
    assert main(["simulate", HW, wl_path, plan_path]) == 2
    err = capsys.readouterr().err
    assert "exactly one compressed form" in err and "Traceback" not in err


def test_export_torchrec_refuses_a_tt_plan(tmp_path, capsys):
    wl_path, plan_path = write(tmp_path)
    assert main(["export", HW, wl_path, plan_path, "--torchrec", "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "no TT (tensor-train) embedding table" in err and "placements[0].compression" in err


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_runner_step_matches_a_reference_tt_stepped_by_hand(tmp_path, optimizer):
    wl_path, _ = write(tmp_path, optimizer)
    topo, wl = Topology(load_hardware(HW)), load_workload(wl_path)
    plan = plan_from_json(json.dumps(PLAN))
    check_plan(plan, topo, wl, check_hashes=False)
    tr = Trainer(plan, wl, torch.device("cpu"), topo, seed=0, pool_batches=1)
    try:
        g = next(g for g in tr.groups.values() if g.key.tt)
        ref = TTEmbeddingBag(1000, 16, (4, 8), seed=qr_seed(0, wl.table_index["a"]))
        before = tr.table_weights("a").clone()
        cores0 = [c.clone() for c in g.cores]
        assert torch.allclose(before, ref.row(torch.arange(1000)).detach(), atol=1e-7)
        batch = tr.pool[0]
        inp = batch.groups[g.key]
        _, n2, n3 = g.shape.n
        uniq = inp.ids * n2 * n3 + inp.i2 * n3 + inp.i3  # the distinct ids back from the core slices
        ids = uniq.index_select(0, inp.inverse)  # and every lookup's
        assert uniq.numel() < ids.numel() and torch.equal(uniq, torch.unique(ids))
        assert torch.equal(ids, torch.from_numpy(batch.table_ids["a"]))
        out_ref = ref(ids, inp.offsets)
        assert torch.allclose(g.lookup(inp), out_ref, atol=1e-6)
        tr.step(batch)
        out_ref.backward(g.grad)  # the pooled gradient the trainer packed for the table
        with torch.no_grad():
            for core in (ref.core1, ref.core2, ref.core3):
                if optimizer == "sgd":
                    core -= 0.5 * core.grad
                else:  # adagrad from zero state: s = g^2, w -= lr g / (sqrt(s) + eps) (untouched slices: g = 0)
                    core -= 0.5 * core.grad / (core.grad.abs() + 1e-10)
        for mine, start, theirs in zip(g.cores, cores0, (ref.core1, ref.core2, ref.core3)):
            assert not torch.equal(mine, start)
            assert torch.allclose(mine, theirs.detach(), atol=1e-6)
        after = tr.table_weights("a")
        assert not torch.equal(after, before)
        assert torch.allclose(after, ref.row(torch.arange(1000)).detach(), atol=1e-6)
        assert tr.memory_bytes()["device_tables"] > 0
    finally:
        tr.close()


def test_run_cli_runs_a_tt_plan_on_cpu_and_refuses_nproc(tmp_path, capsys):
    wl_path, plan_path = write(tmp_path)
    assert main(["run", HW, wl_path, plan_path, "--device", "cpu", "--steps", "2", "--warmup", "0",
                 "--phase-steps", "1", "--json"]) == 0
    json.loads(capsys.readouterr().out)
    assert main(["run", HW, wl_path, plan_path, "--device", "cpu", "--nproc", "2"]) == 2
    err = capsys.readouterr().err
    assert "--nproc" in err and "tt" in err


def test_mlperf_dlrm_v2_tt_solves_with_tt_on_the_menu(tmp_path, capsys):
    """With QR and TT allowed on its 40M-row tables, the ILP plans mlperf-dlrm-v2 on one H100 + host (it does not
    fit uncompressed) with compressed tables only where allowed, each whole in HBM; the TT options were priced."""
    out = tmp_path / "tt.json"
    assert main(["solve", HW, "workloads/mlperf-dlrm-v2-tt.yaml", "-o", str(out), "--time-limit", "30"]) == 0
    capsys.readouterr()
    wl = load_workload("workloads/mlperf-dlrm-v2-tt.yaml")
    allowed = {t.name for t in wl.tables if t.compression and t.compression.tt}
    compressed = [p for p in load_plan(str(out)).placements if p.compression is not None]
    assert compressed and {p.table for p in compressed} <= allowed
    assert all(p.sharding == "table_wise" and p.shards[0].host_rows == 0 for p in compressed)
    topo = Topology(load_hardware(HW))
    tt = [p for p in table_options(wl.tables[wl.table_index["C20"]], topo, wl) if p.form == "tt"]
    assert len(tt) == 1 and CostModel(topo, wl).placement_cost(tt[0]).memory
