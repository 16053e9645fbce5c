"""The model a DistributedModelParallel training run trains around the sharded tables (dmp_train.py).

``choose`` (plain Python, no torch) decides it from the export document and the workload; ``build`` makes it
inside a rank. Two kinds:

- ``torchrec_dlrm``: TorchRec's own DLRM (torchrec.models.dlrm) from the workload's ``dense`` section, the model
  placer's prediction prices (program/dense_model.py's DenseDLRM): the same number of dense features, bottom MLP
  (ReLU after every layer), interaction and top MLP (ReLU between layers, the last the logit), BCE-with-logits
  loss, the workload's optimizer and learning rate for the dense parameters (rowwise_adagrad as plain Adagrad,
  as placer's runner), the dense part at the workload's ``dense.dtype`` (placer's runner's autocast). The
  interaction ``dot`` is TorchRec's ``DLRM`` (pairwise dot products of the bottom MLP's output and every pooled
  feature: V(V-1)/2 values for V = features + 1, as placer's), ``dcnv2`` is ``DLRM_DCN`` (``layers`` low-rank
  cross layers of rank ``rank`` over the concatenation: placer's LowRankCross). TorchRec's DLRM classes ask for
  more than placer's DenseDLRM: every table one embedding dim (the pooled features are stacked as (B, F, D)),
  a bottom MLP ending at that dim, a top MLP of at least two layers, and have no ``concat`` interaction.
  At the document's ``module_path`` ending in ``sparse_arch.embedding_bag_collection`` (where DLRM keeps its
  tables): ``model.`` before it is TorchRec's DLRMTrain (``--module-path dlrm-train``), nothing before it DLRM
  itself, any other prefix DLRM at that path in a wrapper module.
- ``linear_head``: the tables and one linear layer over every pooled feature (-> one logit), SGD at the
  workload's learning rate, fp32: the trainer's model before issue 51, for ``--head linear`` or where TorchRec's
  DLRM cannot express the workload's dense model (``why`` says which rule failed).
"""
from __future__ import annotations

#: where TorchRec's DLRM keeps its EmbeddingBagCollection, relative to the DLRM module
DLRM_TABLES = "sparse_arch.embedding_bag_collection"
HEADS = ("dlrm", "linear")
_CLASSES = {"dot": "DLRM", "dcnv2": "DLRM_DCN"}


def _dlrm_obstacles(doc: dict, wl) -> list[str]:
    """Why TorchRec's DLRM classes cannot build the workload's dense model on the document's tables (empty: they
    can)."""
    d = wl.dense
    dims = sorted({int(c["embedding_dim"]) for c in doc["embedding_bag_configs"]})
    why = []
    if d.interaction.kind not in _CLASSES:
        why.append(f"dense.interaction is {d.interaction.kind!r}: TorchRec's DLRM classes have dot (DLRM), "
                   "DCN (DLRM_DCN) and projection (DLRM_Projection) interactions, no concat")
    if len(dims) > 1:
        why.append(f"the tables' embedding dims differ ({', '.join(map(str, dims))}): TorchRec's DLRM stacks the "
                   "pooled features as one (batch, features, dim) tensor")
    if not d.bottom_mlp:
        why.append("dense.bottom_mlp is empty: TorchRec's DLRM needs a bottom MLP (its DenseArch)")
    elif len(dims) == 1 and d.bottom_mlp[-1] != dims[0]:
        why.append(f"dense.bottom_mlp ends at {d.bottom_mlp[-1]}, not at the embedding dim {dims[0]}: TorchRec's "
                   "DLRM interacts the bottom MLP's output with the pooled features")
    if len(d.top_mlp) < 2:
        why.append(f"dense.top_mlp {list(d.top_mlp)} has one layer: TorchRec's OverArch needs at least two")
    path = doc.get("module_path", DLRM_TABLES)
    if path != DLRM_TABLES and not path.endswith("." + DLRM_TABLES):
        why.append(f"module_path {path!r} does not end in {DLRM_TABLES!r}, where TorchRec's DLRM keeps its "
                   "tables (export with --module-path dlrm or dlrm-train)")
    return why


