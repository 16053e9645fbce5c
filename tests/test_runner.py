"""Runner on CPU: every placement kind trains, sparse updates touch only looked-up rows, split/sharded tables
equal plain ones, the memory check refuses what does not fit, the CLI prints measured next to predicted."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from placer.cli import main
from placer.errors import InfeasibleError
from placer.plan import Placement, Plan, Shard, SpecRef
from placer.plan_check import check_plan
from placer.runner import RunConfig, Trainer, run_plan, scale_plan
from placer.program.dense import trace
from placer.runner.memory import MemoryNeeds, check_memory, estimate_needs
from placer.runner.optim import SparseRowOptimizer, aggregate
from placer.specs import load_hardware, load_workload
from placer.specs.workload import DenseSpec, OptimizerSpec
from placer.topology import Topology

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parent.parent
HW1 = ROOT / "hardware_specs" / "h100-pcie-host.yaml"
HW4 = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"
TINY = ROOT / "workloads" / "tiny.yaml"
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny():
    return load_workload(TINY)


@pytest.fixture(scope="module")
def hw4():
    return load_hardware(HW4)


# ---- plans by hand --------------------------------------------------------------------------------------------

GPUS = [f"node0/gpu{i}" for i in range(4)]
HOST = "node0/host"


def tw(t, gpu=GPUS[0], hbm=None, precision="fp32"):
    k = t.rows if hbm is None else hbm
    return Placement(table=t.name, sharding="table_wise", precision=precision,
                     shards=[Shard(device=gpu, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=k, host_rows=t.rows - k)])


def host(t, precision="fp32"):
    return Placement(table=t.name, sharding="host", precision=precision,
                     shards=[Shard(device=HOST, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)])


def row_wise(t, pieces=4, hot=1.0):
    bounds = [0, t.rows // 7, t.rows // 2, (3 * t.rows) // 4, t.rows][: pieces + 1] if pieces == 4 else \
        [t.rows * i // pieces for i in range(pieces + 1)]
    shards = []
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        k = int(round(hot * (b - a)))
        shards.append(Shard(device=GPUS[i], rows=(a, b), cols=(0, t.dim), hbm_rows=k, host_rows=b - a - k))
    return Placement(table=t.name, sharding="row_wise", shards=shards)


def column_wise(t, pieces=4):
    w = t.dim // pieces
    return Placement(table=t.name, sharding="column_wise", shards=[
        Shard(device=GPUS[i], rows=(0, t.rows), cols=(i * w, (i + 1) * w), hbm_rows=t.rows, host_rows=0)
        for i in range(pieces)])


def uneven_columns(t):
    """Three column pieces of unequal widths, one split hot/cold, one all in host memory (a grid of row and
    column cuts has no sharding label: check_plan refuses it)."""
    w = t.dim // 4
    return Placement(table=t.name, sharding="column_wise", shards=[
        Shard(device=GPUS[0], rows=(0, t.rows), cols=(0, w), hbm_rows=t.rows // 2, host_rows=t.rows - t.rows // 2),
        Shard(device=GPUS[1], rows=(0, t.rows), cols=(w, 3 * w), hbm_rows=t.rows, host_rows=0),
        Shard(device=GPUS[2], rows=(0, t.rows), cols=(3 * w, t.dim), hbm_rows=0, host_rows=t.rows)])


def data_parallel(t, n=4):
    return Placement(table=t.name, sharding="data_parallel", shards=[
        Shard(device=GPUS[i], rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows, host_rows=0) for i in range(n)])


def make_plan(wl, hw, placements, method="hand"):
    plan = Plan(hardware=SpecRef(name=hw.name, sha256=hw.sha256), workload=SpecRef(name=wl.name, sha256=wl.sha256),
                method=method, placements=placements)
    check_plan(plan, Topology(hw, wl.dense.dtype), wl)
    return plan


def uniform_plan(wl, hw, make):
    return make_plan(wl, hw, [make(t) for t in wl.tables])


KINDS = {
    "table_wise_hbm": lambda t: tw(t),
    "host": lambda t: host(t),
    "uvm": lambda t: tw(t, hbm=0),
    "hot_cold_split": lambda t: tw(t, hbm=max(1, t.rows // 10)),
    "fp16": lambda t: tw(t, hbm=t.rows // 2, precision="fp16"),
    "row_wise": lambda t: row_wise(t, hot=0.5),
    "column_wise": lambda t: column_wise(t, 2 if t.dim % 4 else 4),
    "data_parallel": lambda t: data_parallel(t),
}


def fp16_ok(wl):
    tables = [t.model_copy(update={"allow_fp16": True}) for t in wl.tables]
    return wl.model_copy(update={"tables": tables})


def all_table_weights(trainer):
    return {t.name: trainer.table_weights(t.name).clone() for t in trainer.wl.tables}


# ---- every placement kind trains ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_placement_kind_trains(kind, tiny, hw4):
    wl = fp16_ok(tiny) if kind == "fp16" else tiny
    plan = uniform_plan(wl, hw4, KINDS[kind])
    r = run_plan(hw4, wl, plan, RunConfig(device="cpu", steps=3, warmup=1, phase_steps=1, pool_batches=2,
                                          threads=1))
    m = r["measured"]
    assert m["step_time_s"] > 0 and m["throughput_samples_per_s"] > 0
    assert math.isfinite(m["loss_first"]) and math.isfinite(m["loss_last"])
    assert set(m["phases_s"]) == set(r["predicted"]["phases_s"])
    assert r["host_read_mechanism"] == "cpu"
    assert r["relative_error"] == pytest.approx(m["step_time_s"] / r["predicted"]["step_time_s"] - 1)
    if kind == "data_parallel":
        assert m["phases_s"]["gradient_allreduce"] > 0


def test_fp16_tables_are_stored_in_fp16(tiny, hw4):
    wl = fp16_ok(tiny)
    plan = make_plan(wl, hw4, [tw(t, hbm=t.rows // 2, precision="fp16") if i % 2 else host(t, "fp16")
                               for i, t in enumerate(wl.tables)])
    tr = Trainer(plan, wl, CPU, Topology(hw4), pool_batches=1)
    assert tr.groups and all(g.weight_cpu.dtype == torch.float16 for g in tr.groups.values())
    before = all_table_weights(tr)
    loss = tr.step(tr.pool[0])
    assert torch.isfinite(loss)
    after = all_table_weights(tr)
    assert any(not torch.equal(before[n], after[n]) for n in before)


def test_dcnv2_concat_and_fractional_pooling_train(tiny, hw4):
    for interaction in ({"kind": "dcnv2", "layers": 2, "rank": 8}, {"kind": "concat"}):
        dense = DenseSpec.model_validate({"num_dense_features": 5, "bottom_mlp": [12, 16],
                                          "interaction": interaction, "top_mlp": [8, 1]})
        tables = [t.model_copy(update={"pooling_factor": 1.5}) if t.name == "t_geo" else t for t in tiny.tables]
        wl = tiny.model_copy(update={"dense": dense, "tables": tables, "features": None,
                                     "optimizer": OptimizerSpec(name="adam", lr=0.01)})
        plan = make_plan(wl, hw4, [tw(t, hbm=t.rows // 3) for t in wl.tables])
        tr = Trainer(plan, wl, CPU, Topology(hw4), pool_batches=1)
        n_params = sum(p.numel() for p in tr.model.parameters())
        assert n_params == trace(wl, 4, "cpu").params  # the runner runs the model the cost model traces
        for _ in range(2):
            assert torch.isfinite(tr.step(tr.pool[0]))


def test_dot_model_matches_cost_model_shapes(tiny):
    from placer.program.dense_model import DenseDLRM
    m = DenseDLRM(tiny)
    assert sum(p.numel() for p in m.parameters()) == trace(tiny, 4, "cpu").params
    x = torch.randn(4, tiny.dense.num_dense_features)
    embs = [torch.randn(4, d) for d in m.dims]  # dims 32/16/8 differ from the bottom output (16): zero-padded
    assert m(x, embs).shape == (4,)


# ---- learning and sparse updates ------------------------------------------------------------------------------

def test_loss_falls_on_the_learnable_target(tiny, hw4):
    wl = tiny.model_copy(update={"optimizer": OptimizerSpec(name="adagrad", lr=0.05)})
    plan = make_plan(wl, hw4, [KINDS[k](t) for k, t in zip(
        ["hot_cold_split", "host", "uvm", "table_wise_hbm", "row_wise", "column_wise"], wl.tables)])
    tr = Trainer(plan, wl, CPU, Topology(hw4), pool_batches=8)
    tr.train(50)
    h = tr.loss_history()
    assert np.mean(h[-10:]) < 0.8 * np.mean(h[:5]), h


@pytest.mark.parametrize("opt", ["sgd", "adagrad", "rowwise_adagrad", "adam"])
def test_only_touched_rows_change(opt, tiny, hw4):
    wl = tiny.model_copy(update={"optimizer": OptimizerSpec(name=opt, lr=0.1)})
    kinds = ["hot_cold_split", "host", "uvm", "row_wise", "column_wise", "table_wise_hbm"]
    if opt in ("sgd", "adagrad"):  # a zero gradient leaves a dense-updated replica row unchanged for these
        kinds[-1] = "data_parallel"
    plan = make_plan(wl, hw4, [KINDS[k](t) for k, t in zip(kinds, wl.tables)])
    tr = Trainer(plan, wl, CPU, Topology(hw4), pool_batches=1)
    before = all_table_weights(tr)
    batch = tr.pool[0]
    tr.step(batch)
    after = all_table_weights(tr)
    for name in before:
        changed = set(np.flatnonzero((before[name] != after[name]).any(dim=1).numpy()).tolist())
        touched = set(np.unique(batch.table_ids[name]).tolist())
        assert changed, name
        assert changed <= touched, (name, sorted(changed - touched)[:5])


# ---- equivalences ---------------------------------------------------------------------------------------------

def _embed(wl, hw, placements, host_read="auto", seed=3):
    tr = Trainer(make_plan(wl, hw, placements), wl, CPU, Topology(hw), seed=seed, host_read=host_read,
                 pool_batches=1)
    return tr, tr.embed(tr.pool[0])


@pytest.mark.parametrize("host_read", ["auto", "cpu_gather_copy"])
def test_hot_cold_remap_equals_one_plain_table(host_read, tiny, hw4):
    plain, want = _embed(tiny, hw4, [tw(t) for t in tiny.tables])
    split, got = _embed(tiny, hw4, [tw(t, hbm=max(1, t.rows // 7)) if i % 2 == 0 else tw(t, hbm=0)
                                    for i, t in enumerate(tiny.tables)], host_read=host_read)
    assert split.host.mechanism == ("cpu" if host_read == "auto" else "cpu_gather_copy")
    assert any(s.member.part == "hot" for g in split.groups.values() for s in g.slots)
    for a, b in zip(want, got):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # same logical weights, and after one step they stay equal
    plain.step(plain.pool[0])
    split.step(split.pool[0])
    for t in tiny.tables:
        torch.testing.assert_close(plain.table_weights(t.name), split.table_weights(t.name), rtol=1e-5, atol=1e-6)


def test_sharded_tables_equal_unsharded(tiny, hw4):
    t = {x.name: x for x in tiny.tables}
    unsharded, want = _embed(tiny, hw4, [tw(x) for x in tiny.tables])
    sharded, got = _embed(tiny, hw4, [
        row_wise(t["t_users"], hot=0.3), column_wise(t["t_items"]), host(t["t_geo"]), uneven_columns(t["t_ads"]),
        data_parallel(t["t_hist"]), row_wise(t["t_shared"], pieces=3, hot=0.0)])
    for a, b in zip(want, got):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    unsharded.step(unsharded.pool[0])
    sharded.step(sharded.pool[0])
    for name in t:
        torch.testing.assert_close(unsharded.table_weights(name), sharded.table_weights(name),
                                   rtol=1e-5, atol=1e-6)


# ---- optimizers -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sgd", "adagrad", "adam"])
def test_sparse_optimizer_matches_torch_on_touched_rows(name):
    torch.manual_seed(0)
    w0 = torch.randn(50, 6)
    ids = torch.tensor([3, 7, 3, 49, 0, 7, 7])
    rows_g = torch.randn(len(ids), 6)
    opt = SparseRowOptimizer(name, 0.1)
    from placer.runner.optim import state_shapes
    states = [torch.zeros(s) for s in state_shapes(name, 50, 6)]
    w = w0.clone()
    for _ in range(2):
        opt.new_step()
        uniq, summed = aggregate(ids, rows_g)
        opt.update(w, states, uniq, summed)
    ref = torch.nn.Parameter(w0.clone())
    torch_opt = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1), "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
                 "adam": lambda p: torch.optim.SparseAdam(p, lr=0.1)}[name]([ref])
    for _ in range(2):
        dense_grad = torch.zeros(50, 6).index_add_(0, ids, rows_g)
        ref.grad = dense_grad.to_sparse() if name == "adam" else dense_grad
        torch_opt.step()
    touched = torch.unique(ids)
    torch.testing.assert_close(w[touched], ref.detach()[touched], rtol=1e-5, atol=1e-6)
    untouched = torch.ones(50, dtype=torch.bool)
    untouched[touched] = False
    assert torch.equal(w[untouched], w0[untouched])


def test_rowwise_adagrad_keeps_one_state_value_per_row():
    opt = SparseRowOptimizer("rowwise_adagrad", 0.5)
    w = torch.ones(10, 4)
    s = torch.zeros(10)
    opt.update(w, [s], torch.tensor([2]), torch.full((1, 4), 2.0))
    assert s[2] == pytest.approx(4.0) and s.sum() == pytest.approx(4.0)
    assert torch.allclose(w[2], torch.full((4,), 1 - 0.5 * 2 / 2))


# ---- memory check, scaling, CLI -------------------------------------------------------------------------------

def test_memory_check_refuses_what_does_not_fit(tiny, hw4):
    plan = uniform_plan(tiny, hw4, KINDS["hot_cold_split"])
    need = estimate_needs(plan, tiny, Topology(hw4), "cpu", 2)
    assert need.host["rows and optimizer state"] > 0 and need.device["rows and optimizer state"] > 0
    assert need.device["backward workspace"] > 0 and need.host["slot map"] > 0
    check_memory(need, CPU, host_available=1e12)
    with pytest.raises(InfeasibleError, match="does not fit this machine"):
        check_memory(need, CPU, host_available=1e6)
    cuda_need = MemoryNeeds(device={"tables": 2e9}, host={"tables": 1e6})
    with pytest.raises(InfeasibleError, match="GPU memory"):
        check_memory(cuda_need, torch.device("cuda", 0), host_available=1e12, device_free=1e9)


HUGE_HW = """
schema_version: 1
name: huge-host
templates:
  box:
    gpus: {model: g, count: 1, hbm_GiB: 80, hbm_bw_GBps: 2000, hbm_gather_efficiency: 0.3,
           peak_TFLOPs: {fp32: 50}, compute_efficiency: 0.5}
    host: {dram_GiB: 1000000, dram_bw_GBps: 100, cpu_cores: 16, cpu_gather_GBps: 8}
    links: [{kind: pcie, between: [gpu0, host], bw_GBps: 32}]
