"""Cost model: the step program's ops priced by hand on a 2-GPU, 3-table case (datasheet op costs), fused
groups' fixed costs paid once, a unified-memory (CPU) machine priced as one stream and one RAM, and
communication on dgx-h100-2node."""
from __future__ import annotations

import pytest

from placer.cost import AR, BWD, BX, DENSE, FWD, FX, CostModel
from placer.plan import Placement, Shard
from placer.program.opcosts import RateTable
from placer.program.ops import EVERY_GPU
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT, TWO_GPU_YAML

G0, G1, HOST = "node0/gpu0", "node0/gpu1", "node0/host"
S0, S1, CPU = f"{G0}:stream", f"{G1}:stream", f"{HOST}:cpu"
# datasheet defaults of the two-GPU spec (program/opcosts.py): launch 2 us, HBM 1000 GB/s x 0.5 gather
GATHER, STREAM, REDUCE, UPDATE, SORT = 500e9, 1000e9, 250e9, 250e9, 128 / 1000e9
HOST_GATHER = 20e9 * 0.5  # the PCIe link x host_read_efficiency
LAUNCH = 2e-6


def tw(table, rows, dim, gpu=G0, hbm=None, precision="fp32"):
    hbm = rows if hbm is None else hbm
    return Placement(table=table, sharding="table_wise", precision=precision,
                     shards=[Shard(device=gpu, rows=(0, rows), cols=(0, dim), hbm_rows=hbm, host_rows=rows - hbm)])


def test_table_wise_in_hbm_hand_computed(two_gpu_model):
    # table a: 1000 rows x 16 fp32 (64 B rows), 1 lookup/sample, batch 100 (L = 100), 2 GPUs (50 samples each)
    c = two_gpu_model.placement_cost(tw("a", 1000, 16))
    uniq = 1000 * (1 - (1 - 1 / 1000) ** 100)  # uniform: distinct rows among 100 draws
    # lookup: 100 rows of 64 B gathered (distinct and repeats alike at the datasheet rate) + 100 bags x 64 B written
    assert c.loads[(FWD, S0)] == pytest.approx(6400 / GATHER + 6400 / STREAM)
    # exchange: the shard packs its whole output (read + write), then 50 x 64 B go to gpu1 over the switch at
    # 100 GB/s: its stream waits for them (pack and transfer one after the other); the links carry them too
    assert c.loads[(FX, S0)] == pytest.approx(2 * 6400 / STREAM + 3200 / 100e9)
    assert c.loads[(FX, f"{G0}->node0/sw")] == pytest.approx(3200 / 100e9)
    assert c.loads[(FX, f"node0/sw->{G1}")] == pytest.approx(3200 / 100e9)
    assert c.loads[(BX, f"{G1}->node0/sw")] == pytest.approx(3200 / 100e9)
    # backward exchange: the shard unpacks 6400 B and packs its group's gradient; every owner's packing of its
    # 3200 B slice is in the base (every table's, test_owners_share_of_the_exchange)
    assert (BX, S1) not in c.loads
    assert c.loads[(BX, S0)] == pytest.approx((2 * 6400 + 2 * 6400) / STREAM + 3200 / 100e9)
    # backward: sort 100 ids, expand + sum 100 gradient rows of 64 B, read-modify-write the distinct rows (sgd)
    assert c.loads[(BWD, S0)] == pytest.approx(100 * SORT + 6400 / REDUCE + uniq * 64 / UPDATE, rel=1e-3)
    # the group's fixed costs, once: lookup 2 launches, sort 6, segment reduce 3, sgd update 4, pack 1
    fixed = c.once[next(iter(c.once))]
    assert fixed[(FWD, S0)] == pytest.approx(2 * LAUNCH)
    assert fixed[(BWD, S0)] == pytest.approx((6 + 3 + 4) * LAUNCH)
    assert fixed[(BX, S0)] == pytest.approx(LAUNCH)
    # memory on gpu0: rows, pooled outputs + gradients, backward workspace (64 + 16 B per lookup), input ids
    # (16 B per lookup), the shard's all-to-all buffers (2 x 6400; the owners' are in the base)
    assert c.memory[G0] == pytest.approx(64000 + 12800 + 100 * 80 + 1600 + 12800)
    assert G1 not in c.memory and HOST not in c.memory