def choose(doc: dict, wl, head: str = "dlrm") -> dict:
    """What a rank will train: {kind: "torchrec_dlrm" | "linear_head", why (null, or the reason for the linear
    head), ...}. torchrec_dlrm adds class (DLRM, DLRM_DCN), wrapper (DLRMTrain, none, or the wrapper's path),
    dense_in_features, bottom_mlp and top_mlp (layer widths, the workload's), interaction (the workload's: kind,
    and layers and rank for dcnv2), embedding_dim (columns), sparse_features (pooled features), dtype (the
    workload's dense.dtype), optimizer {name, lr} (the workload's); linear_head adds in_features (the pooled
    features' widths summed, columns) and optimizer {sgd, the workload's lr}. ``head``: "dlrm" (TorchRec's DLRM
    where it can express the workload) or "linear"."""
    if head not in HEADS:
        raise ValueError(f"--head {head!r}: choose one of {', '.join(HEADS)}")
    configs = doc.get("embedding_bag_configs")
    if not isinstance(configs, list) or not configs:
        raise ValueError("export: embedding_bag_configs must be a non-empty list (export it again with this placer)")
    for i, c in enumerate(configs):
        if not (isinstance(c, dict) and isinstance(c.get("embedding_dim"), int) and c["embedding_dim"] > 0
                and isinstance(c.get("feature_names"), list) and c["feature_names"]):
            raise ValueError(f"export: embedding_bag_configs[{i}] needs a positive integer embedding_dim and a "
                             "non-empty list feature_names")
    if not isinstance(doc.get("module_path", DLRM_TABLES), str):
        raise ValueError("export: module_path must be a dotted path string")
    width = sum(int(c["embedding_dim"]) * len(c["feature_names"]) for c in configs)
    why = ["asked for (--head linear)"] if head == "linear" else _dlrm_obstacles(doc, wl)
    if why:
        return {"kind": "linear_head", "why": "; ".join(why), "in_features": width,
                "optimizer": {"name": "sgd", "lr": wl.optimizer.lr}}
    d = wl.dense
    path = doc.get("module_path", DLRM_TABLES)
    prefix = path[:-len(DLRM_TABLES)].rstrip(".")
    return {"kind": "torchrec_dlrm", "why": None, "class": _CLASSES[d.interaction.kind],
            "wrapper": "DLRMTrain" if prefix == "model" else (prefix or None),
            "dense_in_features": d.num_dense_features, "bottom_mlp": list(d.bottom_mlp),
            "top_mlp": list(d.top_mlp), "interaction": d.interaction.model_dump(mode="json"),
            "embedding_dim": int(configs[0]["embedding_dim"]),
            "sparse_features": sum(len(c["feature_names"]) for c in configs), "dtype": d.dtype,
            "optimizer": {"name": wl.optimizer.name, "lr": wl.optimizer.lr}}


def describe(spec: dict) -> str:
    """One line for people: the model ``choose`` picked and its dense parameter count (``parameters``, when
    set: elements of the dense part's weights and biases)."""
    count = f"; {spec['parameters']:,} dense parameters" if spec.get("parameters") is not None else ""
    if spec["kind"] == "linear_head":
        return f"model: the tables and a linear head ({spec['in_features']} -> 1{count}); {spec['why']}"
    inter = spec["interaction"]
    kind = inter["kind"] + (f" ({inter['layers']} layers, rank {inter['rank']})" if inter["kind"] == "dcnv2" else "")
    wrap = {"DLRMTrain": " in DLRMTrain", None: ""}.get(spec["wrapper"], f" at {spec['wrapper']}")
    return (f"model: TorchRec {spec['class']}{wrap}: bottom MLP "
            f"{'-'.join(map(str, [spec['dense_in_features'], *spec['bottom_mlp']]))}, {kind} interaction of "
            f"{spec['sparse_features']} features, top MLP {'-'.join(map(str, spec['top_mlp']))}, "
            f"{spec['dtype']}{count}")


# ---- inside a rank (needs torch and torchrec) ----------------------------------------------------------------


