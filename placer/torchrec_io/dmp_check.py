"""Do exported plans train what they say? Each export document is run under TorchRec's DistributedModelParallel
on CPU (gloo over 127.0.0.1, one process per rank) and compared with an unsharded EmbeddingBagCollection.

For every document, in one spawned process group (so the torch/torchrec import and the group are paid once):

1. the workload's tables as an EmbeddingBagCollection (fp32, sum pooling) at the document's ``module_path``,
   sharded by DMP with the document's ShardingPlan (plan_builder.sharding_plan; placements must be
   ``rank:R/cpu``: ``placer export --torchrec --device cpu``), optimizer exact SGD (fused into the kernels;
   torch SGD for data_parallel tables, whose gradients DDP averages over ranks);
2. known weights (seeded per table) copied into every local shard by its offsets, and into an unsharded copy
   (with ``shift_rows`` k the shards get the rows k further down: a negative control that must fail);
3. ``steps`` training steps on a deterministic global batch split over the ranks (loss: the sum of the pooled
   outputs times fixed weights), the reference updated by hand the same way: the global batch's gradient
   over the world size (TorchRec divides the fused kernels' gradients by it in its all-to-all's backward,
   comm_ops.GRADIENT_DIVISION, as DDP averages data_parallel's); after each step and at the end
   the sharded forward of the rank's slice is compared with the reference's, and at the end every local shard
   with the reference's rows.

``run_check`` returns per document the largest forward and weight errors (``max_error``) and ``ok``
(``max_error <= tol``), or ``error`` with the exception's text when DMP refused the plan. Needs torchrec and
fbgemm-gpu-cpu (docs/torchrec.md has the install line); used by tests/test_torchrec_dmp.py.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
import zlib
from pathlib import Path

from placer.runner.launcher import free_port

#: equal to rounding: fp32 sums of a few products of O(0.1) numbers
DEFAULT_TOL = 1e-4


def spawn_ranks(worker, job: dict, nprocs: int) -> None:
    """``worker(rank, job)`` in ``nprocs`` spawned processes on this machine, joined. A rank whose worker
    returned leaves with os._exit(0) (_rank_main): TorchRec 1.8 / fbgemm-gpu-cpu on gloo abort about one
    process in ten in the interpreter's teardown ("terminate called without an active exception", after the
    rank wrote its results and destroyed its group, on two cores), which failed whole runs."""
    import torch.multiprocessing as mp

    mp.start_processes(_rank_main, args=(worker, job), nprocs=nprocs, join=True, start_method="spawn")


def _rank_main(rank: int, worker, job: dict) -> None:
    """Run one rank's ``worker``; when it returns, flush and end the process without the interpreter's
    teardown (an exception still propagates to torch's spawn, which reports it)."""
    worker(rank, job)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def tables_of(wl) -> list[dict]:
    """The harness's table list of a placer Workload: name, rows, dim, features (names) and pooling per feature."""
    feats: dict[str, list] = {}
    for f in wl.features or ():
        feats.setdefault(f.table, []).append((f.name, f.pooling_factor))
    out = []
    for t in wl.tables:
        fs = feats.get(t.name) or [(t.name, None)]
        out.append({"name": t.name, "rows": t.rows, "dim": t.dim, "features": [n for n, _ in fs],
                    "pooling": [max(1, round(p if p is not None else t.pooling_factor)) for _, p in fs]})
    return out


def run_check(documents: dict[str, dict], tables: list[dict], world_size: int, *, local_world_size: int | None = None,
              steps: int = 2, batch_per_rank: int = 8, shift_rows: int | dict = 0, lr: float = 0.1,
              tol: float = DEFAULT_TOL, timeout_s: float = 120.0) -> dict[str, dict]:
    """Run every document (name -> export document) under DMP on ``world_size`` gloo ranks; see the module
    docstring. ``local_world_size``: ranks per node (LOCAL_WORLD_SIZE, for table_row_wise); default the
    documents' ``local_world_size``, else ``world_size``. ``shift_rows``: rows the shards' weights are shifted
    by (a negative control), for every document or per document name."""
    if local_world_size is None:
        lws = {d.get("local_world_size") for d in documents.values()}
        local_world_size = lws.pop() if len(lws) == 1 and isinstance(next(iter(lws), None), int) else world_size
    with tempfile.TemporaryDirectory(prefix="placer-dmp-") as tmp:
        job = {"documents": documents, "tables": tables, "world_size": world_size,
               "local_world_size": local_world_size, "steps": steps, "batch_per_rank": batch_per_rank,
               "shift_rows": shift_rows if isinstance(shift_rows, dict) else {n: shift_rows for n in documents},
               "lr": lr, "port": free_port(), "out": tmp, "timeout_s": timeout_s}
        spawn_ranks(_worker, job, world_size)
        per_rank = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(world_size)]
    out = {}
    for name in documents:
        rs = [pr[name] for pr in per_rank]
        errors = [r["error"] for r in rs if r.get("error")]
        if errors:
            out[name] = {"ok": False, "error": errors[0], "max_error": None}
            continue
        m = max(r["max_error"] for r in rs)
        out[name] = {"ok": m <= tol, "max_error": m, "forward_error": max(r["forward_error"] for r in rs),
                     "weight_error": max(r["weight_error"] for r in rs)}
    return out


