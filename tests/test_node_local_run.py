"""Node-local tables run (issue 39, item 3): ``placer run --nproc N --device cpu`` executes a plan with a
``replicated: per_node`` table, the N ranks grouped into nodes as the hardware spec groups its GPUs
(runner/node_ranks.py). On tests/data/cpu-2node.yaml (2 nodes of 1 rank) with a tiny two-table workload: the run
reports a step time beside the prediction; the two replicas drift apart while the dense model stays the same on
both ranks; one step of each replica (and of the plain row-wise table) equals the hand computation. The exchange
of a replica split over a node's ranks is checked without processes (2 nodes x 2 ranks)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from placer.cli import main
from placer.plan import load_plan
from placer.program.dense_model import DenseDLRM
from placer.runner.batches import BatchGenerator
from placer.runner.distributed import free_port
from placer.runner.exchange import AllToAllLayout, ExchangeKey
from placer.runner.groups import init_rows
from placer.runner.ranks import sample_slices
from placer.specs import load_workload

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parent.parent
HW = ROOT / "tests" / "data" / "cpu-2node.yaml"
LR = 0.5  # chosen: large, so that one step's update is far above fp32 noise

WORKLOAD = {
    "schema_version": 1, "name": "nl-two", "description": "one node-local table and one plain one (a test)",
    "batch_size": 32, "optimizer": {"name": "sgd", "lr": LR},
    "table_defaults": {"dim": 8, "dtype": "fp32", "pooling_factor": 2, "access": {"kind": "zipf", "alpha": 1.1}},
    "tables": [{"name": "t_local", "rows": 64, "node_local": True}, {"name": "t_plain", "rows": 48}],
    "features": [{"name": "f_local", "table": "t_local"}, {"name": "f_plain", "table": "t_plain"}],
    "dense": {"num_dense_features": 4, "bottom_mlp": [16, 8], "interaction": {"kind": "dot"}, "top_mlp": [8, 1],
              "dtype": "fp32"},
}

#: one rank of a run built by hand: trains ``steps`` steps of its pool, saves its tables' rows and dense model
RANK_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    import torch.distributed as dist
    from placer.runner.rank_trainer import RankTrainer
    from placer.runner.run import RunConfig
    from placer.runner.worker import DistEnv, prepare_distributed
    hw, wl, plan, out, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    torch.set_num_threads(1)
    env = DistEnv.from_environ()
    config = RunConfig(device="cpu", steps=steps, warmup=0, seed=0, pool_batches=steps)
    topo, wl, plan, _, rmap, _ = prepare_distributed(hw, wl, plan, config, env.world)
    dist.init_process_group("gloo", rank=env.rank, world_size=env.world)
    tr = RankTrainer(plan, wl, torch.device("cpu"), topo, rmap, env.rank, seed=0, pool_batches=steps)
    for i in range(steps):
        tr.step(tr.pool[i])
    rows = {(s.member.table, s.member.shard): g.member_rows(s) for g in tr.groups.values() for s in g.slots}
    dense = {k: v.detach().clone() for k, v in tr.model.state_dict().items()}
    torch.save({"rows": rows, "dense": dense, "samples": tr.table_samples}, os.path.join(out, f"rank{env.rank}.pt"))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)
""")


def _shard(device, rows, dim=8):
    return {"device": device, "rows": list(rows), "cols": [0, dim], "hbm_rows": rows[1] - rows[0], "host_rows": 0}


