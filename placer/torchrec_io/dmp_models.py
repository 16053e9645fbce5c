"""The model a DistributedModelParallel training run trains around the sharded tables (dmp_train.py).

``choose`` (plain Python, no torch) decides it from the export document, the workload and ``--head``; ``build``
makes it inside a rank. Three kinds, every one trained with BCE-with-logits loss:

- ``torchrec_dlrm``: TorchRec's own DLRM (torchrec.models.dlrm) from the workload's ``dense`` section, the model
  placer's prediction prices (program/dense_model.py's DenseDLRM): the same number of dense features, bottom MLP
  (ReLU after every layer), interaction and top MLP (ReLU between layers, the last the logit), the workload's
  dense optimizer and learning rate for the dense parameters (``dense_optimizer``, by default the embeddings'
  ``optimizer`` with rowwise_adagrad as plain Adagrad, as placer's runner),
  the dense part at the workload's ``dense.dtype`` (placer's runner's autocast). The interaction ``dot`` is
  TorchRec's ``DLRM`` (pairwise dot products of the bottom MLP's output and every pooled feature: V(V-1)/2
  values for V = features + 1, as placer's), ``dcnv2`` is ``DLRM_DCN`` (``layers`` low-rank cross layers of
  rank ``rank`` over the concatenation: placer's LowRankCross). TorchRec's DLRM classes ask for more than
  placer's DenseDLRM: every table one embedding dim (the pooled features are stacked as (B, F, D)), a bottom MLP
  ending at that dim, a top MLP of at least two layers, and have no ``concat`` interaction. At the document's
  ``module_path`` ending in ``sparse_arch.embedding_bag_collection`` (where DLRM keeps its tables): ``model.``
  before it is TorchRec's DLRMTrain (``--module-path dlrm-train``), nothing before it DLRM itself, any other
  prefix DLRM at that path in a wrapper module.
- ``placer_dense``: placer's own DenseDLRM of the workload (exactly the module placer's runner trains and its
  cost model traces: any interaction, tables of any widths) over the sharded EmbeddingBagCollection, which sits
  at the document's ``module_path`` (any dotted path; DenseDLRM beside it at the root attribute
  ``placer_dense``, another name where the path starts with that one). The collection's pooled KeyedTensor is
  split into the per-feature (B, dim) tensors in the workload's feature order (the export's TorchRec feature
  names mapped back); the workload's dense optimizer, learning rate and dense.dtype autocast as torchrec_dlrm.
- ``linear_head``: the tables and one linear layer over every pooled feature (-> one logit), SGD at the
  workload's dense learning rate, fp32: the trainer's model before issue 51, for ``--head linear`` (or, under ``auto``,
  where neither model above can run: the export's features do not match the workload's).

``--head``: ``auto`` (the default) TorchRec's DLRM where it expresses the workload, else placer's DenseDLRM, else
the linear head; ``dlrm``, ``placer``, ``linear`` force one, and a forced model that cannot run is a ValueError
naming why (the trainer's exit 2). ``why`` in the description says why the model that runs was chosen.
"""
from __future__ import annotations

#: where TorchRec's DLRM keeps its EmbeddingBagCollection, relative to the DLRM module
DLRM_TABLES = "sparse_arch.embedding_bag_collection"
HEADS = ("auto", "dlrm", "placer", "linear")
#: the root attribute of placer's DenseDLRM in the placer_dense model (another where the module path starts with it)
PLACER_DENSE = "placer_dense"
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


def feature_keys(doc: dict, wl) -> list[str]:
    """The TorchRec feature names of the workload's features, in the workload's order (DenseDLRM's)."""
    names = (doc.get("names") or {}).get("features") or {}
    return [names.get(f.name, f.name) for f in wl.resolved_features]


def _placer_obstacles(doc: dict, wl) -> list[str]:
    """Why placer's DenseDLRM cannot run on the document's tables (empty: it can): every workload feature must be
    one of the EmbeddingBagConfigs' features, as wide as the workload's table."""
    dims = {f: int(c["embedding_dim"]) for c in doc["embedding_bag_configs"] for f in c["feature_names"]}
    by_table = {t.name: t.dim for t in wl.tables}
    missing, wrong = [], []
    for f, key in zip(wl.resolved_features, feature_keys(doc, wl)):
        if key not in dims:
            missing.append(key)
        elif dims[key] != by_table[f.table]:
            wrong.append(f"{key} ({dims[key]}, the workload's {by_table[f.table]})")
    why = []
    if missing:
        why.append(f"the export's embedding_bag_configs have no feature {', '.join(missing[:5])}"
                   f"{' ...' if len(missing) > 5 else ''} of the workload: export it from this workload")
    if wrong:
        why.append(f"the export's embedding dims differ from the workload's: {', '.join(wrong[:5])}"
                   f"{' ...' if len(wrong) > 5 else ''}")
    return why


