"""Cost model: hand-computed numbers on a 2-GPU, 3-table case, and communication on dgx-h100-2node."""
from __future__ import annotations

import pytest

from placer.cost import AR, BWD, BX, DENSE, FWD, FX, CostModel
from placer.plan import Placement, Shard
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT

G0, G1, HOST = "node0/gpu0", "node0/gpu1", "node0/host"


def tw(table, rows, dim, gpu=G0, hbm=None, precision="fp32"):
    hbm = rows if hbm is None else hbm
    return Placement(table=table, sharding="table_wise", precision=precision,
                     shards=[Shard(device=gpu, rows=(0, rows), cols=(0, dim), hbm_rows=hbm, host_rows=rows - hbm)])


def test_table_wise_in_hbm_hand_computed(two_gpu_model):
    # table a: 1000 rows x 16 fp32 (64 B rows), 1 lookup/sample, batch 100, 2 GPUs (50 samples each)
    c = two_gpu_model.placement_cost(tw("a", 1000, 16))
    # forward HBM: 100 lookups x 64 B / 0.5 efficiency + 100 pooled x 16 x 4 B = 12800 + 6400 B at 1000 GB/s
    assert c.loads[(FWD, f"{G0}:hbm")] == pytest.approx(19200 / 1000e9)
    assert c.loads[(FWD, f"{G0}:launch")] == pytest.approx(1 * 2e-6)
    # exchange: 50 samples x 16 x 4 B = 3200 B to gpu1 over gpu0->sw and sw->gpu1 at 100 GB/s
    assert c.loads[(FX, f"{G0}->node0/sw")] == pytest.approx(3200 / 100e9)
    assert c.loads[(FX, f"node0/sw->{G1}")] == pytest.approx(3200 / 100e9)
    assert c.loads[(BX, f"{G1}->node0/sw")] == pytest.approx(3200 / 100e9)
    # backward HBM: grads 2 x 100 x 16 x 4 = 12800, pooled grads 6400, update of the distinct rows
    # (uniform: 1000 x (1 - (1 - 1/1000)^100) = 95.21 rows) read+write 64 B / 0.5
    uniq = 1000 * (1 - (1 - 1 / 1000) ** 100)
    assert c.loads[(BWD, f"{G0}:hbm")] == pytest.approx((12800 + 6400 + 2 * uniq * 64 / 0.5) / 1000e9, rel=1e-3)
    assert c.memory[G0] == 1000 * 64
    assert HOST not in c.memory


def test_uvm_reads_cross_pcie(two_gpu_model):
    # table b: 4000 x 8 fp32 (32 B), pooling 2 -> 200 lookups; all rows in host memory
    c = two_gpu_model.placement_cost(tw("b", 4000, 8, gpu=G1, hbm=0))
    # 200 x 32 B = 6400 B over host->gpu1 at 20 GB/s, host_read_efficiency 0.5
    assert c.loads[(FWD, f"{HOST}->{G1}")] == pytest.approx(6400 / 0.5 / 20e9)
    assert c.loads[(FWD, f"{HOST}:dram")] == pytest.approx(6400 / 100e9)
    assert c.memory[HOST] == 4000 * 32
    assert c.memory.get(G1, 0) == 0


def test_host_cpu_lookup(two_gpu_model):
    p = Placement(table="a", sharding="host", shards=[Shard(device=HOST, rows=(0, 1000), cols=(0, 16),
                                                            hbm_rows=0, host_rows=1000)])
    c = two_gpu_model.placement_cost(p)
    assert c.loads[(FWD, f"{HOST}:cpu")] == pytest.approx(100 * 64 / 10e9)
    # pooled results to each GPU: 50 x 64 B over PCIe at 20 GB/s
    assert c.loads[(FX, f"{HOST}->{G0}")] == pytest.approx(3200 / 20e9)
    assert c.loads[(BX, f"{G1}->{HOST}")] == pytest.approx(3200 / 20e9)
    assert c.memory[HOST] == 64000