nodes: [{template: box}]
"""

HUGE_WL = """
schema_version: 1
name: huge-table
batch_size: 64
tables: [{name: big, rows: 100000000000, dim: 16}]
dense: {num_dense_features: 4, bottom_mlp: [16], top_mlp: [1]}
"""


def test_run_refuses_an_oversized_plan_with_exit_3(tmp_path, capsys):
    hw_path, wl_path, plan_path = tmp_path / "hw.yaml", tmp_path / "wl.yaml", tmp_path / "plan.json"
    hw_path.write_text(HUGE_HW)
    wl_path.write_text(HUGE_WL)
    hw, wl = load_hardware(hw_path, allow_implausible=True), load_workload(wl_path)  # 1e6 GiB of DRAM: meant
    make_plan(wl, hw, [host(wl.tables[0])]).write(plan_path)
    code = main(["run", str(hw_path), str(wl_path), str(plan_path), "--device", "cpu", "--steps", "2",
                 "--allow-implausible"])
    assert code == 3
    err = capsys.readouterr().err
    assert "does not fit this machine" in err and "MemAvailable" in err and "--scale" in err


def test_scale_plan_keeps_hot_fractions_and_checks(tiny, hw4):
    plan = make_plan(tiny, hw4, [row_wise(t, hot=0.25) if i % 2 else tw(t, hbm=t.rows // 5)
                                 for i, t in enumerate(tiny.tables)])
    small = tiny.with_scaled_rows(10)
    scaled = scale_plan(plan, small)
    check_plan(scaled, Topology(hw4, small.dense.dtype), small, check_hashes=False)
    for old, new in zip(plan.placements, scaled.placements):
        assert len(old.shards) == len(new.shards)
        for a, b in zip(old.shards, new.shards):
            assert b.num_rows >= 1 and b.cols == a.cols and b.device == a.device
            assert abs(b.hbm_rows / b.num_rows - a.hbm_rows / a.num_rows) <= 1.0 / b.num_rows + 1e-9


def test_cli_run_json_prints_measured_and_predicted(tmp_path, capsys):
    from placer.planner.solve import SolveConfig, solve
    wl = load_workload(TINY)
    hw = load_hardware(HW1)
    plan = solve(Topology(hw, wl.dense.dtype), wl, SolveConfig(time_limit_s=10))
    plan.write(tmp_path / "plan.json")
    code = main(["run", str(HW1), str(TINY), str(tmp_path / "plan.json"), "--device", "cpu", "--steps", "4",
                 "--warmup", "1", "--phase-steps", "1", "--threads", "1", "--json", "--scale", "2"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measured"]["throughput_samples_per_s"] > 0
    assert out["predicted"]["throughput_samples_per_s"] > 0
    assert out["host_read_mechanism"] == "cpu" and out["scale"] == 2 and out["steps"] == 4
    for key in ("step_time_s", "phases_s", "peak_device_bytes", "peak_host_bytes"):
        assert key in out["measured"]
    assert out["relative_error"] == pytest.approx(out["measured"]["step_time_s"]
                                                  / out["predicted"]["step_time_s"] - 1)
    assert out["device_name"].startswith("CPU") and out["torch_version"] == torch.__version__
    # an H100 spec run on a CPU: said plainly; the per-op comparison is there
    assert "describes GPUs" in out["hardware_note"] and "calibrate" in out["hardware_note"]
    kinds = {row["kind"] for row in out["measured"]["ops"]}
    assert {"lookup", "sort", "segment_reduce", "update", "dense", "pack_grad"} <= kinds


UNIFIED_HW = """
schema_version: 1
name: cpu-box
templates:
  box:
    unified_memory: true
    gpus: {model: CPU process, count: 1, hbm_GiB: 1, hbm_reserve_GiB: 0.5, hbm_bw_GBps: 12, hbm_gather_efficiency: 0.2,
           peak_TFLOPs: {fp32: 0.2}, compute_efficiency: 0.8}
    host: {dram_GiB: 8, dram_reserve_GiB: 1, dram_bw_GBps: 12, cpu_cores: 2, cpu_gather_GBps: 2}
    links: [{kind: pcie, between: [gpu0, host], bw_GBps: 6}]