# ---- inside each rank ------------------------------------------------------------------------------------


def _seed(*parts) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def _full_weights(tables):
    import torch

    out = {}
    for t in tables:
        g = torch.Generator().manual_seed(_seed("weights", t["name"]))
        out[t["name"]] = (torch.rand(t["rows"], t["dim"], generator=g) - 0.5) * 0.2
    return out


def _global_batch(tables, batch: int, step: int):
    """feature -> (lengths [batch], ids) for the whole batch; ids cover each table's first and last rows and
    random ones."""
    import torch

    out = {}
    for t in tables:
        for f, pool in zip(t["features"], t["pooling"]):
            g = torch.Generator().manual_seed(_seed("batch", f, step))
            lengths = torch.randint(0, pool + 2, (batch,), generator=g)
            ids = torch.randint(0, t["rows"], (int(lengths.sum()),), generator=g)
            if len(ids) >= 2:
                ids[0], ids[-1] = t["rows"] - 1 - step, step
            out[f] = (lengths, ids.clamp(0, t["rows"] - 1))
    return out


def _kjt(batch, keys, lo: int, hi: int):
    import torch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    lengths, values = [], []
    for k in keys:
        ln, ids = batch[k]
        start = int(ln[:lo].sum())
        lengths.append(ln[lo:hi])
        values.append(ids[start:start + int(ln[lo:hi].sum())])
    return KeyedJaggedTensor.from_lengths_sync(keys=list(keys), values=torch.cat(values).long(),
                                               lengths=torch.cat(lengths).long())


def _projection(tables, batch: int, step: int) -> dict:
    import torch

    out = {}
    for t in tables:
        for f in t["features"]:
            g = torch.Generator().manual_seed(_seed("proj", f, step))
            out[f] = torch.rand(batch, t["dim"], generator=g) - 0.5
    return out


def attach_at_path(root, path: str, leaf):
    """Put ``leaf`` into the module ``root`` at the dotted ``path`` (e.g. sparse_arch.embedding_bag_collection),
    empty modules made for the parts before it; returns ``root``."""
    import torch

    *parents, last = path.split(".")
    cur = root
    for name in parents:
        child = torch.nn.Module()
        setattr(cur, name, child)
        cur = child
    setattr(cur, last, leaf)
    return root


def module_at_path(root, path: str):
    """Whatever sits in ``root`` at the dotted ``path`` now (after DMP: the sharded module it swapped in)."""
    for name in path.split("."):
        root = getattr(root, name)
    return root


def _module_at(path: str, leaf):
    """A module holding ``leaf`` at the dotted ``path``, whose forward calls whatever sits at that path (DMP
    swaps in the sharded module); ``leaf`` itself where the path is empty."""
    import torch

    if not path:
        return leaf

    class Root(torch.nn.Module):
        def forward(self, kjt):
            return module_at_path(self, path)(kjt)

    return attach_at_path(Root(), path, leaf)


def _local_pieces(value):
    """[(offsets, tensor)] of a state_dict value: ShardedTensor local shards, a DTensor's local piece, or a
    plain (replicated) tensor at (0, 0)."""
    if hasattr(value, "local_shards"):
        return [(tuple(s.metadata.shard_offsets), s.tensor) for s in value.local_shards()]
    if hasattr(value, "to_local"):
        raise TypeError("DTensor state_dict values are not read by this check")
    return [((0, 0), value)]