def test_owners_share_of_the_exchange(two_gpu_model):
    """Every sample owner packs its samples' slice of every table's pooled gradients for the reverse
    all-to-all: once per table in the base; a row-wise table's S shards take S slices back (S - 1 more on
    every GPU), a replicated table none (one less)."""
    m = two_gpu_model
    per_owner = 50 * (16 + 8 + 4) * 4  # samples x the tables' widths (one feature each) x 4 B
    assert m.base_cost.loads[(BX, S1)] == pytest.approx(LAUNCH + 2 * per_owner / STREAM)
    rw = Placement(table="a", sharding="row_wise", shards=[
        Shard(device=G0, rows=(0, 500), cols=(0, 16), hbm_rows=500, host_rows=0),
        Shard(device=G1, rows=(500, 1000), cols=(0, 16), hbm_rows=500, host_rows=0)])
    owners = [op for op in m.placement_ops(rw) if op.kind == "all_to_all" and op.stream == EVERY_GPU]
    assert len(owners) == 1 and owners[0].seconds == pytest.approx(2 * 3200 / STREAM)  # S - 1 = 1 more slice
    dp = Placement(table="c", sharding="data_parallel", shards=[
        Shard(device=g, rows=(0, 100), cols=(0, 4), hbm_rows=100, host_rows=0) for g in (G0, G1)])
    dp_ops = [op for op in m.placement_ops(dp) if op.kind == "all_to_all"]
    assert len(dp_ops) == 1 and dp_ops[0].seconds == pytest.approx(-2 * 50 * 4 * 4 / STREAM)


def test_uvm_reads_cross_pcie(two_gpu_model):
    # table b: 4000 x 8 fp32 (32 B), pooling 2 -> 200 lookups; all rows in host memory, read by gpu1
    c = two_gpu_model.placement_cost(tw("b", 4000, 8, gpu=G1, hbm=0))
    assert c.loads[(FWD, f"{HOST}->{G1}")] == pytest.approx(6400 / 20e9)
    assert c.loads[(FWD, f"{HOST}:dram")] == pytest.approx(6400 / 100e9)
    # every lookup crosses the link at the host-gather rate (no cache in front of PCIe)
    assert c.loads[(FWD, S1)] == pytest.approx(6400 / HOST_GATHER + 100 * 32 / STREAM)
    assert c.memory[HOST] == 4000 * 32
    assert G1 in c.memory and c.memory[G1] < 4000 * 32  # only outputs and workspace on the GPU


def test_host_cpu_lookup(two_gpu_model):
    p = Placement(table="a", sharding="host", shards=[Shard(device=HOST, rows=(0, 1000), cols=(0, 16),
                                                            hbm_rows=0, host_rows=1000)])
    c = two_gpu_model.placement_cost(p)
    # the CPU gathers at cpu_gather_GBps (10 GB/s) and writes 100 bags x 64 B at the DRAM rate (100 GB/s)
    assert c.loads[(FWD, CPU)] == pytest.approx(6400 / 10e9 + 6400 / 100e9)
    # pooled results to each GPU: 50 x 64 B over PCIe at 20 GB/s, a copy on each GPU's stream
    assert c.loads[(FX, f"{HOST}->{G0}")] == pytest.approx(3200 / 20e9)
    assert c.loads[(FX, S1)] == pytest.approx(3200 / 20e9)
    assert c.loads[(BX, f"{G1}->{HOST}")] == pytest.approx(3200 / 20e9)
    assert c.memory[HOST] == pytest.approx(64000 + 12800 + 100 * 80 + 1600)
    # the CPU group's fixed costs: the host's ops (5 us each) and a copy per GPU (one launch)
    fixed = c.once[next(iter(c.once))]
    assert fixed[(FWD, CPU)] == pytest.approx(2 * 5e-6)
    assert fixed[(FX, S0)] == fixed[(FX, S1)] == pytest.approx(LAUNCH)


def test_hot_split_uses_coverage(two_gpu_model):
    wl = two_gpu_model.wl
    c = two_gpu_model.placement_cost(tw("c", 100, 4, hbm=10))
    hit = float(wl.access_models["c"].coverage(0.1))
    assert 0.3 < hit < 0.9
    # the cold part's lookups cross the link; the hot part reads HBM only
    assert c.loads[(FWD, f"{HOST}->{G0}")] == pytest.approx(100 * (1 - hit) * 16 / 20e9)
    # 10 hot rows of 16 B on the GPU, 90 in host memory with the shard's slot map (4 B per row, input step)
    rows_on_gpu = c.memory[G0] - (2 * 2 * 100 * 16 + 100 * (16 + 16) + 100 * 16 + 2 * 1600)
    assert rows_on_gpu == pytest.approx(10 * 16)
    assert c.memory[HOST] == pytest.approx(90 * 16 + 4 * 100)
    assert len(c.once) == 2  # a member of gpu0's hbm group and of its uvm group


