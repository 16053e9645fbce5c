"""A table's size as stored (issue 52: QR tables showed their uncompressed size in solve's table): solve's and
simulate's 'size stored', explain's size_bytes and show's 'stored compressed' (placer/report_sizes.py)."""
from __future__ import annotations

import math

import pytest

from placer.cost import CostModel
from placer.explain import explain_plan
from placer.plan import Compression, Placement, QRForm, Shard, TTForm
from placer.planner.solve import SolveConfig, solve
from placer.program.tt_shape import TTShape
from placer.report import make_console, plan_summary
from placer.report_sizes import allowed_forms, stored_bytes
from placer.report_specs import largest_tables_table
from placer.specs import load_hardware, load_workload
from placer.specs.workload import TableSpec
from placer.topology import Topology
from placer.units import fmt_bytes
from tests.conftest import ROOT

T = TableSpec(name="t", rows=40_000_000, dim=128)


def _placement(**compression) -> Placement:
    return Placement(table="t", sharding="table_wise", precision="fp32",
                     shards=[Shard(device="node0/gpu0", rows=(0, T.rows), cols=(0, T.dim), hbm_rows=T.rows,
                                   host_rows=0)],
                     compression=Compression(**compression) if compression else None)


def test_stored_bytes_of_each_form():
    assert stored_bytes(T, _placement()) == T.rows * 128 * 4
    assert stored_bytes(T, _placement().model_copy(update={"precision": "fp16"})) == T.rows * 128 * 2
    assert stored_bytes(T, _placement(qr=QRForm(collisions=2))) == (math.ceil(T.rows / 2) + 2) * 128 * 4
    assert stored_bytes(T, _placement(tt=TTForm(ranks=(32, 32)))) == TTShape.of(T.rows, 128, (32, 32)).params * 4
    frozen = T.model_copy(update={"frozen": True})
    assert stored_bytes(frozen, _placement(int8=True)) == T.rows * (128 + 8)


@pytest.fixture(scope="module")
def qr_plan():
    wl = load_workload(ROOT / "workloads" / "mlperf-dlrm-v1-qr.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "h100-sxm-host.yaml"), wl.dense.dtype)
    return topo, wl, solve(topo, wl, SolveConfig(method="qr", work_limit=300))


def test_solve_and_explain_show_a_qr_table_as_stored(qr_plan):
    topo, wl, plan = qr_plan
    c1 = next(p for p in plan.placements if p.table == "C1")
    assert c1.compression is not None and c1.compression.qr is not None
    k = c1.compression.qr.collisions
    stored = (math.ceil(40_000_000 / k) + k) * 128 * 4
    console = make_console()
    with console.capture() as cap:
        plan_summary(plan, wl, console)
    row = next(line for line in cap.get().splitlines() if "│ C1 " in line)
    assert fmt_bytes(stored) in row and "19.1 GiB" not in row  # 19.1 GiB: its rows uncompressed
    ex = explain_plan(CostModel(topo, wl), plan, ["C1"])
    assert ex["tables"][0]["size_bytes"] == stored


def test_show_names_what_each_allowed_form_stores():
    wl = load_workload(ROOT / "workloads" / "mlperf-dlrm-v2-tt.yaml")
    c1 = next(t for t in wl.tables if t.name == "C1")
    assert [f for f, _ in allowed_forms(c1)] == ["qr k=4", "tt 32,32"]
    console = make_console()
    with console.capture() as cap:
        console.print(largest_tables_table(wl))
    row = next(line for line in cap.get().splitlines() if "│ C1 " in line)
    assert f"qr k=4: {fmt_bytes((10_000_000 + 4) * 128 * 4)}" in row and "tt 32,32: " in row
    plain = load_workload(ROOT / "workloads" / "mlperf-dlrm-v1.yaml")
    with console.capture() as cap:
        console.print(largest_tables_table(plain))
    assert "stored compressed" not in cap.get()  # no column where no table allows a form
