"""The user's model in TorchRec's terms: table and feature names, where the EmbeddingBagCollection sits, and the
EmbeddingBagConfigs of the workload (``placer export --torchrec --names ... --module-path ...``).

Name maps: a YAML/JSON file ``{tables: {placer name: TorchRec name}, features: {placer name: TorchRec name}}``
(either part may be left out; names not in it are kept), or the preset ``dlrm``: TorchRec's DLRM example
(torchrec/datasets/criteo.py, its dlrm_main), whose tables are ``t_cat_0`` .. and features ``cat_0`` ..: the
workload's tables in order as t_cat_<i>, its features in order as cat_<j> (for the Criteo workloads, one
feature per table: C1 -> t_cat_0 reading cat_0, .., C26 -> t_cat_25 reading cat_25).

Module paths (where DistributedModelParallel finds the EmbeddingBagCollection; torchrec/models/dlrm.py): preset
``dlrm`` = ``sparse_arch.embedding_bag_collection`` (a DLRM module at the model's root), ``dlrm-train`` =
``model.sparse_arch.embedding_bag_collection`` (DLRMTrain keeps its DLRM as ``self.model``), or any dotted path.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from placer.errors import SpecError
from placer.specs.workload import Workload

NAME_PRESETS = ("dlrm",)
MODULE_PATHS = {"dlrm": "sparse_arch.embedding_bag_collection",
                "dlrm-train": "model.sparse_arch.embedding_bag_collection"}
_FQN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


@dataclass(frozen=True)
class NameMap:
    """placer name -> TorchRec name, complete (every table and feature of the workload)."""

    tables: dict[str, str]
    features: dict[str, str]
    source: str = "identity"  # "identity", "preset dlrm" or the file's path

    def as_json(self) -> dict:
        return {"source": self.source, "tables": dict(self.tables), "features": dict(self.features)}


def identity(wl: Workload) -> NameMap:
    return NameMap({t.name: t.name for t in wl.tables}, {f.name: f.name for f in wl.resolved_features})


def dlrm_preset(wl: Workload) -> NameMap:
    """TorchRec's DLRM example names: tables t_cat_<i>, features cat_<j>, in workload order."""
    return NameMap({t.name: f"t_cat_{i}" for i, t in enumerate(wl.tables)},
                   {f.name: f"cat_{j}" for j, f in enumerate(wl.resolved_features)}, "preset dlrm")


def module_path(value: str | None) -> str:
    """The dotted path of ``--module-path`` (a preset name or a path); SpecError for a malformed one."""
    if value is None:
        return MODULE_PATHS["dlrm"]
    if value in MODULE_PATHS:
        return MODULE_PATHS[value]
    if not _FQN.match(value):
        raise SpecError(f"{value!r} is neither a preset ({', '.join(MODULE_PATHS)}) nor a dotted module path "
                        "such as model.sparse_arch.embedding_bag_collection", field="--module-path")
    return value


def _part(data: dict, key: str, known: list[str], file: str) -> dict[str, str]:
    part = data.get(key) or {}
    if not isinstance(part, dict):
        raise SpecError(f"expected a mapping of placer name -> TorchRec name, got {type(part).__name__}",
                        file=file, field=key)
    out = {}
    for name, new in part.items():
        if name not in known:
            raise SpecError(f"{key[:-1]} {name!r} is not in the workload (it has {', '.join(known[:8])}"
                            f"{', ...' if len(known) > 8 else ''})", file=file, field=f"{key}.{name}")
        if not isinstance(new, str) or not _NAME.match(new):
            raise SpecError(f"expected a TorchRec name (letters, digits, _ . -; not starting with a digit), "
                            f"got {new!r}", file=file, field=f"{key}.{name}")
        out[str(name)] = new
    full = {n: out.get(n, n) for n in known}
    seen: dict[str, str] = {}
    for n, new in full.items():
        if new in seen:
            raise SpecError(f"{key[:-1]}s {seen[new]!r} and {n!r} would both be named {new!r}", file=file,
                            field=f"{key}.{n if n in out else seen[new]}")
        seen[new] = n
    return full


def load_name_map(value: str | None, wl: Workload) -> NameMap:
    """``--names``: None (placer's names), the preset ``dlrm`` or a YAML/JSON file (see the module docstring).
    SpecError (exit 2) naming the file and field for a malformed file, an unknown name or two names made one."""
    if value is None:
        return identity(wl)
    if value in NAME_PRESETS:
        return dlrm_preset(wl)
    from placer.specs.loading import read_document

    data = read_document(value)  # guarded read, YAML or JSON by the name, a mapping (SpecError naming the file)
    if not set(data) <= {"tables", "features"} or not data:
        raise SpecError(f"expected a mapping with 'tables' and/or 'features' (or the preset "
                        f"{', '.join(NAME_PRESETS)}), got {data!r:.80}", file=value,
                        field=next((k for k in data if k not in ("tables", "features")), None))
    return NameMap(_part(data, "tables", [t.name for t in wl.tables], value),
                   _part(data, "features", [f.name for f in wl.resolved_features], value), value)


#: TorchRec's DataType of each storage precision placer plans
DATA_TYPES = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16"}


def embedding_bag_configs(wl: Workload, names: NameMap, precision: dict[str, str] | None = None) -> list[dict]:
    """EmbeddingBagConfig fields per table, TorchRec names: name, num_embeddings (rows), embedding_dim
    (columns), feature_names, pooling SUM (placer's pooling), data_type of its storage ``precision`` (placer
    names -> fp32, fp16 or bf16; FP32 where not given)."""
    precision = precision or {}
    feats: dict[str, list[str]] = {}
    for f in wl.resolved_features:
        feats.setdefault(f.table, []).append(names.features[f.name])
    return [{"name": names.tables[t.name], "num_embeddings": t.rows, "embedding_dim": t.dim,
             "feature_names": feats.get(t.name, []), "pooling": "SUM",
             "data_type": DATA_TYPES[precision.get(t.name, "fp32")]} for t in wl.tables]