def test_fp16_halves_row_bytes(two_gpu_model):
    c32 = two_gpu_model.builder.placement_buffers(tw("a", 1000, 16))
    c16 = two_gpu_model.builder.placement_buffers(tw("a", 1000, 16, precision="fp16"))
    rows = lambda bufs: next(b.bytes for b in bufs if b.purpose == "rows and optimizer state")
    assert rows(c16) == rows(c32) / 2


def test_data_parallel_allreduce(two_gpu_model):
    p = Placement(table="c", sharding="data_parallel", shards=[
        Shard(device=g, rows=(0, 100), cols=(0, 4), hbm_rows=100, host_rows=0) for g in (G0, G1)])
    c = two_gpu_model.placement_cost(p)
    # ring of 2: each sends 2 * (1/2) * 100 x 4 x 4 B = 1600 B to the other
    assert c.loads[(AR, f"{G0}->node0/sw")] == pytest.approx(1600 / 100e9)
    assert (FX, f"{G0}->node0/sw") not in c.loads
    # each replica: a dense gradient of the table, streamed through the update after the all-reduce
    assert c.memory[G0] == c.memory[G1]
    assert len(c.once) == 2 and all((AR, s) in f for f, s in zip(c.once.values(), (S0, S1)))


def test_dense_ops_are_the_traced_model(two_gpu_model):
    base = two_gpu_model.base_ops
    dense = [op for op in base if op.phase == DENSE and op.stream in (S0, EVERY_GPU)]
    gemms = [op for op in dense if op.kind == "gemm"]
    # bottom 4->8 and top 36->1 over 50 samples: forward GEMMs, weight gradients, the top's input gradient
    shapes = sorted(op.sizes["shape"] for op in gemms)
    assert (1, 50, 4, 8) in shapes and (1, 50, 36, 1) in shapes
    assert len(gemms) == 5
    for op in gemms:  # on a GPU each op is priced at its work; the host issues them meanwhile
        b, m, k, n = op.sizes["shape"]
        assert op.seconds == pytest.approx(2 * b * m * k * n / (10e12 * 0.5))
    host = [op for op in dense if "issue_s" in op.sizes]
    assert len(host) == 1
    issue, work = host[0].sizes["issue_s"], host[0].sizes["work_s"]
    assert work == pytest.approx(sum(op.seconds for op in dense if op is not host[0]))
    assert issue >= len(gemms) * LAUNCH  # every GEMM's fixed cost at least
    # the dense phase lasts the longer of the host's issuing and the device's work
    assert two_gpu_model.base_cost.loads[(DENSE, S0)] == pytest.approx(max(issue, work))
    assert two_gpu_model.base_cost.loads[(DENSE, S0)] == pytest.approx(sum(op.seconds for op in dense))


def test_row_and_column_wise_spread_the_work(two_gpu_model):
    rw = Placement(table="a", sharding="row_wise", shards=[
        Shard(device=G0, rows=(0, 500), cols=(0, 16), hbm_rows=500, host_rows=0),
        Shard(device=G1, rows=(500, 1000), cols=(0, 16), hbm_rows=500, host_rows=0)])
    c = two_gpu_model.placement_cost(rw)
    # half the lookups per shard, all 100 partial sums written
    assert c.loads[(FWD, S0)] == pytest.approx(3200 / GATHER + 6400 / STREAM)
    # every owner adds the two partial sums of its 50 samples: one add, read 2 x 3200 B, write 3200 B
    combine = [op for op in two_gpu_model.placement_ops(rw) if op.kind == "combine"]
    assert combine[0].stream == EVERY_GPU and two_gpu_model.placement_cost(rw).loads[(FX, S1)] > 0
    assert len(combine) == 1 and combine[0].seconds == pytest.approx(LAUNCH + 3 * 3200 / STREAM)
    cw = Placement(table="a", sharding="column_wise", shards=[
        Shard(device=G0, rows=(0, 1000), cols=(0, 8), hbm_rows=1000, host_rows=0),
        Shard(device=G1, rows=(0, 1000), cols=(8, 16), hbm_rows=1000, host_rows=0)])
    c = two_gpu_model.placement_cost(cw)
    assert c.loads[(FWD, S1)] == pytest.approx(100 * 32 / GATHER + 100 * 32 / STREAM)
    assert c.memory[G0] == c.memory[G1]


