"""Train an export document under TorchRec's DistributedModelParallel and time its steps
(examples/train_torchrec.py prints them beside placer's prediction).

One spawned process per rank on this machine (``world_size`` of the document; one node): gloo on CPU
(``device`` cpu, placements rank:R/cpu) or NCCL on the node's GPUs (cuda, rank R on cuda:R), the process group
set up by dmp_check.init_group. Per rank:

- the model: the document's EmbeddingBagConfigs (TorchRec names, rows, dims, features, fp16) as an
  EmbeddingBagCollection at the document's ``module_path`` (built on the meta device; DMP materializes the
  shards) inside the workload's dense model (bottom MLP, interaction, top MLP: the model placer's prediction
  prices) as TorchRec's DLRM where it can express it, else placer's own DenseDLRM over the sharded tables' pooled
  features, or a linear head (``head``; dmp_models.py says which and why); BCE-with-logits loss;
- the plan: the document's ShardingPlan (plan_builder); embedding optimizer fused into TorchRec's kernels
  (the workload's ``optimizer``: exact SGD, exact Adagrad, exact row-wise Adagrad, or Adam on GPUs only; its
  learning rate), the dense part's optimizer under DDP (the workload's ``dense_optimizer`` for either DLRM, by
  default the embeddings'; SGD for the linear head);
- batches: the workload's global batch split over the ranks, dense features and ids drawn as placer's runner
  draws them (placer/runner/batches.py: the same hottest rows on every rank, each rank its own draws), labels
  learnable; a pool of up to 4 batches built before timing.

A step is forward, backward and optimizer step of one batch, timed per rank (after a CUDA synchronize on GPUs)
in seconds; ``train`` returns per step the slowest rank's time, the median of the steps after ``warmup``, the
losses and the model that ran. Needs torchrec (docs/torchrec.md has the CPU install line).
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from placer.runner.launcher import free_port
from placer.torchrec_io import dmp_models
from placer.torchrec_io.dmp_check import init_group, spawn_ranks

#: the workload's embedding optimizer -> FBGEMM's fused one (EmbOptimType name): adagrad is EXACT_ADAGRAD, one
#: state value per element as placer prices it (what torch.optim.Adagrad maps to in TorchRec's
#: optimizer_type_to_emb_opt_type), rowwise_adagrad EXACT_ROWWISE_ADAGRAD, one per row
_OPTIMIZERS = {"sgd": "EXACT_SGD", "adagrad": "EXACT_ADAGRAD", "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD",
               "adam": "ADAM"}


def train(doc: dict, wl, *, steps: int = 5, warmup: int = 1, batch_size: int | None = None, seed: int = 0,
          timeout_s: float = 300.0, head: str = "auto", profile_steps: int = 0) -> dict:
    """Train ``doc`` (an export document) for ``warmup`` + ``steps`` steps on the workload ``wl`` (a placer
    Workload); ``batch_size``: the global batch (default the workload's), split evenly over the ranks; ``head``:
    "auto" (TorchRec's DLRM of the workload's dense section where it can express it, else placer's DenseDLRM),
    "dlrm", "placer" or "linear" (dmp_models.choose; a forced head that cannot run is a ValueError);
    ``timeout_s``: the process group's timeout, seconds. Returns {world_size, backend, batch_size
    (global), step_times_s (per timed step, slowest rank, seconds), median_step_s, losses (rank 0, every step),
    dense_model (dmp_models.choose's description plus ``parameters``: the dense part's weights, elements, and
    ``dtype_run``: the dense precision run)}."""

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
    if backend == "gloo" and wl.optimizer.name == "adam":
        raise ValueError("optimizer adam: fbgemm-gpu-cpu's fused embedding kernels have no Adam on CPU (exact SGD, "
                         "Adagrad and row-wise Adagrad only); train this workload on GPUs, or with sgd, adagrad or "
                         "rowwise_adagrad on CPU")
    batch = int(batch_size or wl.batch_size)
    if batch < world:
        raise ValueError(f"global batch {batch} is smaller than the {world} ranks")
    model = dmp_models.choose(doc, wl, head)
    with tempfile.TemporaryDirectory(prefix="placer-train-") as tmp:
        job = {"doc": doc, "wl": wl.model_dump(mode="json"), "model": model, "world_size": world,
               "local_world_size": world, "steps": steps, "warmup": warmup, "batch_per_rank": batch // world,
               "seed": seed, "backend": backend, "port": free_port(), "out": tmp, "timeout_s": timeout_s,
               "profile_steps": profile_steps}
        spawn_ranks(_worker, job, world)
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(world)]
    times = [max(r["times"][i] for r in ranks) for i in range(len(ranks[0]["times"]))]
    timed = times[warmup:] or times
    return {"world_size": world, "backend": backend, "batch_size": batch // world * world,
            "step_times_s": timed, "median_step_s": statistics.median(timed), "losses": ranks[0]["losses"],
            "dense_model": {**model, "parameters": ranks[0]["dense_parameters"],
                            "dtype_run": ranks[0]["dtype_run"]},
            **({"ops_per_rank": [r["ops"] for r in ranks]} if profile_steps else {})}


# ---- inside each rank ------------------------------------------------------------------------------------


def _batches(wl, doc: dict, per_rank: int, rank: int, seed: int, count: int, device):
    """``count`` torchrec Batches of ``per_rank`` samples: dense features (fp32), ids from the workload's access
    models (the hottest rows the same on every rank) as a KeyedJaggedTensor keyed in the EmbeddingBagCollection's
    feature order, labels (0/1, fp32)."""
    import numpy as np
    import torch
    from torchrec.datasets.utils import Batch
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
        out.append(Batch(dense_features=torch.from_numpy(nb["dense"]).to(device), sparse_features=kjt.to(device),
                         labels=torch.from_numpy(nb["labels"]).to(device)))
    return out


def _train_rank(rank: int, job: dict, pg) -> dict:
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.types import ShardingEnv
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    from placer.specs.workload import Workload
    from placer.torchrec_io.plan_builder import embedding_bag_configs, sharding_plan

    doc, wl, spec = job["doc"], Workload.model_validate(job["wl"]), job["model"]
    gpu = job["backend"] == "nccl"
    device = torch.device(f"cuda:{rank % job['local_world_size']}" if gpu else "cpu")
    torch.manual_seed(job["seed"])
    ebc = EmbeddingBagCollection(tables=embedding_bag_configs(doc), device=torch.device("meta"))
    model, loss_of, dense_parameters = dmp_models.build(spec, doc, wl, ebc, device)
    sharder = EmbeddingBagCollectionSharder(fused_params={
        "optimizer": getattr(EmbOptimType, _OPTIMIZERS[wl.optimizer.name]), "learning_rate": wl.optimizer.lr})
    dmp = DistributedModelParallel(model, env=ShardingEnv.from_process_group(pg), plan=sharding_plan(doc),
                                   sharders=[sharder], device=device)
    opt = dmp_models.dense_optimizer(spec, dict(in_backward_optimizer_filter(dmp.named_parameters())), device)
    precision, dtype_run = dmp_models.dense_precision(spec, device)
    total = job["warmup"] + job["steps"]
    pool = _batches(wl, doc, job["batch_per_rank"], rank, job["seed"], min(total, 4), device)
    times, losses = [], []

    def one_step(batch):
        with precision:
            loss = loss_of(dmp, batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if gpu:
            torch.cuda.synchronize(device)
        return loss

    for step in range(total):
        t0 = time.perf_counter()
        loss = one_step(pool[step % len(pool)])
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    ops = _profile(one_step, pool, job["profile_steps"]) if job.get("profile_steps") else None
    return {"times": times, "losses": losses, "dense_parameters": dense_parameters, "dtype_run": dtype_run,
            "ops": ops}


def _profile(one_step, pool, steps: int) -> dict:
    """``steps`` more steps under torch.profiler (CPU activities): per operator its self CPU time per step
    (seconds) and calls per step, as ``{key: [self_s, calls]}``; a tensor op's key names its first caller that is
    not one (``"aten::cat <- DistributedDataParallel.forward"``), so that its time can go to its caller's phase."""
    from torch.profiler import ProfilerActivity, profile

    from placer.torchrec_io.dmp_phases import CALLED_BY

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(steps):
            one_step(pool[step % len(pool)])
    out: dict[str, list[float]] = {}
    for e in prof.events():
        key = e.name
        if key.startswith("aten::"):  # a tensor op is keyed by its caller too: "aten::cat <- ## ... wait() ##"
            caller = e.cpu_parent
            while caller is not None and caller.name.startswith("aten::"):
                caller = caller.cpu_parent
            key = f"{key}{CALLED_BY}{caller.name if caller is not None else '(top)'}"
        entry = out.setdefault(key, [0.0, 0.0])
        entry[0] += e.self_cpu_time_total * 1e-6 / steps
        entry[1] += 1 / steps
    return out


def _worker(rank: int, job: dict) -> None:
    import torch.distributed as dist

    pg = init_group(rank, job, job["backend"])
    try:
        result = _train_rank(rank, job, pg)
        (Path(job["out"]) / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()