def build(spec: dict, path: str, ebc, device):
    """(model, loss_of, dense_parameters) for ``spec`` (from ``choose``) with ``ebc`` (the unsharded
    EmbeddingBagCollection) at the dotted ``path``. ``loss_of(dmp, batch)`` is one step's mean BCE loss of a
    torchrec Batch (dense_features, sparse_features, labels) through the DMP-wrapped model;
    ``dense_parameters``: elements of every weight but the tables'."""
    import torch

    if spec["kind"] == "linear_head":
        model = _linear_net(path, ebc, spec["in_features"])
        bce = torch.nn.BCEWithLogitsLoss()

        def loss_of(dmp, batch):
            return bce(dmp(batch.sparse_features), batch.labels)
    else:
        model, loss_of = _dlrm(spec, path, ebc, device)
    dense = sum(p.numel() for name, p in model.named_parameters() if not name.startswith(path + "."))
    return model, loss_of, dense


def dense_optimizer(spec: dict, params: dict, device):
    """The optimizer of the parameters DMP does not fuse (``params``: name -> parameter) as a TorchRec
    KeyedOptimizer: the linear head's SGD, or the workload's (placer's runner's make_dense_optimizer)."""
    import torch
    from torchrec.optim.keyed import KeyedOptimizerWrapper

    from placer.program.dense_model import make_dense_optimizer

    opt = spec["optimizer"]
    if spec["kind"] == "linear_head":
        return KeyedOptimizerWrapper(params, lambda ps: torch.optim.SGD(ps, lr=opt["lr"]))
    return KeyedOptimizerWrapper(params, lambda ps: make_dense_optimizer(
        torch.nn.ParameterList(ps), opt["name"], opt["lr"], foreach=device.type == "cuda"))


def dense_precision(spec: dict, device):
    """(context, dtype run) of the dense part: placer's runner's autocast at the workload's dense.dtype for
    TorchRec's DLRM; none (fp32) for the linear head."""
    import contextlib

    if spec["kind"] == "linear_head":
        return contextlib.nullcontext(), "fp32"
    from placer.runner.trainer import dense_autocast

    return dense_autocast(device, spec["dtype"])


def _linear_net(path: str, ebc, width: int):
    """A module with ``ebc`` at the dotted ``path`` and a linear head (``placer_head``) over its pooled output."""
    import torch

    from placer.torchrec_io.dmp_check import attach_at_path, module_at_path

    class Net(torch.nn.Module):
        def forward(self, kjt):
            return self.placer_head(module_at_path(self, path)(kjt).values()).squeeze(-1)

    net = attach_at_path(Net(), path, ebc)
    net.placer_head = torch.nn.Linear(width, 1)
    return net


def _dlrm(spec: dict, path: str, ebc, device):
    """TorchRec's DLRM or DLRM_DCN of ``spec`` over ``ebc``, wrapped for ``path``, and its loss function."""
    import torch
    from torchrec.models.dlrm import DLRM, DLRM_DCN, DLRMTrain

    from placer.torchrec_io.dmp_check import attach_at_path, module_at_path

    args = dict(embedding_bag_collection=ebc, dense_in_features=spec["dense_in_features"],
                dense_arch_layer_sizes=spec["bottom_mlp"], over_arch_layer_sizes=spec["top_mlp"],
                dense_device=device)
    if spec["class"] == "DLRM_DCN":
        inter = spec["interaction"]
        dlrm = DLRM_DCN(**args, dcn_num_layers=inter["layers"], dcn_low_rank_dim=inter["rank"])
    else:
        dlrm = DLRM(**args)
    if spec["wrapper"] == "DLRMTrain":
        def loss_of(dmp, batch):
            return dmp(batch)[0]
        return DLRMTrain(dlrm), loss_of
    bce = torch.nn.BCEWithLogitsLoss()
    if spec["wrapper"] is None:
        def loss_of(dmp, batch):
            return bce(dmp(batch.dense_features, batch.sparse_features).squeeze(-1).float(), batch.labels)
        return dlrm, loss_of
    prefix = spec["wrapper"]

    class Wrapper(torch.nn.Module):
        def forward(self, dense, kjt):
            return module_at_path(self, prefix)(dense, kjt).squeeze(-1)

    def loss_of(dmp, batch):
        return bce(dmp(batch.dense_features, batch.sparse_features).float(), batch.labels)
    return attach_at_path(Wrapper(), prefix, dlrm), loss_of