def _check_doc(doc: dict) -> list[dict]:
    configs = doc.get("embedding_bag_configs")
    if not isinstance(configs, list) or not configs:
        raise ValueError("export: embedding_bag_configs must be a non-empty list (export it again with this placer)")
    for i, c in enumerate(configs):
        if not (isinstance(c, dict) and isinstance(c.get("embedding_dim"), int) and c["embedding_dim"] > 0
                and isinstance(c.get("feature_names"), list) and c["feature_names"]):
            raise ValueError(f"export: embedding_bag_configs[{i}] needs a positive integer embedding_dim and a "
                             "non-empty list feature_names")
    if not isinstance(doc.get("module_path", DLRM_TABLES), str) or not doc.get("module_path", DLRM_TABLES):
        raise ValueError("export: module_path must be a dotted path string")
    return configs


def choose(doc: dict, wl, head: str = "auto") -> dict:
    """What a rank will train: {kind: "torchrec_dlrm" | "placer_dense" | "linear_head", why (null where the
    choice needs no reason, else why this model: asked for, or why the models before it cannot run), ...}.
    torchrec_dlrm and placer_dense add dense_in_features, bottom_mlp and top_mlp (layer widths, the workload's),
    interaction (the workload's: kind, and layers and rank for dcnv2), sparse_features (pooled features), dtype
    (the workload's dense.dtype), optimizer {name, lr} (the workload's dense optimizer); torchrec_dlrm adds class
    (DLRM, DLRM_DCN), wrapper (DLRMTrain, none, or the wrapper's path) and embedding_dim (columns); placer_dense adds
    class DenseDLRM, dense_path (its attribute in the model), module_path (the tables') and embedding_dims (the
    tables' distinct widths); linear_head adds in_features (the pooled features' widths summed, columns) and
    optimizer {sgd, the workload's dense lr}. ``head``: one of HEADS (the module's docstring); ValueError where a
    forced head cannot run, naming why."""
    if head not in HEADS:
        raise ValueError(f"--head {head!r}: choose one of {', '.join(HEADS)}")
    configs = _check_doc(doc)
    width = sum(int(c["embedding_dim"]) * len(c["feature_names"]) for c in configs)
    linear = {"kind": "linear_head", "in_features": width,
              "optimizer": {"name": "sgd", "lr": wl.resolved_dense_optimizer.lr}}
    if head == "linear":
        return {**linear, "why": "asked for (--head linear)"}
    d = wl.dense
    common = {"dense_in_features": d.num_dense_features, "bottom_mlp": list(d.bottom_mlp),
              "top_mlp": list(d.top_mlp), "interaction": d.interaction.model_dump(mode="json"),
              "sparse_features": sum(len(c["feature_names"]) for c in configs), "dtype": d.dtype,
              "optimizer": wl.resolved_dense_optimizer.model_dump()}
    not_dlrm = _dlrm_obstacles(doc, wl) if head in ("auto", "dlrm") else []
    if head == "dlrm" and not_dlrm:
        raise ValueError(f"--head dlrm: TorchRec's DLRM classes cannot express the dense model of workload "
                         f"{wl.name!r}: {'; '.join(not_dlrm)} (--head placer or auto trains placer's DenseDLRM "
                         "instead)")
    if head in ("auto", "dlrm") and not not_dlrm:
        path = doc.get("module_path", DLRM_TABLES)
        prefix = path[:-len(DLRM_TABLES)].rstrip(".")
        return {"kind": "torchrec_dlrm", "why": None, "class": _CLASSES[d.interaction.kind],
                "wrapper": "DLRMTrain" if prefix == "model" else (prefix or None),
                "embedding_dim": int(configs[0]["embedding_dim"]), **common}
    not_placer = _placer_obstacles(doc, wl)
    if head == "placer" and not_placer:
        raise ValueError(f"--head placer: placer's DenseDLRM cannot run on this export: {'; '.join(not_placer)}")
    if not_placer:
        return {**linear, "why": "TorchRec's DLRM cannot express the dense model: " + "; ".join(not_dlrm)
                + "; placer's DenseDLRM cannot run: " + "; ".join(not_placer)}
    path = doc.get("module_path", DLRM_TABLES)
    attr = PLACER_DENSE
    while attr == path.split(".")[0]:
        attr += "_"
    why = ("asked for (--head placer)" if head == "placer"
           else "TorchRec's DLRM cannot express the dense model: " + "; ".join(not_dlrm))
    return {"kind": "placer_dense", "why": why, "class": "DenseDLRM", "dense_path": attr, "module_path": path,
            "embedding_dims": sorted({int(c["embedding_dim"]) for c in configs}), **common}


