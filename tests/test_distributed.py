"""The runner over torch.distributed (gloo on CPU): the exchange layout, rank mapping, bad input, and the
equivalence tests: 2 and 4 processes train exactly like one process (same losses over the steps), and 2
processes reproduce the losses recorded from the per-shard runner at ab4ea90 (tests/data)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from placer.cli import main
from placer.errors import SpecError
from placer.plan import Placement, Plan, Shard, SpecRef
from placer.plan_check import check_plan
from placer.runner import RunConfig, Trainer
from placer.runner.distributed import free_port, run_distributed
from placer.runner.exchange import AllToAllLayout, ExchangeKey
from placer.runner.ranks import (check_distributable, node_needs, one_replica_per_rank, rank_map, rank_subplan,
                                 sample_slices)
from placer.runner.worker import DistEnv
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parent.parent
HW4 = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"
DGX = ROOT / "hardware_specs" / "dgx-h100.yaml"
TINY = ROOT / "workloads" / "tiny.yaml"
REFERENCE = ROOT / "tests" / "data" / "reference-losses-ab4ea90.json"
CPU = torch.device("cpu")
GPUS = [f"node0/gpu{i}" for i in range(4)]


def _shard(dev, rows, cols, hbm):
    return Shard(device=dev, rows=rows, cols=cols, hbm_rows=hbm, host_rows=rows[1] - rows[0] - hbm)


def mixed_placements(wl, gpus=GPUS):
    """Every kind at once: row_wise (plain and hot/cold split shards), column_wise, data_parallel on every GPU,
    table_wise (split, and a table with two features), host."""
    t = {x.name: x for x in wl.tables}
    g = gpus
    n = len(g)
    b = [0, 3000, 9000, 15000, 20000]
    return [
        Placement(table="t_users", sharding="row_wise", shards=[
            _shard(g[i % n], (b[i], b[i + 1]), (0, 32), (b[i + 1] - b[i]) // 2 if i % 2 else b[i + 1] - b[i])
            for i in range(4)]),
        Placement(table="t_items", sharding="column_wise", shards=[
            _shard(g[1 % n], (0, 5000), (0, 8), 5000), _shard(g[3 % n], (0, 5000), (8, 16), 5000)]),
        Placement(table="t_geo", sharding="data_parallel", shards=[_shard(x, (0, 300), (0, 8), 300) for x in g]),
        Placement(table="t_ads", sharding="table_wise", shards=[_shard(g[2 % n], (0, 8000), (0, 16), 2000)]),
        Placement(table="t_hist", sharding="host", shards=[_shard("node0/host", (0, 2000), (0, 16), 0)]),
        Placement(table="t_shared", sharding="table_wise", shards=[_shard(g[3 % n], (0, 1000), (0, 16), 1000)]),
    ]


def make_plan(wl, hw, placements):
    plan = Plan(hardware=SpecRef(name=hw.name, sha256=hw.sha256), workload=SpecRef(name=wl.name, sha256=wl.sha256),
                method="hand", placements=placements)
    check_plan(plan, Topology(hw, wl.dense.dtype), wl)
    assert {p.sharding for p in placements} == {"table_wise", "row_wise", "column_wise", "data_parallel", "host"}
    return plan


@pytest.fixture(scope="module")
def adagrad_tiny(tmp_path_factory):
    """tiny with Adagrad at a high learning rate: the losses move a lot from step to step, so a wrong gradient
    (a missing or doubled rank's share) shows."""
    text = TINY.read_text().replace("optimizer: {name: sgd, lr: 0.05}", "optimizer: {name: adagrad, lr: 0.1}")
    assert "adagrad" in text
    path = tmp_path_factory.mktemp("wl") / "tiny-adagrad.yaml"
    path.write_text(text)
    return path


# ---- no processes: the layout, the mapping, bad input ------------------------------------------------------

def test_sample_slices_cover_the_batch():
    for B, N in ((256, 4), (10, 3), (7, 7)):
        s = sample_slices(B, N)
        assert s[0][0] == 0 and s[-1][1] == B and all(a[1] == b[0] for a, b in zip(s, s[1:]))
        assert max(b - a for a, b in s) - min(b - a for a, b in s) <= 1


def test_exchange_layout_round_trip_without_processes():
    """Pack on every rank, move the buffers as all_to_all_single would, unpack: each owner gets its samples of
    every shard; the reverse direction, from the owners' leaves (one (n, dim) per feature; table b column-wise
    in two pieces, c with 3 features), brings every shard the gradients of all its samples and columns."""
    B, world = 10, 3
    slices = sample_slices(B, world)
    keys = [ExchangeKey("a", 0, 0, 2, 3), ExchangeKey("b", 0, 2, 1, 4), ExchangeKey("b", 1, 1, 1, 4, 4),
            ExchangeKey("c", 0, 0, 3, 1)]
    dims = {"a": 3, "b": 8, "c": 1}
    leaves = [("c", 1), ("a", 3), ("b", 8), ("c", 1), ("a", 3), ("c", 1)]  # features interleaved
    layouts = [AllToAllLayout(keys, slices, r, B, CPU, leaves=leaves) for r in range(world)]
    outs = {k: torch.randn(k.features * B, k.cols) for k in keys}
    sends = [lay.pack([outs[k] for k in lay.local]) for lay in layouts]
    for r, lay in enumerate(layouts):  # the collective: rank r receives the r-th split of every sender
        recv = torch.cat([sends[q].split(layouts[q].send_splits)[r] for q in range(world)])
        assert recv.numel() == sum(lay.recv_splits)
        a, b = slices[r]
        for k, got in zip(lay.recv_order, lay.unpack(recv)):
            torch.testing.assert_close(got, outs[k].view(k.features, B, k.cols)[:, a:b], rtol=0, atol=0)

    def leaf_grads(r):  # the owner's leaves hold the forward outputs of its samples: they must come back
        a, b = slices[r]
        seen: dict[str, int] = {}
        grads = []
        for t, d in leaves:
            f = seen[t] = seen.get(t, -1) + 1
            g = torch.zeros(b - a, d)
            for k in (k for k in keys if k.table == t):
                g[:, k.col0:k.col0 + k.cols] = outs[k].view(k.features, B, k.cols)[f, a:b]
            grads.append(g)
        assert [d for _, d in leaves] == [dims[t] for t, _ in leaves]
        return grads
    backs = [lay.pack_grads(leaf_grads(r)) for r, lay in enumerate(layouts)]
    for q, lay in enumerate(layouts):
        back = torch.cat([backs[r].split(layouts[r].recv_splits)[q] for r in range(world)])
        for k, g in zip(lay.local, lay.unpack_grads(back)):
            torch.testing.assert_close(g, outs[k], rtol=0, atol=0)
    assert layouts[1].bytes_out > 0 and layouts[0].bytes_out > 0
    assert layouts[0].send_index().dtype == torch.int32


def test_rank_map_folds_gpus_round_robin_and_hosts_go_to_the_first_gpu_rank():
    wl, hw = load_workload(TINY), load_hardware(DGX)
    topo = Topology(hw, wl.dense.dtype)
    m = rank_map(topo, 3, wl.batch_size)
    assert [m.rank_of(f"node0/gpu{i}") for i in range(8)] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert m.rank_of("node0/host") == 0 and m.gpus_per_rank == 3
    assert m.devices_of(1) == ["node0/gpu1", "node0/gpu4", "node0/gpu7"]
    two = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), wl.dense.dtype)
    m16 = rank_map(two, 16, wl.batch_size)
    assert m16.rank_of("node1/host") == 8 and m16.rank_of("node1/gpu0") == 8
    with pytest.raises(SpecError, match="at most 8"):
        rank_map(topo, 9, wl.batch_size)


