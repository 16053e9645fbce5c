"""Train an export document under TorchRec's DistributedModelParallel and time its steps
(examples/train_torchrec.py prints them beside placer's prediction).

One spawned process per rank on this machine (``world_size`` of the document; one node): gloo on CPU
(``device`` cpu, placements rank:R/cpu) or NCCL on the node's GPUs (cuda, rank R on cuda:R), the process group
set up by dmp_check.init_group. Per rank:

- the model: the document's EmbeddingBagConfigs (TorchRec names, rows, dims, features, fp16) as an
  EmbeddingBagCollection at the document's ``module_path`` (built on the meta device; DMP materializes the
  shards), and a linear head (``placer_head``: every pooled feature -> one logit), trained with BCE;
- the plan: the document's ShardingPlan (plan_builder); embedding optimizer fused into TorchRec's kernels
  (the workload's optimizer: exact SGD, row-wise Adagrad or Adam; its learning rate), the head's SGD under DDP;
- batches: the workload's global batch split over the ranks, ids drawn from each table's access model
  (placer/runner/batches.py: the same hottest rows on every rank, each rank its own draws), labels learnable;
  a pool of up to 4 batches built before timing.

A step is forward, backward and optimizer step of one batch, timed per rank (after a CUDA synchronize on GPUs)
in seconds; ``train`` returns per step the slowest rank's time, the median of the steps after ``warmup``, and
the losses. Needs torchrec (docs/torchrec.md has the CPU install line).
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from placer.runner.launcher import free_port
from placer.torchrec_io.dmp_check import attach_at_path, init_group, module_at_path, spawn_ranks

_OPTIMIZERS = {"sgd": "EXACT_SGD", "adagrad": "EXACT_ROWWISE_ADAGRAD", "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD",
               "adam": "ADAM"}


def train(doc: dict, wl, *, steps: int = 5, warmup: int = 1, batch_size: int | None = None, seed: int = 0,
          timeout_s: float = 300.0) -> dict:
    """Train ``doc`` (an export document) for ``warmup`` + ``steps`` steps on the workload ``wl`` (a placer
    Workload); ``batch_size``: the global batch (default the workload's), split evenly over the ranks. Returns
    {world_size, backend, batch_size (global), step_times_s (per timed step, slowest rank, seconds),
    median_step_s, losses (rank 0, every step)}."""

    world = int(doc["world_size"])
    lws = doc.get("local_world_size", world)
    if lws != world:
        raise ValueError(f"the plan spans {world} ranks on several nodes (local_world_size {lws}); this trainer "
                         "spawns ranks on one machine: run it per node under torchrun")
    backend = "gloo" if doc.get("device", "cuda") == "cpu" else "nccl"
    if backend == "nccl":
        import torch

        if torch.cuda.device_count() < world:
            raise ValueError(f"the plan needs {world} GPUs, this machine has {torch.cuda.device_count()}; "
                             "export with --device cpu to train on CPU over gloo")
    batch = int(batch_size or wl.batch_size)
    if batch < world:
        raise ValueError(f"global batch {batch} is smaller than the {world} ranks")
    with tempfile.TemporaryDirectory(prefix="placer-train-") as tmp:
        job = {"doc": doc, "wl": wl.model_dump(mode="json"), "world_size": world, "local_world_size": world,
               "steps": steps, "warmup": warmup, "batch_per_rank": batch // world, "seed": seed,
               "backend": backend, "port": free_port(), "out": tmp, "timeout_s": timeout_s}
        spawn_ranks(_worker, job, world)
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(world)]
    times = [max(r["times"][i] for r in ranks) for i in range(len(ranks[0]["times"]))]
    timed = times[warmup:] or times
    return {"world_size": world, "backend": backend, "batch_size": batch // world * world,
            "step_times_s": timed, "median_step_s": statistics.median(timed), "losses": ranks[0]["losses"]}


# ---- inside each rank ------------------------------------------------------------------------------------


def _net(path: str, ebc, width: int):
    """A module with ``ebc`` at the dotted ``path`` and a linear head (``placer_head``) over its pooled output."""
    import torch

    class Net(torch.nn.Module):
        def forward(self, kjt):
            return self.placer_head(module_at_path(self, path)(kjt).values()).squeeze(-1)

    net = attach_at_path(Net(), path, ebc)
    net.placer_head = torch.nn.Linear(width, 1)
    return net


def _batches(wl, doc: dict, per_rank: int, rank: int, seed: int, count: int, device):
    """``count`` (KeyedJaggedTensor, labels) pairs of ``per_rank`` samples: ids from the workload's access
    models (the hottest rows the same on every rank), keys in the EmbeddingBagCollection's feature order."""
    import numpy as np
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from placer.runner.batches import BatchGenerator

    gen = BatchGenerator(wl.model_copy(update={"batch_size": per_rank}), None, seed=seed)
    gen.rng = np.random.default_rng([seed, rank, 2**22])
    fnames = (doc.get("names") or {}).get("features") or {}
    order = [f for c in doc["embedding_bag_configs"] for f in c["feature_names"]]
    out = []
    for _ in range(count):
        nb = gen.make_numpy()
        per_feature = {}
        for t in wl.tables:
            ids, bags = nb["tables"][t.name]
            feats = gen.features_of[t.name]
            counts = np.bincount(bags, minlength=len(feats) * per_rank).reshape(len(feats), per_rank)
            start = 0
            for fi, f in enumerate(feats):
                n = int(counts[fi].sum())
                per_feature[fnames.get(f.name, f.name)] = (counts[fi], ids[start:start + n])
                start += n
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=order, values=torch.from_numpy(np.concatenate([per_feature[k][1] for k in order])).long(),
            lengths=torch.from_numpy(np.concatenate([per_feature[k][0] for k in order])).long())
        out.append((kjt.to(device), torch.from_numpy(nb["labels"]).to(device)))
    return out