def describe(spec: dict) -> str:
    """One line for people: the model ``choose`` picked and its dense parameter count (``parameters``, when
    set: elements of the dense part's weights and biases)."""
    count = f"; {spec['parameters']:,} dense parameters" if spec.get("parameters") is not None else ""
    if spec["kind"] == "linear_head":
        return f"model: the tables and a linear head ({spec['in_features']} -> 1{count}); {spec['why']}"
    inter = spec["interaction"]
    kind = inter["kind"] + (f" ({inter['layers']} layers, rank {inter['rank']})" if inter["kind"] == "dcnv2" else "")
    layers = (f"bottom MLP {'-'.join(map(str, [spec['dense_in_features'], *spec['bottom_mlp']]))}, {kind} "
              f"interaction of {spec['sparse_features']} features")
    top = f"top MLP {'-'.join(map(str, spec['top_mlp']))}, {spec['dtype']}{count}"
    if spec["kind"] == "placer_dense":
        dims = spec["embedding_dims"]
        width = f" ({dims[0]} wide)" if len(dims) == 1 else f" ({dims[0]}-{dims[-1]} wide)"
        return (f"model: placer's DenseDLRM (at {spec['dense_path']}; tables at {spec['module_path']}): {layers}"
                f"{width}, {top}; {spec['why']}")
    wrap = {"DLRMTrain": " in DLRMTrain", None: ""}.get(spec["wrapper"], f" at {spec['wrapper']}")
    return f"model: TorchRec {spec['class']}{wrap}: {layers}, {top}"


# ---- inside a rank (needs torch and torchrec) ----------------------------------------------------------------


def build(spec: dict, doc: dict, wl, ebc, device):
    """(model, loss_of, dense_parameters) for ``spec`` (from ``choose``) with ``ebc`` (the unsharded
    EmbeddingBagCollection) at the document's dotted ``module_path``; ``wl``: the workload. ``loss_of(dmp,
    batch)`` is one step's mean BCE loss of a torchrec Batch (dense_features, sparse_features, labels) through
    the DMP-wrapped model; ``dense_parameters``: elements of every weight but the tables'."""
    import torch

    path = doc["module_path"]
    if spec["kind"] == "linear_head":
        model = _linear_net(path, ebc, spec["in_features"])
        bce = torch.nn.BCEWithLogitsLoss()

        def loss_of(dmp, batch):
            return bce(dmp(batch.sparse_features), batch.labels)
    elif spec["kind"] == "placer_dense":
        model, loss_of = _placer_net(spec, feature_keys(doc, wl), ebc, wl, device)
    else:
        model, loss_of = _dlrm(spec, path, ebc, device)
    dense = sum(p.numel() for name, p in model.named_parameters() if not name.startswith(path + "."))
    return model, loss_of, dense


def dense_optimizer(spec: dict, params: dict, device):
    """The optimizer of the parameters DMP does not fuse (``params``: name -> parameter) as a TorchRec
    KeyedOptimizer: the linear head's SGD, or the workload's for either DLRM (placer's runner's
    make_dense_optimizer)."""
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
    TorchRec's DLRM and placer's DenseDLRM; none (fp32) for the linear head."""
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


def _placer_net(spec: dict, keys: list[str], ebc, wl, device):
    """Placer's DenseDLRM of ``wl`` at ``spec["dense_path"]`` beside ``ebc`` at ``spec["module_path"]``: the pooled
    KeyedTensor split per feature (``keys``: TorchRec names in the workload's feature order), and its loss."""
    import torch

    from placer.program.dense_model import DenseDLRM
    from placer.torchrec_io.dmp_check import attach_at_path, module_at_path

    path, attr = spec["module_path"], spec["dense_path"]

    class PlacerNet(torch.nn.Module):
        def forward(self, dense, kjt):
            pooled = module_at_path(self, path)(kjt).to_dict()
            embeddings = [pooled[k] if pooled[k].dtype == dense.dtype else pooled[k].to(dense.dtype) for k in keys]
            return getattr(self, attr)(dense, embeddings)

    net = attach_at_path(PlacerNet(), path, ebc)
    setattr(net, attr, DenseDLRM(wl).to(device))
    bce = torch.nn.BCEWithLogitsLoss()

    def loss_of(dmp, batch):
        return bce(dmp(batch.dense_features, batch.sparse_features).float(), batch.labels)
    return net, loss_of
