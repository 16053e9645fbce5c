"""Compressed forms on the planner's menu (issue 39 item 2): QR and int8 rows of frozen tables as options, priced
(program/compressed_ops.py), checked against the workload (plan_check.check_plan), run by the runner
(runner/compressed_groups.py) against the reference modules of runner/compressed.py."""
from __future__ import annotations

import glob
import json

import numpy as np
import pytest
import torch

from placer.cli import main
from placer.cost import CostModel
from placer.errors import SpecError
from placer.options import OptionConfig, table_options
from placer.plan import load_plan, plan_from_json
from placer.plan_check import check_plan
from placer.program.build import ProgramBuilder
from placer.program.ops import BWD, BX, FWD, FX
from placer.runner.compressed import Int8EmbeddingBag, QREmbeddingBag
from placer.runner.compressed_groups import qr_seed
from placer.runner.trainer import Trainer
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

HW = "hardware_specs/h100-pcie-host.yaml"
TABLES = [{"name": "a", "rows": 1000, "dim": 16, "compression": {"qr": {"max_collisions": 8}}},
          {"name": "b", "rows": 500, "dim": 16, "frozen": True, "compression": {"int8": True}},
          {"name": "c", "rows": 300, "dim": 16, "frozen": True},
          {"name": "d", "rows": 200, "dim": 16, "compression": {"qr": {"max_collisions": 2, "combine": "add"}}},
          {"name": "e", "rows": 100, "dim": 16}]
WL = {"schema_version": 1, "name": "cq", "batch_size": 64, "optimizer": {"name": "sgd", "lr": 0.5},
      "tables": TABLES, "dense": {"bottom_mlp": [16], "top_mlp": [8, 1]}}


def shard(rows, hbm=None):
    return {"device": "node0/gpu0", "rows": [0, rows], "cols": [0, 16], "hbm_rows": rows if hbm is None else hbm,
            "host_rows": 0 if hbm is None else rows - hbm}


PLAN = {"schema_version": 1, "hardware": {"name": "h"}, "workload": {"name": "cq"}, "method": "hand", "placements": [
    {"table": "a", "sharding": "table_wise", "shards": [shard(1000)], "compression": {"qr": {"collisions": 4}}},
    {"table": "b", "sharding": "table_wise", "shards": [shard(500)], "compression": {"int8": True}},
    {"table": "c", "sharding": "table_wise", "shards": [shard(300, 100)]},
    {"table": "d", "sharding": "table_wise", "shards": [shard(200)],
     "compression": {"qr": {"collisions": 2, "combine": "add"}}},
    {"table": "e", "sharding": "table_wise", "shards": [shard(100)]}]}


@pytest.fixture
def files(tmp_path):
    wl, plan = tmp_path / "w.json", tmp_path / "p.json"
    wl.write_text(json.dumps(WL))
    plan.write_text(json.dumps(PLAN))
    return str(wl), str(plan)


def model(files):
    return Topology(load_hardware(HW)), load_workload(files[0])


def test_options_offer_only_the_forms_the_workload_allows(files):
    topo, wl = model(files)
    forms = {t.name: [(p.compression.qr.collisions if p.compression.qr else "int8") for p in
                      table_options(t, topo, wl) if p.compression is not None] for t in wl.tables}
    assert forms == {"a": [8, 2, 4], "b": ["int8"], "c": [], "d": [2], "e": []}
    assert not [p for p in table_options(wl.tables[0], topo, wl, OptionConfig(compressed=False)) if p.compression]
    for t in wl.tables:  # every compressed option passes the plan checks
        for p in table_options(t, topo, wl):
            if p.compression is not None:
                assert p.sharding == "table_wise" and p.shards[0].hbm_rows == t.rows