def _one_plan(name, doc, tables, ctx) -> dict:
    import torch
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.types import ShardingEnv
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from fbgemm_gpu.split_embedding_configs import EmbOptimType

    from placer.torchrec_io.plan_builder import parameter_sharding
    from torchrec.distributed.types import EmbeddingModuleShardingPlan, ShardingPlan

    rank, world, lr = ctx["rank"], ctx["world_size"], ctx["lr"]
    b = ctx["batch_per_rank"]
    configs = [EmbeddingBagConfig(name=t["name"], embedding_dim=t["dim"], num_embeddings=t["rows"],
                                  feature_names=list(t["features"]), pooling=PoolingType.SUM) for t in tables]
    keys = [f for t in tables for f in t["features"]]
    path = doc.get("module_path") or ""
    plan = ShardingPlan({path: EmbeddingModuleShardingPlan(
        {n: parameter_sharding(e["parameter_sharding"]) for n, e in doc["tables"].items()})})
    torch.manual_seed(0)
    model = _module_at(path, EmbeddingBagCollection(tables=configs, device=torch.device("cpu")))
    sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": lr})
    dmp = DistributedModelParallel(model, env=ShardingEnv.from_process_group(ctx["pg"]), plan=plan,
                                   sharders=[sharder], device=torch.device("cpu"))
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    opt = KeyedOptimizerWrapper(dense, lambda ps: torch.optim.SGD(ps, lr=lr)) if dense else None

    full = _full_weights(tables)
    shift = ctx["shift_rows"].get(name, 0)
    prefix = (path + "." if path else "") + "embedding_bags."
    sd = dmp.state_dict()
    with torch.no_grad():
        for t in tables:
            key = next(k for k in sd if k.endswith(prefix + t["name"] + ".weight"))
            src = torch.roll(full[t["name"]], -shift, dims=0) if shift else full[t["name"]]
            for (r0, c0), piece in _local_pieces(sd[key]):
                piece.copy_(src[r0:r0 + piece.shape[0], c0:c0 + piece.shape[1]])
    ref = EmbeddingBagCollection(tables=configs, device=torch.device("cpu"))
    with torch.no_grad():
        for t in tables:
            ref.embedding_bags[t["name"]].weight.copy_(full[t["name"]])

    fwd_err = 0.0
    lo, hi = rank * b, (rank + 1) * b
    for step in range(ctx["steps"] + 1):
        batch = _global_batch(tables, b * world, step)
        out = dmp(_kjt(batch, keys, lo, hi)).to_dict()
        ref_out = ref(_kjt(batch, keys, 0, b * world)).to_dict()
        for f in keys:
            fwd_err = max(fwd_err, float((out[f] - ref_out[f][lo:hi]).detach().abs().max()))
        if step == ctx["steps"]:
            break
        proj = _projection(tables, b * world, step)
        loss = sum((out[f] * proj[f][lo:hi]).sum() for f in keys)
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad()
        ref.zero_grad()
        sum((ref_out[f] * proj[f]).sum() for f in keys).backward()
        with torch.no_grad():
            for t in tables:
                w = ref.embedding_bags[t["name"]].weight
                w -= lr * w.grad / world
    w_err = 0.0
    sd = dmp.state_dict()
    with torch.no_grad():
        for t in tables:
            key = next(k for k in sd if k.endswith(prefix + t["name"] + ".weight"))
            want = ref.embedding_bags[t["name"]].weight
            for (r0, c0), piece in _local_pieces(sd[key]):
                if piece.numel():
                    w_err = max(w_err, float((piece - want[r0:r0 + piece.shape[0], c0:c0 + piece.shape[1]])
                                             .abs().max()))
    return {"forward_error": fwd_err, "weight_error": w_err, "max_error": max(fwd_err, w_err)}


def init_group(rank: int, job: dict, backend: str = "gloo"):
    """Join the process group of one spawned rank on 127.0.0.1 (``job``: port, world_size, local_world_size,
    timeout_s in seconds): the environment TorchRec reads (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, LOCAL_RANK) and
    ``backend`` (gloo on CPU, one torch thread per rank; nccl on the rank's GPU cuda:LOCAL_RANK). Returns the
    group (the world)."""
    import datetime

    import torch
    import torch.distributed as dist

    local = rank % job["local_world_size"]
    if backend == "nccl":
        torch.cuda.set_device(local)
    else:
        torch.set_num_threads(1)
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(job["port"]), "RANK": str(rank),
                       "WORLD_SIZE": str(job["world_size"]), "LOCAL_WORLD_SIZE": str(job["local_world_size"]),
                       "LOCAL_RANK": str(local)})
    dist.init_process_group(backend, rank=rank, world_size=job["world_size"],
                            timeout=datetime.timedelta(seconds=job["timeout_s"]))
    return dist.group.WORLD


def _worker(rank: int, job: dict) -> None:
    import torch.distributed as dist

    ctx = dict(job, rank=rank, pg=init_group(rank, job))
    results = {}
    try:
        for name, doc in job["documents"].items():
            try:
                results[name] = _one_plan(name, doc, job["tables"], ctx)
            except Exception as exc:  # noqa: BLE001 -- recorded per plan; the same on every rank
                results[name] = {"error": f"{type(exc).__name__}: {exc}",
                                 "traceback": traceback.format_exc(limit=8)}
            dist.barrier()
    finally:
        (Path(job["out"]) / f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()