def test_hot_split_uses_coverage(two_gpu_model):
    wl = two_gpu_model.wl
    c = two_gpu_model.placement_cost(tw("c", 100, 4, hbm=10))
    hit = float(wl.access_models["c"].coverage(0.1))
    assert 0.3 < hit < 0.9
    assert c.loads[(FWD, f"{HOST}->{G0}")] == pytest.approx(100 * (1 - hit) * 16 / 0.5 / 20e9)
    # 10 hot rows of 16 B, plus the two int32 slot maps (8 B per row of the shard)
    assert c.memory[G0] == 10 * 16 + 8 * 100 and c.memory[HOST] == 90 * 16
    # remap, hot gather, cold gather, add, index work: 5 launches of 2 us
    assert c.loads[(FWD, f"{G0}:launch")] == pytest.approx(5 * 2e-6)


def test_fp16_halves_bytes(two_gpu_model):
    c32 = two_gpu_model.placement_cost(tw("a", 1000, 16))
    c16 = two_gpu_model.placement_cost(tw("a", 1000, 16, precision="fp16"))
    assert c16.memory[G0] == c32.memory[G0] / 2


def test_data_parallel_allreduce(two_gpu_model):
    p = Placement(table="c", sharding="data_parallel", shards=[
        Shard(device=g, rows=(0, 100), cols=(0, 4), hbm_rows=100, host_rows=0) for g in (G0, G1)])
    c = two_gpu_model.placement_cost(p)
    # ring of 2: each sends 2 * (1/2) * 100 x 4 x 4 B = 1600 B to the other
    assert c.loads[(AR, f"{G0}->node0/sw")] == pytest.approx(1600 / 100e9)
    assert (FX, f"{G0}->node0/sw") not in c.loads


def test_dense_compute_and_reserve(two_gpu_model):
    base = two_gpu_model.base_cost
    # bottom 4->8: 2*4*8 = 64; concat -> 8 + 16 + 8 + 4 = 36 -> top 36->1: 72; forward 136 FLOPs/sample
    assert two_gpu_model.dense.flops_per_sample == 136
    assert base.loads[(DENSE, f"{G0}:compute")] == pytest.approx(3 * 136 * 50 / 5e12)


def test_row_and_column_wise_spread_the_work(two_gpu_model):
    rw = Placement(table="a", sharding="row_wise", shards=[
        Shard(device=G0, rows=(0, 500), cols=(0, 16), hbm_rows=500, host_rows=0),
        Shard(device=G1, rows=(500, 1000), cols=(0, 16), hbm_rows=500, host_rows=0)])
    c = two_gpu_model.placement_cost(rw)
    # half the lookups per shard: 50 x 64 / 0.5 + all 100 partial sums x 64 B
    assert c.loads[(FWD, f"{G0}:hbm")] == pytest.approx((6400 + 6400) / 1000e9)
    cw = Placement(table="a", sharding="column_wise", shards=[
        Shard(device=G0, rows=(0, 1000), cols=(0, 8), hbm_rows=1000, host_rows=0),
        Shard(device=G1, rows=(0, 1000), cols=(8, 16), hbm_rows=1000, host_rows=0)])
    c = two_gpu_model.placement_cost(cw)
    assert c.loads[(FWD, f"{G1}:hbm")] == pytest.approx((100 * 32 / 0.5 + 100 * 32) / 1000e9)
    assert c.memory[G0] == c.memory[G1] == 1000 * 32


def test_cross_node_exchange_on_dgx_h100_2node():
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), wl.dense.dtype)
    model = CostModel(topo, wl)
    t = next(t for t in wl.tables if t.name == "t_items")
    c = model.placement_cost(tw("t_items", t.rows, t.dim))
    per_owner = wl.batch_size / 16 * 1 * t.dim * 4
    # 8 destinations on node1, all through node0/gpu0's rail NIC (nic0) at 50 GB/s
    assert c.loads[(FX, "node0/nic0->fabric")] == pytest.approx(8 * per_owner / 50e9)
    # 7 destinations on node0 over NVLink (450 GB/s x 0.8 efficiency)
    assert c.loads[(FX, "node0/gpu0->node0/nvswitch")] == pytest.approx(7 * per_owner / (450e9 * 0.8))
    # the NIC on the receiving side carries what node1/gpu3 receives
    assert c.loads[(FX, "fabric->node1/nic3")] == pytest.approx(per_owner / 50e9)
    lat = model.fixed_latency_s
    assert lat[FX] > lat[AR] / 100 > 0