nodes: [{template: box}]
"""


def test_cpu_run_on_a_unified_spec_compares_like_with_like(tmp_path, tiny):
    """A CPU run planned for a unified-memory spec (the CPU process as its one 'GPU'): no note, every op on
    the one stream, CPU-looked-up tables and 'HBM' tables alike, no copies priced or run."""
    hw_path = tmp_path / "cpu.yaml"
    hw_path.write_text(UNIFIED_HW)
    hw = load_hardware(hw_path)
    plan = make_plan(tiny, hw, [host(t) if i % 2 else tw(t, gpu="node0/gpu0", hbm=t.rows // 3)
                                for i, t in enumerate(tiny.tables)])
    r = run_plan(hw, tiny, plan, RunConfig(device="cpu", steps=3, warmup=1, phase_steps=1, pool_batches=1, threads=1))
    assert r["hardware_note"] is None
    streams = {row["stream"] for row in r["measured"]["ops"]}
    assert streams == {"node0/gpu0:stream"}
    assert not any(row["kind"].startswith("copy") for row in r["measured"]["ops"])


def test_cli_run_human_table(tmp_path, capsys, tiny, hw4):
    plan = uniform_plan(tiny, hw4, KINDS["row_wise"])
    plan.write(tmp_path / "plan.json")
    code = main(["run", str(HW4), str(TINY), str(tmp_path / "plan.json"), "--device", "cpu", "--steps", "2",
                 "--warmup", "0", "--phase-steps", "1", "--threads", "1"])
    assert code == 0
    out = capsys.readouterr().out
    assert "measured" in out and "predicted" in out and "throughput" in out and "4 GPUs" in out


def test_cli_run_bad_device_is_bad_input(tmp_path, capsys, tiny, hw4):
    plan = uniform_plan(tiny, hw4, KINDS["host"])
    plan.write(tmp_path / "plan.json")
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    assert main(["run", str(HW4), str(TINY), str(tmp_path / "plan.json"), "--device", "cuda"]) == 2


def test_host_tables_on_a_worker_thread_give_the_same_training(tiny, hw4):
    """GPU runs do CPU-lookup tables on a worker thread (overlap); forced here on the CPU, results must match."""
    placements = [host(t) if i % 2 else tw(t, hbm=t.rows // 4) for i, t in enumerate(tiny.tables)]
    plan = make_plan(tiny, hw4, placements)
    runs = []
    for overlap in (False, True):
        tr = Trainer(plan, tiny, CPU, Topology(hw4), seed=5, pool_batches=2, overlap_host=overlap)
        tr.train(3)
        runs.append((tr.loss_history(), all_table_weights(tr)))
        tr.close()
    assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-6)
    for name in runs[0][1]:
        torch.testing.assert_close(runs[0][1][name], runs[1][1][name])


def test_host_memory_helpers_on_cpu():
    from placer.runner.hostmem import PAGE, HostMemory, _aligned_empty, _CudaArray
    t = _aligned_empty((123, 7), torch.float16)
    assert t.shape == (123, 7) and t.dtype == torch.float16 and t.data_ptr() % PAGE == 0
    cai = _CudaArray(t.data_ptr(), tuple(t.shape), t.dtype, t).__cuda_array_interface__
    assert cai["shape"] == (123, 7) and cai["typestr"] == "<f2" and cai["data"] == (t.data_ptr(), False)
    mem = HostMemory(CPU)
    h = mem.zeros((4, 3), torch.float32, gpu_readable=True)
    assert mem.mechanism == "cpu" and h.dev is h.cpu and float(h.cpu.abs().sum()) == 0.0
    forced = HostMemory(CPU, "cpu_gather_copy")
    assert forced.mechanism == "cpu_gather_copy" and forced.empty((2, 2), torch.float32, gpu_readable=True).dev is None
    with pytest.raises(ValueError):
        HostMemory(CPU, "magic")


def test_cli_run_graph_on_says_what_ran(tmp_path, capsys, tiny, hw4):
    """--graph on: the HBM and UVM groups run the graph-safe step (runner/graph_step.py's segments, as plain calls
    on a CPU), the host groups eagerly, and the JSON says so, and that nothing was captured on a CPU; the losses are
    the eager run's (to fp32 rounding); auto runs the eager step on a CPU and says why; with --nproc, and for a plan
    with replicated tables, on is refused (exit 2)."""
    import json

    plan = uniform_plan(tiny, hw4, KINDS["row_wise"])
    plan = plan.model_copy(update={"placements": plan.placements[:-1] + [host(tiny.tables[-1])]})
    plan.write(tmp_path / "plan.json")
    args = ["run", str(HW4), str(TINY), str(tmp_path / "plan.json"), "--device", "cpu", "--steps", "3",
            "--warmup", "1", "--phase-steps", "1", "--threads", "1", "--pool", "1", "--json"]
    results = {}
    for mode in ("off", "on", "auto"):
        assert main(args + ["--graph", mode]) == 0
        results[mode] = json.loads(capsys.readouterr().out)
    on = results["on"]["graph"]
    assert on["mode"] == "on" and on["captured"] is False and "CUDA" in on["not_captured_why"]
    assert on["graph_safe_groups"] and all("hbm" in g or "uvm" in g for g in on["graph_safe_groups"])
    assert on["eager_groups"] and all("[cpu " in g for g in on["eager_groups"])
    assert on["eager_host_groups"] == on["eager_groups"] and on["steps"] == 4 and on["static_pool_bytes"] > 0
    assert results["off"]["graph"]["graph_safe_groups"] == []
    auto = results["auto"]["graph"]
    assert auto["graph_safe_groups"] == [] and not auto["captured"] and "CUDA" in auto["not_captured_why"]
    floor = results["on"]["floor"]  # the spec's GPUs at datasheet rates: no ratio for a CPU run
    assert 0 < floor["step_time_s"] < results["on"]["predicted"]["step_time_s"] and floor["runner_over_floor"] is None
    for key in ("loss_first", "loss_last"):
        got, want = (results[m]["measured"][key] for m in ("on", "off"))
        assert got is not None and got == pytest.approx(want, rel=1e-5), key
    replicas = uniform_plan(tiny, hw4, KINDS["data_parallel"])
    replicas.write(tmp_path / "replicas.json")
    assert main(args[:3] + [str(tmp_path / "replicas.json")] + args[4:] + ["--graph", "on"]) == 2
    assert "replica" in capsys.readouterr().err
    assert main(args + ["--graph", "on", "--nproc", "2"]) == 2