def test_data_parallel_needs_a_replica_on_every_rank_and_subplans(tmp_path):
    wl, hw = load_workload(TINY), load_hardware(HW4)
    topo = Topology(hw, wl.dense.dtype)
    placements = mixed_placements(wl)
    placements[2] = Placement(table="t_geo", sharding="data_parallel", shards=[
        _shard(x, (0, 300), (0, 8), 300) for x in GPUS[:2]])
    plan = make_plan(wl, hw, placements)
    check_distributable(plan, rank_map(topo, 2, wl.batch_size))  # gpu0 -> rank 0, gpu1 -> rank 1
    with pytest.raises(SpecError, match="no replica on rank"):
        check_distributable(plan, rank_map(topo, 4, wl.batch_size))
    full = make_plan(wl, hw, mixed_placements(wl))
    m = rank_map(topo, 2, wl.batch_size)
    sub = rank_subplan(full, m, 0)
    assert {p.table for p in sub.placements} == {"t_users", "t_geo", "t_ads", "t_hist"}
    assert len(sub.placement_of("t_geo").shards) == 1
    # the plan a rank builds from: every shard index kept, one replica (the rank's first) per data-parallel table
    built = one_replica_per_rank(full, m, 1)
    assert [len(p.shards) for p in built.placements] == [4, 2, 1, 1, 1, 1]
    assert built.placement_of("t_geo").shards[0].device == "node0/gpu1"
    needs = node_needs(full, wl, topo, m, [0, 1], "cpu", 2)
    assert needs[0].device_total > 0 and needs[1].device_total > 0
    assert DistEnv.from_environ({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
                                ).node_ranks == [2, 3]


def test_cli_nproc_beyond_the_plans_gpus_is_bad_input(tmp_path, capsys):
    wl, hw = load_workload(TINY), load_hardware(HW4)
    make_plan(wl, hw, mixed_placements(wl)).write(tmp_path / "plan.json")
    code = main(["run", str(HW4), str(TINY), str(tmp_path / "plan.json"), "--device", "cpu", "--nproc", "5"])
    assert code == 2
    assert "at most 4 processes" in capsys.readouterr().err


# ---- several processes ---------------------------------------------------------------------------------------

STEPS, PHASE_STEPS, POOL, SEED = 10, 2, 4, 7


@pytest.fixture(scope="module")
def reference(adagrad_tiny, tmp_path_factory):
    """The plan file and one process's losses (the plain single-process Trainer) over the same steps: the
    timed steps, then the phase pass and the op pass (PHASE_STEPS each)."""
    wl, hw = load_workload(adagrad_tiny), load_hardware(HW4)
    plan = make_plan(wl, hw, mixed_placements(wl))
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    plan.write(path)
    tr = Trainer(plan, wl, CPU, Topology(hw, wl.dense.dtype), seed=SEED, pool_batches=POOL)
    tr.train(STEPS + 2 * PHASE_STEPS)
    losses = tr.loss_history()
    tr.close()
    return path, losses


@pytest.mark.parametrize("nproc", [2, 4])
def test_processes_train_exactly_like_one_process(nproc, reference, adagrad_tiny):
    plan_path, want = reference
    r = run_distributed(HW4, adagrad_tiny, plan_path, RunConfig(
        device="cpu", steps=STEPS, warmup=0, phase_steps=PHASE_STEPS, seed=SEED, pool_batches=POOL, threads=1),
        nproc)
    got = r["measured"]["loss_history"]
    assert len(got) == len(want) == STEPS + 2 * PHASE_STEPS
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert want[-1] < want[0] - 0.01  # the losses do move: the comparison has teeth
    assert r["nproc"] == nproc and r["backend"] == "gloo" and r["devices_folded"] == 4 // nproc
    m = r["measured"]
    assert m["throughput_samples_per_s"] > 0 and m["step_time_s"] > 0
    assert m["exchange"]["forward_all_to_all_s"] > 0 and m["exchange"]["backward_all_to_all_s"] > 0
    assert m["phases_s"]["forward_exchange"] > 0 and m["phases_s"]["gradient_allreduce"] > 0
    assert r["relative_error"] == pytest.approx(m["step_time_s"] / r["predicted"]["step_time_s"] - 1)
    assert [x["samples"] for x in r["ranks"]] == [256 // nproc] * nproc
    assert [x["replicas"] for x in r["ranks"]] == [1] * nproc  # one t_geo replica per rank
    assert sum(x["shards"] for x in r["ranks"]) == 4 + 2 + 1 + 1 + 1  # every non-replicated shard once
    # the op pass: measured beside priced per (kind, stream); every rank's groups and its own work show up
    ops = {(o["kind"], o["stream"]): o for o in m["ops"]}
    for kind in ("lookup", "sort", "segment_reduce", "update", "pack_grad", "all_to_all", "dense"):
        assert any(k == kind and o["measured_s"] > 0 for (k, _), o in ops.items()), kind
    assert ops[("all_reduce", "node0/gpu0:stream")]["measured_s"] > 0
    assert ops[("lookup", "node0/host:cpu")]["measured_s"] > 0 and ops[("lookup", "node0/host:cpu")]["priced_s"] > 0
    assert ops[("lookup", "node0/gpu3:stream")]["measured_s"] > 0  # measured on rank 3 mod N
    assert "node0/gpu3" in r["ranks"][3 % nproc]["plan_devices"]


def test_two_processes_reproduce_the_per_shard_runners_losses(tmp_path):
    """The adagrad "mixed" case recorded from the per-shard runner at ab4ea90 (one process): every placement
    kind at once (row-wise with hot/cold splits, column-wise, replicas, host, a table with two features), on 2
    processes of the grouped executor: the same 12 losses, rtol 1e-4."""
    case = next(c for c in json.loads(REFERENCE.read_text())["cases"]
                if c["optimizer"] == "adagrad" and any(p["sharding"] == "row_wise" for p in c["plan"]["placements"]))
    (tmp_path / "wl.yaml").write_text(case["workload"])
    plan = Plan.model_validate(case["plan"])
    plan.write(tmp_path / "plan.json")
    phase_steps = 2
    r = run_distributed(HW4, tmp_path / "wl.yaml", tmp_path / "plan.json", RunConfig(
        device="cpu", steps=case["steps"] - 2 * phase_steps, warmup=0, phase_steps=phase_steps, seed=case["seed"],
        pool_batches=case["pool_batches"], threads=1), 2)
    np.testing.assert_allclose(r["measured"]["loss_history"], case["losses"], rtol=1e-4, atol=1e-7)
    assert case["losses"][-1] < case["losses"][0]


def test_done_when_dgx_h100_folded_onto_two_processes(tmp_path, capsys):
    """The issue's command: an 8-GPU plan (the planner's, DGX H100) folded onto 2 CPU processes."""
    from placer.planner.solve import SolveConfig, solve

    wl, hw = load_workload(TINY), load_hardware(DGX)
    solve(Topology(hw, wl.dense.dtype), wl, SolveConfig(time_limit_s=10)).write(tmp_path / "plan.json")
    code = main(["run", str(DGX), str(TINY), str(tmp_path / "plan.json"), "--device", "cpu", "--nproc", "2",
                 "--steps", "5", "--warmup", "1", "--phase-steps", "1", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["nproc"] == 2 and out["devices_folded"] == 4 and out["measured"]["throughput_samples_per_s"] > 0
    for key in ("step_time_s", "phases_s", "peak_host_bytes", "loss_first", "loss_last"):
        assert key in out["measured"]
    assert out["predicted"]["throughput_samples_per_s"] > 0 and out["relative_error"] is not None


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not installed")
def test_torchrun_runs_the_module(tmp_path):
    wl, hw = load_workload(TINY), load_hardware(HW4)
    make_plan(wl, hw, mixed_placements(wl)).write(tmp_path / "plan.json")
    cmd = ["torchrun", "--nproc-per-node", "2", "--master-port", str(_free_port()), "-m", "placer.runner",
           str(HW4), str(TINY), str(tmp_path / "plan.json"), "--device", "cpu", "--steps", "2", "--warmup", "0",
           "--phase-steps", "1", "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout[p.stdout.index("{"):])
    assert out["nproc"] == 2 and out["backend"] == "gloo" and len(out["ranks"]) == 2


def _free_port():
    return free_port()


def test_module_entry_without_torchrun_is_placer_run(tmp_path):
    """``python -m placer.runner`` outside torchrun behaves as ``placer run`` (bad input: exit 2)."""
    p = subprocess.run([sys.executable, "-m", "placer.runner", str(HW4), str(TINY), str(tmp_path / "nope.json"),
                        "--device", "cpu"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 2 and "nope.json" in p.stderr