def _train_rank(rank: int, job: dict, pg) -> dict:
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.types import ShardingEnv
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    from placer.specs.workload import Workload
    from placer.torchrec_io.plan_builder import embedding_bag_configs, sharding_plan

    doc, wl = job["doc"], Workload.model_validate(job["wl"])
    gpu = job["backend"] == "nccl"
    device = torch.device(f"cuda:{rank % job['local_world_size']}" if gpu else "cpu")
    configs = embedding_bag_configs(doc)
    width = sum(c.embedding_dim * len(c.feature_names) for c in configs)
    torch.manual_seed(job["seed"])
    model = _net(doc["module_path"], EmbeddingBagCollection(tables=configs, device=torch.device("meta")), width)
    lr = wl.optimizer.lr
    sharder = EmbeddingBagCollectionSharder(fused_params={
        "optimizer": getattr(EmbOptimType, _OPTIMIZERS[wl.optimizer.name]), "learning_rate": lr})
    dmp = DistributedModelParallel(model, env=ShardingEnv.from_process_group(pg), plan=sharding_plan(doc),
                                   sharders=[sharder], device=device)
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    opt = KeyedOptimizerWrapper(dense, lambda ps: torch.optim.SGD(ps, lr=lr))
    total = job["warmup"] + job["steps"]
    pool = _batches(wl, doc, job["batch_per_rank"], rank, job["seed"], min(total, 4), device)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    times, losses = [], []
    for step in range(total):
        kjt, labels = pool[step % len(pool)]
        t0 = time.perf_counter()
        loss = loss_fn(dmp(kjt), labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if gpu:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    return {"times": times, "losses": losses}


def _worker(rank: int, job: dict) -> None:
    import torch.distributed as dist

    pg = init_group(rank, job, job["backend"])
    try:
        result = _train_rank(rank, job, pg)
        (Path(job["out"]) / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()