def test_qr_rows_memory_and_frozen_tables_have_no_backward(files):
    topo, wl = model(files)
    b = ProgramBuilder(topo, wl)
    plan = plan_from_json(json.dumps(PLAN))
    rows = lambda p: sum(x.bytes for x in b.placement_buffers(p) if x.purpose == "rows and optimizer state")
    qr, full = plan.placements[0], plan.placements[0].model_copy(update={"compression": None})
    assert rows(qr) == pytest.approx((250 + 4) * 16 * 4) and rows(full) == pytest.approx(1000 * 16 * 4)
    assert rows(plan.placements[1]) == pytest.approx(500 * (16 + 8))  # int8 rows + scale and bias, no state
    assert [m.rows for _, m in b.members(qr)] == [250, 4]
    for p in plan.placements[1:3]:  # frozen: forward ops only, whatever the placement
        phases = {op.phase for op in b.placement_ops(p) + b.group_fixed_ops(b.members(p)[0][0])}
        assert phases <= {FWD, FX} and phases
    qr_phases = {op.phase for op in b.placement_ops(qr)}
    assert BWD in qr_phases and BX in qr_phases


def test_a_qr_option_fits_where_the_full_table_does_not(tmp_path):
    doc = {**WL, "tables": [{"name": "big", "rows": 200_000_000, "dim": 128,
                             "compression": {"qr": {"max_collisions": 4}}}]}
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    topo, wl = Topology(load_hardware(HW)), load_workload(path)
    cm = CostModel(topo, wl)
    hbm = topo.memory_of("node0/gpu0")
    opts = table_options(wl.tables[0], topo, wl)
    fits = [p for p in opts if cm.placement_cost(p).memory.get(hbm, 0) <= cm.usable_memory[hbm]]
    assert all(p.shards[0].hbm_rows < p.shards[0].num_rows or p.compression for p in fits)
    assert any(p.compression is not None and p.compression.qr.collisions == 4 for p in fits)
    assert not any(p.compression is None and p.shards[0].hbm_rows == 200_000_000 for p in fits)


@pytest.mark.parametrize("placement, field, words", [
    (0, "compression", "does not allow"),  # QR on table e
    (1, "compression.qr.collisions", "exceed"),
    (2, "compression", "int8"),
    (3, "sharding", "every row in"),
])
def test_check_refuses_a_form_the_workload_did_not_allow(files, capsys, placement, field, words):
    doc = json.loads(json.dumps(PLAN))
    bad = [("e", {"qr": {"collisions": 2}}, None), ("a", {"qr": {"collisions": 16}}, None),
           ("c", {"int8": True}, None), ("a", {"qr": {"collisions": 4}}, 500)][placement]
    i = next(i for i, p in enumerate(doc["placements"]) if p["table"] == bad[0])
    doc["placements"][i]["compression"] = bad[1]
    if bad[2] is not None:
        doc["placements"][i]["shards"] = [shard(1000, bad[2])]
    path = files[1].replace("p.json", "bad.json")
    open(path, "w").write(json.dumps(doc))
    assert main(["simulate", HW, files[0], path]) == 2
    err = capsys.readouterr().err
    assert path in err and f"placements[{i}].{field}" in err and words in err and "Traceback" not in err


def test_plans_without_compression_load_as_before():
    paths = glob.glob("tests/data/**/*plan*.json", recursive=True) + glob.glob("examples/**/*.json", recursive=True)
    for path in paths:
        try:
            plan = load_plan(path)
        except SpecError as exc:
            if "placements" in str(exc) or "not a plan" in str(exc):
                continue  # a deliberately broken fixture or another kind of document
            raise
        assert all(p.compression is None for p in plan.placements)