def plan_doc(local: bool = True) -> dict:
    """t_local table-wise on each node's gpu0 (node-local: a replica per node; else one copy on node0/gpu0),
    t_plain row-wise over both nodes' GPUs."""
    shards = [_shard("node0/gpu0", (0, 64))] + ([_shard("node1/gpu0", (0, 64))] if local else [])
    return {"hardware": {"name": "cpu-2node"}, "workload": {"name": "nl-two"}, "method": "manual", "placements": [
        {"table": "t_local", "sharding": "table_wise", "shards": shards,
         **({"replicated": "per_node"} if local else {})},
        {"table": "t_plain", "sharding": "row_wise",
         "shards": [_shard("node0/gpu0", (0, 24)), _shard("node1/gpu0", (24, 48))]}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("nl-run")
    (d / "wl.yaml").write_text(yaml.safe_dump(WORKLOAD))
    (d / "plan.json").write_text(json.dumps(plan_doc()))
    (d / "shared.json").write_text(json.dumps(plan_doc(local=False)))
    (d / "rank.py").write_text(RANK_SCRIPT)
    return d


def run_ranks(d: Path, steps: int) -> list[dict]:
    """Both ranks of the node-local plan, trained ``steps`` steps by RANK_SCRIPT; their saved states."""
    out = d / f"out{steps}"
    out.mkdir()
    port = str(free_port())
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        procs.append(subprocess.Popen([sys.executable, str(d / "rank.py"), str(HW), str(d / "wl.yaml"),
                                       str(d / "plan.json"), str(out), str(steps)], env=env))
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def test_runs_and_reports_a_step_time_beside_the_prediction(files, capsys):
    code = main(["run", str(HW), str(files / "wl.yaml"), str(files / "plan.json"), "--device", "cpu", "--nproc", "2",
                 "--steps", "3", "--warmup", "1", "--phase-steps", "1", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["measured"]["step_time_s"] > 0 and result["predicted"]["step_time_s"] > 0


def test_one_process_or_ranks_across_nodes_are_refused(files, capsys):
    args = ["run", str(HW), str(files / "wl.yaml"), str(files / "plan.json"), "--device", "cpu", "--steps", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "node-local" in err and "--nproc" in err and "placements[0].replicated" in err
    assert main(args + ["--nproc", "1"]) == 2
    err = capsys.readouterr().err
    assert "several nodes" in err and "--nproc 2" in err


def test_replicas_drift_apart_while_the_dense_model_stays_the_same(files):
    r0, r1 = run_ranks(files, 3)
    assert r0["samples"] == {"t_local": (0, 16)} and r1["samples"] == {"t_local": (16, 32)}
    a, b = r0["rows"][("t_local", 0)], r1["rows"][("t_local", 0)]
    assert a.shape == b.shape == (64, 8) and (a - b).abs().max() > 1e-5  # fp32 noise: ~1e-8
    for k, v in r0["dense"].items():
        torch.testing.assert_close(v, r1["dense"][k], rtol=0, atol=0)
    assert set(r0["rows"]) == {("t_local", 0), ("t_plain", 0)} and set(r1["rows"]) == {("t_local", 0), ("t_plain", 1)}


def _hand_step(d: Path) -> dict[str, torch.Tensor]:
    """One SGD step from the initial weights, by hand: each node's replica of t_local with the gradient of the
    global loss (sum of BCE over the samples / B) over its node's samples only, t_plain over all samples."""
    wl = load_workload(d / "wl.yaml")
    plan = load_plan(d / "plan.json")
    batch = BatchGenerator(wl, plan, 0).make_numpy()
    B = wl.batch_size
    torch.manual_seed(0)
    model = DenseDLRM(wl)
    w0 = {t.name: torch.cat([blk for _, blk in init_rows(0, wl.table_index[t.name], t.rows, t.dim, (0, t.rows),
                                                         (0, t.dim), torch.device("cpu"))]) for t in wl.tables}

    def grads(a: int, b: int) -> dict[str, torch.Tensor]:
        w = {k: v.clone().requires_grad_(True) for k, v in w0.items()}
        leaves = []
        for t in ("t_local", "t_plain"):
            ids, bags = (torch.from_numpy(x) for x in batch["tables"][t])
            pooled = torch.zeros(B, 8).index_add(0, bags % B, w[t][ids])
            leaves.append(pooled[a:b])
        logits = model(torch.from_numpy(batch["dense"][a:b]), leaves)
        loss = F.binary_cross_entropy_with_logits(logits.float(), torch.from_numpy(batch["labels"][a:b]),
                                                  reduction="sum") / B
        loss.backward()
        return {k: v.grad for k, v in w.items()}

    g0, g1, g_all = grads(0, 16), grads(16, 32), grads(0, B)
    assert (g0["t_local"] - g1["t_local"]).abs().max() > 1e-5  # the nodes' samples touch different rows
    return {"node0": w0["t_local"] - LR * g0["t_local"], "node1": w0["t_local"] - LR * g1["t_local"],
            "plain": w0["t_plain"] - LR * g_all["t_plain"], "init": w0["t_local"]}


def test_one_step_of_each_replica_equals_the_hand_computation(files):
    r0, r1 = run_ranks(files, 1)
    want = _hand_step(files)
    assert (want["node0"] - want["init"]).abs().max() > 1e-4  # the step moved the rows: the check has teeth
    torch.testing.assert_close(r0["rows"][("t_local", 0)], want["node0"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r1["rows"][("t_local", 0)], want["node1"], rtol=1e-5, atol=1e-6)
    plain = torch.cat([r0["rows"][("t_plain", 0)], r1["rows"][("t_plain", 1)]])
    torch.testing.assert_close(plain, want["plain"], rtol=1e-5, atol=1e-6)


def test_exchange_of_a_replica_split_over_its_nodes_ranks_without_processes():
    """2 nodes x 2 ranks: a plain shard on rank 0 reaches every rank; node k's replica, row-wise over its two
    ranks, reaches only them, pooling its node's samples; the reverse direction brings each shard back the
    gradients of exactly its node's samples."""
    B, world = 12, 4
    slices = sample_slices(B, world)
    node = {0: (0, 6), 1: (6, 12)}
    keys_of = {n: [ExchangeKey("p", 0, 0, 1, 2)] + [ExchangeKey("l", i, 2 * n + i, 2, 2, 0, node[n])
                                                     for i in range(2)] for n in (0, 1)}
    layouts = [AllToAllLayout(keys_of[r // 2], slices, r, B, torch.device("cpu"), leaves=[("p", 2), ("l", 2),
                                                                                          ("l", 2)])
               for r in range(world)]
    outs = {(k.table, k.index, k.owner): torch.randn(k.features * (k.samples[1] - k.samples[0] if k.samples else B),
                                                     k.cols)
            for lay in layouts for k in lay.local}
    sends = [lay.pack([outs[(k.table, k.index, k.owner)] for k in lay.local]) for lay in layouts]
    for r, lay in enumerate(layouts):
        recv = torch.cat([sends[q].split(layouts[q].send_splits)[r] for q in range(world)])
        assert recv.numel() == sum(lay.recv_splits)
        a, b = slices[r]
        for k, got in zip(lay.recv_order, lay.unpack(recv)):
            s0, s1 = k.samples or (0, B)
            full = outs[(k.table, k.index, k.owner)].view(k.features, s1 - s0, k.cols)
            torch.testing.assert_close(got, full[:, a - s0:b - s0], rtol=0, atol=0)
        assert {(k.table, k.owner) for k in lay.recv_order if k.table == "l"} == {("l", 2 * (r // 2)),
                                                                                  ("l", 2 * (r // 2) + 1)}
    grads = [[torch.full((b - a, 2), float(r)) for _ in range(3)] for r, (a, b) in enumerate(slices)]
    backs = [lay.pack_grads(g) for lay, g in zip(layouts, grads)]
    for q, lay in enumerate(layouts):
        back = torch.cat([backs[r].split(layouts[r].recv_splits)[q] for r in range(world)])
        for k, g in zip(lay.local, lay.unpack_grads(back)):
            s0, s1 = k.samples or (0, B)
            owner = np.repeat([r for r, (a, b) in enumerate(slices) if s0 <= a and b <= s1],
                              [b - a for a, b in slices if s0 <= a and b <= s1])
            want = torch.from_numpy(np.tile(owner, k.features)).float().view(-1, 1).expand(-1, 2)
            torch.testing.assert_close(g, want, rtol=0, atol=0)
