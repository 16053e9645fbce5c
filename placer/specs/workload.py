"""Workload spec: embedding tables (with access skew), features, the dense model, batch and optimizers (the
embedding tables' ``optimizer``, the dense model's ``dense_optimizer``, by default the same).

Units: ``rows`` and ``dim`` are counts; ``pooling_factor`` is lookups per sample per feature;
``batch_size`` is the GLOBAL batch (samples per training step over all devices).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import numbers
from decimal import Decimal
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from placer.specs.access import (AccessModel, CdfAccess, UniformAccess, ZipfAccess, cdf_from_counts,
                                 cdf_from_histogram)
from placer.errors import SpecError
from placer.specs import limits as L
from placer.specs.common import StrictModel
from placer.specs.compression import CompressionSpec
from placer.specs.constraints import Constraints
from placer.specs.files import load_npy_guarded
from placer.specs.detect import expect_kind
from placer.specs.loading import load_model, read_document
from placer.units import element_bytes

StorageDtype = Literal["fp32", "fp16", "bf16"]

#: Optimizer state held per embedding element, as a multiple of the row's own elements (docs/design.md).
OPTIMIZER_STATE_ELEMENTS = {"sgd": 0.0, "adagrad": 1.0, "adam": 2.0}


class UniformSpec(StrictModel):
    kind: Literal["uniform"] = "uniform"


class ZipfSpec(StrictModel):
    kind: Literal["zipf"] = "zipf"
    alpha: L.ZipfAlpha


class CdfSpec(StrictModel):
    """Coverage points [row_fraction, lookup_fraction], or a .npy beside the spec holding them (shape (k, 2))
    or per-row access counts (1-D)."""

    kind: Literal["cdf"] = "cdf"
    points: list[tuple[L.UnitInterval, L.UnitInterval]] | None = Field(default=None, min_length=1)
    file: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_source(self) -> "CdfSpec":
        if (self.points is None) == (self.file is None):
            raise ValueError("give exactly one of points or file")
        return self


class HistogramBin(StrictModel):
    accesses_per_row: L.AccessesPerRow
    rows_fraction: L.RowFraction


#: slack allowed on the sum of a histogram's rows_fraction beyond the rounding of the written values
HISTOGRAM_SUM_SLACK = 1e-6


def _rounding_of(value: float) -> float:
    """Half a unit in the last written decimal place of ``value`` (0.33 -> 0.005): what rounding it to the
    digits it was written with may have moved it by."""
    exponent = Decimal(repr(float(value))).as_tuple().exponent
    return 0.5 * 10.0 ** exponent if isinstance(exponent, int) else 0.0


class HistogramSpec(StrictModel):
    """Bins of rows by access count (as in the learned sharders' 17-bin table features). The rows_fraction
    values must sum to 1 within the rounding of the values as written (each 2-decimal value may be 0.005
    off) plus 1e-6; they are renormalised to sum to exactly 1."""

    kind: Literal["histogram"] = "histogram"
    bins: list[HistogramBin] = Field(min_length=1)

    @field_validator("bins")
    @classmethod
    def _fractions_sum_to_one(cls, bins: list[HistogramBin]) -> list[HistogramBin]:
        total = math.fsum(b.rows_fraction for b in bins)
        slack = HISTOGRAM_SUM_SLACK + math.fsum(_rounding_of(b.rows_fraction) for b in bins)
        if abs(total - 1.0) > slack:
            raise ValueError(f"the bins' rows_fraction values sum to {total:.6g}, expected 1 (within {slack:.3g}, "
                             "the rounding of the values written)")
        return bins


AccessSpec = Annotated[Union[UniformSpec, ZipfSpec, CdfSpec, HistogramSpec], Field(discriminator="kind")]


class TableSpec(StrictModel):
    """One embedding table."""

    name: L.NonEmptyName
    rows: L.Rows
    dim: L.Dim
    dtype: StorageDtype = "fp32"
    pooling_factor: L.Pooling = Field(default=1.0, description="lookups per sample for each feature using it")
    access: AccessSpec = Field(default_factory=UniformSpec)
    allow_fp16: bool = Field(default=False, description="the planner may store this table at fp16")
    allow_bf16: bool = Field(default=False, description="the planner may store this table at bf16 (TBE's "
                                                        "SparseType.BF16: fp32's range, 8 bits of mantissa)")
    frozen: bool = Field(default=False, description="the table is not trained: its rows are read, never updated")
    compression: CompressionSpec | None = Field(default=None, description="compressed forms accuracy allows "
                                                                          "(placer/specs/compression.py)")
    node_local: bool = Field(default=False, description="a replica per node may be trained on that node's samples "
                                                        "alone (no cross-node exchange of its rows or gradients)")

    @model_validator(mode="after")
    def _compression_fits(self) -> "TableSpec":
        c = self.compression
        if c is not None and c.int8 and not self.frozen:
            raise ValueError("compression.int8: int8 rows are allowed for frozen tables only (set frozen: true); "
                             "training int8 rows is not supported")
        if c is not None and c.qr is not None and c.qr.max_collisions > self.rows // 2:
            raise ValueError(f"compression.qr.max_collisions: {c.qr.max_collisions} leaves fewer than 2 quotient "
                             f"rows of the table's {self.rows} rows (at most {self.rows // 2})")
        return self

    def storage_precisions(self) -> list[str]:
        """The precisions its rows may be stored at: its own dtype, and fp16 / bf16 where an fp32 table allows
        them (a 16-bit table stays at its dtype)."""
        if self.dtype != "fp32":
            return [self.dtype]
        return ["fp32"] + ["fp16"] * self.allow_fp16 + ["bf16"] * self.allow_bf16

    def row_bytes(self, dtype: str | None = None) -> int:
        """Bytes of one row at ``dtype`` (default: the table's own)."""
        return self.dim * element_bytes(dtype or self.dtype)

    def size_bytes(self, dtype: str | None = None) -> int:
        """Bytes of the whole table at ``dtype``, weights only."""
        return self.rows * self.row_bytes(dtype)


class FeatureSpec(StrictModel):
    """A sparse feature: looks up ``pooling_factor`` rows of ``table`` per sample and pools them (sum)."""

    name: L.NonEmptyName
    table: str
    pooling_factor: L.Pooling | None = None


class DotInteraction(StrictModel):
    kind: Literal["dot"] = "dot"


class ConcatInteraction(StrictModel):
    kind: Literal["concat"] = "concat"


class Dcnv2Interaction(StrictModel):
    kind: Literal["dcnv2"] = "dcnv2"
    layers: L.CrossLayers = 3
    rank: L.LayerWidth = 512


Interaction = Annotated[Union[DotInteraction, ConcatInteraction, Dcnv2Interaction], Field(discriminator="kind")]


class DenseSpec(StrictModel):
    """The dense part of a DLRM: bottom MLP over dense features, interaction, top MLP."""

    num_dense_features: L.DenseFeatures = 13
    bottom_mlp: list[L.LayerWidth] = Field(default_factory=list, max_length=L.MAX_CROSS_LAYERS)
    interaction: Interaction = Field(default_factory=DotInteraction)
    top_mlp: list[L.LayerWidth] = Field(min_length=1, max_length=L.MAX_CROSS_LAYERS)
    dtype: Literal["fp32", "tf32", "bf16", "fp16"] = "fp32"


class OptimizerSpec(StrictModel):
    """The embedding tables' optimizer (what TorchRec fuses into FBGEMM's kernels: its state is kept beside every
    trained row). ``lr``: learning rate."""

    name: Literal["sgd", "adagrad", "rowwise_adagrad", "adam"] = "sgd"
    lr: L.LearningRate = 0.01


#: The dense model's optimizers (torch.optim's SGD, Adagrad, Adam: state per dense parameter 0, 1, 2 fp32 values)
DenseOptimizerName = Literal["sgd", "adagrad", "adam"]


class DenseOptimizerSpec(StrictModel):
    """The dense model's optimizer (bottom MLP, interaction, top MLP: what TorchRec leaves to a
    KeyedOptimizerWrapper, the reference scripts' ``dense_optimizer``). ``lr``: learning rate, default the
    embeddings' ``optimizer.lr``. Row-wise Adagrad is an embedding optimizer (one state value per row); the dense
    model's Adagrad is ``adagrad``."""

    name: DenseOptimizerName
    lr: L.LearningRate | None = None

    @field_validator("name", mode="before")
    @classmethod
    def _not_rowwise(cls, name: Any) -> Any:
        if name == "rowwise_adagrad":
            raise ValueError("rowwise_adagrad is an embedding optimizer (one state value per row), not the dense "
                             "model's: use adagrad (torch.optim.Adagrad) for the dense model")
        return name


class Workload(StrictModel):
    """A training job: tables, features, dense model, global batch, the tables' and the dense model's optimizers."""

    schema_version: Literal[1] = 1
    name: L.Name
    description: str = ""
    batch_size: L.Batch = Field(description="global batch: samples per step over all devices")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="the embedding tables' optimizer")
    dense_optimizer: DenseOptimizerSpec | None = Field(
        default=None, description="the dense model's optimizer; default: the embeddings' (rowwise_adagrad as adagrad)")
    tables: list[TableSpec] = Field(min_length=1)
    features: list[FeatureSpec] | None = None
    dense: DenseSpec
    constraints: Constraints = Field(default_factory=Constraints, description="where tables may go "
                                     "(specs/constraints.py): allowed shardings, memory, devices, shards, "
                                     "precisions, co-location, HBM headroom")
    trainer: Literal["placer", "torchrec"] = Field(
        default="placer", description="what trains the job, and so how a step is priced: placer's runner, or "
                                      "TorchRec's DistributedModelParallel with FBGEMM's fused kernels "
                                      "(program/torchrec_build.py); --trainer overrides it")
    source_path: str | None = Field(default=None, exclude=True)
    sha256: str | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _apply_table_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and "table_defaults" in data:
            data = dict(data)
            defaults = data.pop("table_defaults") or {}
            if not isinstance(defaults, dict):
                raise ValueError("table_defaults: must be a mapping")
            tables = data.get("tables")
            if isinstance(tables, list):
                data["tables"] = [{**defaults, **t} if isinstance(t, dict) else t for t in tables]
        return data

    def options_not_planned(self) -> list[str]:
        """What the workload allows that the planner does not offer yet (tensor-train compression of a frozen table;
        QR, TT of trained tables, int8 rows of frozen tables, frozen tables and node-local tables are on its menu): one
        line each, for check and solve to say (plans keep such tables uncompressed)."""
        out = []
        tt = sum(t.frozen and t.compression is not None and t.compression.tt is not None for t in self.tables)
        if tt:
            out.append(f"{tt} table(s) allow compression (tt) but are not trained: TT is on the planner's menu for "
                       "trained tables only, so plans store them without tensor-train compression")
        return out

    @field_validator("tables")
    @classmethod
    def _unique_table_names(cls, tables: list[TableSpec]) -> list[TableSpec]:
        seen: dict[str, int] = {}
        for i, t in enumerate(tables):
            if t.name in seen:
                raise ValueError(f"tables[{i}].name: duplicate table name {t.name!r} (first at tables[{seen[t.name]}])")
            seen[t.name] = i
        return tables

    @field_validator("features")
    @classmethod
    def _features_name_tables(cls, features, info: ValidationInfo):
        if features is None:
            return features
        names = {t.name for t in info.data.get("tables", [])}
        seen: dict[str, int] = {}
        for i, f in enumerate(features):
            if names and f.table not in names:
                known = ", ".join(sorted(names)[:8]) + (", ..." if len(names) > 8 else "")
                raise ValueError(f"features[{i}].table: unknown table {f.table!r} (known: {known})")
            if f.name in seen:
                raise ValueError(f"features[{i}].name: duplicate feature name {f.name!r} "
                                 f"(first at features[{seen[f.name]}])")
            seen[f.name] = i
        return features

    @model_validator(mode="after")
    def _every_table_used(self) -> "Workload":
        used = {f.table for f in self.resolved_features}
        unused = [t.name for t in self.tables if t.name not in used]
        if unused:
            raise ValueError(f"features: tables without a feature: {', '.join(unused[:5])}")
        if self.dense.top_mlp[-1] != 1:
            raise ValueError("dense.top_mlp: the last layer must have 1 output (the click logit)")
        self._constraints_name_tables()
        return self

    def _constraints_name_tables(self) -> None:
        """Every pattern of a constraint names at least one table; a co-located entry names two or more."""
        names = [t.name for t in self.tables]
        for i, c in enumerate(self.constraints.tables):
            for j, pattern in enumerate(c.tables):
                if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
                    known = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
                    raise ValueError(f"constraints.tables[{i}].tables[{j}]: {pattern!r} names no table (known: "
                                     f"{known})")
            if c.colocate and len(self.constrained_tables(i)) < 2:
                raise ValueError(f"constraints.tables[{i}].colocate: co-location needs two tables or more, "
                                 f"{c.tables!r} names {len(self.constrained_tables(i))}")

    def constrained_tables(self, index: int) -> list[str]:
        """The names of the tables constraint entry ``index`` applies to, in the workload's order."""
        patterns = self.constraints.tables[index].tables
        return [t.name for t in self.tables if any(fnmatch.fnmatchcase(t.name, p) for p in patterns)]

    # ---- derived quantities -------------------------------------------------------------------------------

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> "Workload":
        """pydantic's copy, less the quantities derived from the fields (the cached properties below): a copy
        with other fields derives its own (a copy with other tables never reads the original's access models)."""
        out = super().model_copy(update=update, deep=deep)
        for name in _DERIVED:
            out.__dict__.pop(name, None)
        return out

    @cached_property
    def resolved_features(self) -> list[FeatureSpec]:
        """Features with pooling factors filled in; one feature per table when the spec lists none."""
        by_name = {t.name: t for t in self.tables}
        if self.features is None:
            return [FeatureSpec(name=t.name, table=t.name, pooling_factor=t.pooling_factor) for t in self.tables]
        return [f if f.pooling_factor is not None else
                f.model_copy(update={"pooling_factor": by_name[f.table].pooling_factor}) for f in self.features]

    @cached_property
    def table_index(self) -> dict[str, int]:
        return {t.name: i for i, t in enumerate(self.tables)}

    @cached_property
    def _per_table_features(self) -> tuple[dict[str, float], dict[str, int]]:
        """(lookups per sample, features) per table name, from one pass over the features."""
        lookups: dict[str, float] = dict.fromkeys(self.table_index, 0.0)
        outputs: dict[str, int] = dict.fromkeys(self.table_index, 0)
        for f in self.resolved_features:
            lookups[f.table] = lookups.get(f.table, 0.0) + f.pooling_factor
            outputs[f.table] = outputs.get(f.table, 0) + 1
        return lookups, outputs

    def lookups_per_sample(self, table: str) -> float:
        """Rows gathered from ``table`` per sample: the sum of its features' pooling factors."""
        return self._per_table_features[0].get(table, 0.0)

    def outputs_per_sample(self, table: str) -> int:
        """Pooled vectors ``table`` produces per sample: one per feature using it."""
        return self._per_table_features[1].get(table, 0)

    @cached_property
    def access_models(self) -> dict[str, AccessModel]:
        """Access model per table name."""
        base = Path(self.source_path).parent if self.source_path else Path(".")
        return {t.name: build_access_model(t.access, t.rows, base) for t in self.tables}

    @cached_property
    def optimizer_state_factor(self) -> dict[str, float]:
        """Optimizer state per table as a multiple of the table's elements (rowwise_adagrad: 1/dim)."""
        if self.optimizer.name == "rowwise_adagrad":
            return {t.name: 1.0 / t.dim for t in self.tables}
        return {t.name: OPTIMIZER_STATE_ELEMENTS[self.optimizer.name] for t in self.tables}

    @property
    def resolved_dense_optimizer(self) -> OptimizerSpec:
        """The dense model's optimizer, resolved: ``dense_optimizer`` (its lr defaulting to the embeddings'), else
        the embeddings' ``optimizer`` itself (rowwise_adagrad then runs as plain Adagrad on the dense weights:
        program/dense_model.make_dense_optimizer)."""
        d = self.dense_optimizer
        if d is None:
            return self.optimizer
        return OptimizerSpec(name=d.name, lr=self.optimizer.lr if d.lr is None else d.lr)

    @property
    def num_pooled_features(self) -> int:
        return len(self.resolved_features)

    @property
    def embedding_dim_total(self) -> int:
        """Width of all pooled embeddings of one sample, concatenated."""
        by_name = {t.name: t for t in self.tables}
        return sum(by_name[f.table].dim for f in self.resolved_features)

    def total_bytes(self, with_optimizer: bool = True) -> float:
        """Bytes of all tables at their own dtype, optimizer state included (fp32 state)."""
        factors = self.optimizer_state_factor  # one dict for all tables (linear in tables)
        total = 0.0
        for t in self.tables:
            state = factors[t.name] * t.rows * t.dim * 4 if with_optimizer else 0.0
            total += t.size_bytes() + state
        return total

    def with_scaled_rows(self, scale: float) -> "Workload":
        """The same workload with every table's rows divided by ``scale`` (at least 1 row), skew kept.
        Raises SpecError for a scale that is not a finite number > 0, or one that makes a table larger
        than MAX_ROWS rows."""
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale) or scale <= 0:
            raise SpecError(f"the row scale must be a finite number > 0, got {scale!r}", file=self.source_path)
        tables = []
        for i, t in enumerate(self.tables):
            rows = t.rows / scale
            if not rows <= L.MAX_ROWS:
                raise SpecError(f"dividing {t.rows:,} rows by {scale:g} gives more than the {L.MAX_ROWS:,} rows "
                                "placer models", file=self.source_path, field=f"tables[{i}].rows")
            tables.append(t.model_copy(update={"rows": max(1, int(t.rows // scale))}))
        return self.model_copy(update={"tables": tables, "name": f"{self.name}/scale{scale:g}"})


def build_access_model(spec, rows: int, base_dir: Path) -> AccessModel:
    """The AccessModel a table's access spec describes (files resolved relative to ``base_dir``)."""
    if isinstance(spec, UniformSpec):
        return UniformAccess(rows)
    if isinstance(spec, ZipfSpec):
        return ZipfAccess(rows, spec.alpha)
    if isinstance(spec, HistogramSpec):
        x, y = cdf_from_histogram([b.accesses_per_row for b in spec.bins], [b.rows_fraction for b in spec.bins])
        return CdfAccess(rows, x, y, label="histogram")
    if isinstance(spec, CdfSpec):
        if spec.points is not None:
            pts = np.asarray(spec.points, dtype=np.float64)
            return CdfAccess(rows, pts[:, 0], pts[:, 1])
        arr = load_npy_guarded(base_dir / spec.file, what="access file")  # finite float64, or SpecError
        if arr.ndim == 2 and arr.shape[1] == 2:
            return CdfAccess(rows, arr[:, 0], arr[:, 1], label=f"cdf file {spec.file}")
        if arr.ndim != 1:
            raise ValueError(f"access file {spec.file} holds an array of shape {arr.shape}; expected coverage "
                             "points (shape (k, 2)) or per-row access counts (1-D)")
        x, y = cdf_from_counts(arr)
        return CdfAccess(rows, x, y, label=f"counts file {spec.file}")
    raise TypeError(f"unknown access spec {spec!r}")


#: The Workload's cached properties: what model_copy leaves for the copy to derive anew.
_DERIVED = tuple(name for name, value in vars(Workload).items() if isinstance(value, cached_property))


def load_workload(path: str | Path) -> Workload:
    """Load and validate a workload spec (YAML or JSON). Raises SpecError naming file and field."""
    data = read_document(path)
    expect_kind(data, path, "workload")
    wl = load_model(Workload, path, data)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    wl = wl.model_copy(update={"source_path": str(path), "sha256": digest})
    base = Path(path).parent
    for i, t in enumerate(wl.tables):  # access files and curves are checked now, not at first use
        try:
            build_access_model(t.access, t.rows, base)
        except SpecError as exc:  # the access file cannot be read (placer/specs/files.py says why)
            raise SpecError(f"access file {exc.file}: {exc.detail}", file=str(path),
                            field=f"tables[{i}].access.file") from None
        except ValueError as exc:
            from_file = getattr(t.access, "file", None)
            if from_file is not None:  # what the file holds is wrong: name the file and the field naming it
                message = str(exc) if from_file in str(exc) else f"access file {base / from_file}: {exc}"
                raise SpecError(message, file=str(path), field=f"tables[{i}].access.file") from None
            raise SpecError(str(exc), file=str(path), field=f"tables[{i}].access") from None
    return wl