def test_export_torchrec_refuses_a_qr_plan(files, capsys, tmp_path):
    assert main(["export", HW, files[0], files[1], "--torchrec", "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "no QR embedding table" in err and "placements[0].compression" in err


def test_runner_step_matches_the_reference_modules(files):
    topo, wl = model(files)
    plan = plan_from_json(json.dumps(PLAN))
    check_plan(plan, topo, wl, check_hashes=False)
    tr = Trainer(plan, wl, torch.device("cpu"), topo, seed=0, pool_batches=1)
    try:
        before = {t.name: tr.table_weights(t.name).clone() for t in wl.tables}
        groups = {g.key.form: g for g in tr.groups.values()}
        qr, int8 = groups["qr:mult"], groups["int8"]
        batch = tr.pool[0]
        # forward: the QR group's pooled output is QREmbeddingBag's, from the same initial rows
        ref = QREmbeddingBag(1000, 16, 4, "mult", seed=qr_seed(0, wl.table_index["a"]))
        assert torch.allclose(before["a"], ref.row(torch.arange(1000)).detach(), atol=1e-6)
        inp = batch.groups[qr.key]
        offsets = inp.offsets  # table a is the group's only member: its ids are the table's ids
        ids = (inp.ids - qr.slots[0].row_base) * 4 + (inp.rids - qr.rbase["a"])
        out_ref = ref(ids, offsets)
        assert torch.allclose(qr.lookup(inp), out_ref, atol=1e-6)
        # int8: the group's output is Int8EmbeddingBag's over the uncompressed table's initial rows
        i8 = Int8EmbeddingBag(before["b"])
        assert torch.allclose(before["b"], i8.dequantized(), atol=1e-6)
        # one training step: frozen tables unchanged; QR's new weights are one SGD step on the reference's
        # gradient, taken with autograd from the pooled gradient the trainer packed
        loss = tr.step(batch)
        assert torch.isfinite(loss)
        after = {t.name: tr.table_weights(t.name) for t in wl.tables}
        assert torch.equal(after["b"], before["b"]) and torch.equal(after["c"], before["c"])
        assert not torch.equal(after["e"], before["e"])
        out = ref(ids, offsets)
        out.backward(qr.grad)
        with torch.no_grad():
            ref.quotient -= 0.5 * ref.quotient.grad
            ref.remainder -= 0.5 * ref.remainder.grad
        assert not torch.equal(after["a"], before["a"])
        assert torch.allclose(after["a"], ref.row(torch.arange(1000)).detach(), atol=1e-5)
        # QR add (table d): the logical rows change too, and are Q + R of the group's rows
        assert not torch.equal(after["d"], before["d"])
        assert tr.memory_bytes()["device_tables"] > 0
    finally:
        tr.close()


def test_run_cli_runs_a_compressed_plan_on_cpu_and_refuses_nproc(files, capsys):
    assert main(["run", HW, files[0], files[1], "--device", "cpu", "--steps", "2", "--warmup", "0",
                 "--phase-steps", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    losses = result["measured"]["losses"] if "losses" in result["measured"] else result.get("losses")
    assert losses is None or all(np.isfinite(losses))
    assert main(["run", HW, files[0], files[1], "--device", "cpu", "--nproc", "2"]) == 2
    assert "--nproc" in capsys.readouterr().err


def test_qr_is_the_answer_where_nothing_else_fits(tmp_path, capsys):
    """mlperf-dlrm-v2 does not fit one H100 and its host (exit 3); with QR allowed on its 40M-row tables
    (workloads/mlperf-dlrm-v2-qr.yaml) the ILP plans it, compressing some of those tables, each whole in HBM."""
    assert main(["solve", HW, "workloads/mlperf-dlrm-v2.yaml", "-o", str(tmp_path / "plain.json")]) == 3
    out = tmp_path / "qr.json"
    assert main(["solve", HW, "workloads/mlperf-dlrm-v2-qr.yaml", "-o", str(out), "--time-limit", "30"]) == 0
    capsys.readouterr()
    allowed = {t.name for t in load_workload("workloads/mlperf-dlrm-v2-qr.yaml").tables if t.compression}
    compressed = [p for p in load_plan(str(out)).placements if p.compression is not None]
    assert compressed and {p.table for p in compressed} <= allowed
    assert all(p.sharding == "table_wise" and p.shards[0].host_rows == 0 for p in compressed)