def test_a_groups_fixed_costs_are_paid_once(two_gpu_model):
    """Two tables of the same width in gpu0's HBM share one fused group: one lookup launch, not two."""
    from placer.simulate import phase_times, total_cost

    one = two_gpu_model.placement_cost(tw("a", 1000, 16))
    plan = type("P", (), {"placements": [tw("a", 1000, 16), tw("c", 100, 4, hbm=100)]})()
    both = total_cost(two_gpu_model, plan)
    assert len(both.once) == 2  # widths 16 and 4: two groups
    same = type("P", (), {"placements": [tw("a", 1000, 16), tw("a", 1000, 16)]})()
    twice = total_cost(two_gpu_model, same)
    assert len(twice.once) == 1
    fixed = next(iter(one.once.values()))[(FWD, S0)]
    assert twice.total_loads()[(FWD, S0)] == pytest.approx(
        two_gpu_model.base_cost.loads.get((FWD, S0), 0.0) + 2 * one.loads[(FWD, S0)] + fixed)
    assert phase_times(two_gpu_model, twice)[0][FWD] >= 2 * one.loads[(FWD, S0)] + fixed


def test_unified_memory_is_one_stream_and_one_ram(tmp_path, three_tables_path):
    """CPU processes standing in for GPUs: host tables run on the first 'GPU''s stream, rows 'in HBM' and in
    host memory fill the same RAM, nothing is copied between them, and host rows read like device rows."""
    text = TWO_GPU_YAML.replace("count: 2", "count: 1").replace("    switches: [sw]\n", "    unified_memory: true\n")
    text = text.replace("      - {kind: nvlink, between: [gpu*, sw], bw_GBps: 100, latency_us: 1}\n", "")
    path = tmp_path / "cpu.yaml"
    path.write_text(text)
    wl = load_workload(three_tables_path)
    topo = Topology(load_hardware(path), wl.dense.dtype)
    model = CostModel(topo, wl)
    assert set(topo.memories) == {HOST} and topo.memory_of(G0) == HOST
    assert topo.stream_of(HOST) == S0 and CPU not in topo.resources
    host = model.placement_cost(Placement(table="a", sharding="host", shards=[
        Shard(device=HOST, rows=(0, 1000), cols=(0, 16), hbm_rows=0, host_rows=1000)]))
    hbm = model.placement_cost(tw("a", 1000, 16))
    uvm = model.placement_cost(tw("a", 1000, 16, hbm=0))
    assert all(r in (S0, f"{HOST}:dram") for (_, r) in host.total_loads())
    assert not any(op.kind.startswith("copy") for op in model.placement_ops(tw("a", 1000, 16, hbm=0)))
    assert uvm.loads[(FWD, S0)] == pytest.approx(hbm.loads[(FWD, S0)])  # one RAM, one gather rate
    assert set(hbm.memory) == set(uvm.memory) == {HOST}
    assert hbm.memory[HOST] == pytest.approx(uvm.memory[HOST])
    # the host's op costs are the device's: the same cores
    assert topo.op_costs(HOST) is topo.op_costs(G0) or topo.op_costs(HOST).fixed_s == topo.op_costs(G0).fixed_s


def test_a_unified_nodes_host_table_is_exchanged_by_its_first_rank(three_tables_path):
    """On CPU ranks (a unified node of 2 'GPUs') the runner looks up a host table on the node's first rank and
    sends its output in that rank's all-to-all: priced as that rank's table-wise shard's exchange (it was priced
    free, and the ILP chose host tables for it)."""
    wl = load_workload(three_tables_path)
    topo = Topology(load_hardware(ROOT / "hardware_specs/local-cpu-procs.yaml"), wl.dense.dtype)
    model = CostModel(topo, wl)
    assert topo.exchange_sender(HOST) == G0 and topo.exchange_sender(G1) == G1
    host = Placement(table="a", sharding="host", shards=[
        Shard(device=HOST, rows=(0, 1000), cols=(0, 16), hbm_rows=0, host_rows=1000)])

    def exchange(p):
        return sorted((op.phase, op.stream, op.seconds, op.traffic) for op in model.placement_ops(p)
                      if op.kind == "all_to_all")
    assert exchange(host) and exchange(host) == exchange(tw("a", 1000, 16))
    assert {stream for _, stream, _, _ in exchange(host)} == {S0}


def test_rate_tables_interpolate_in_log_size():
    t = RateTable({16: 1.0, 64: 3.0})
    assert t(16) == 1.0 and t(64) == 3.0 and t(32) == pytest.approx(2.0)
    assert t(4) == 1.0 and t(1024) == 3.0


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
