"""Workload spec: embedding tables (with access skew), features, the dense model, batch and optimizer.

Units: ``rows`` and ``dim`` are counts; ``pooling_factor`` is lookups per sample per feature;
``batch_size`` is the GLOBAL batch (samples per training step over all devices).
"""
from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, ValidationInfo, field_validator, model_validator

from placer.specs.access import (AccessModel, CdfAccess, UniformAccess, ZipfAccess, cdf_from_counts,
                                 cdf_from_histogram)
from placer.specs.common import StrictModel
from placer.specs.loading import load_model, read_document
from placer.units import element_bytes

StorageDtype = Literal["fp32", "fp16"]

#: Optimizer state held per embedding element, as a multiple of the row's own elements (DESIGN.md).
OPTIMIZER_STATE_ELEMENTS = {"sgd": 0.0, "adagrad": 1.0, "adam": 2.0}


class UniformSpec(StrictModel):
    kind: Literal["uniform"] = "uniform"


class ZipfSpec(StrictModel):
    kind: Literal["zipf"] = "zipf"
    alpha: PositiveFloat


class CdfSpec(StrictModel):
    """Coverage points [row_fraction, lookup_fraction], or a .npy beside the spec holding them (shape (k, 2))
    or per-row access counts (1-D)."""

    kind: Literal["cdf"] = "cdf"
    points: list[tuple[float, float]] | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "CdfSpec":
        if (self.points is None) == (self.file is None):
            raise ValueError("give exactly one of points or file")
        return self


class HistogramBin(StrictModel):
    accesses_per_row: float = Field(ge=0)
    rows_fraction: float = Field(gt=0, le=1)


class HistogramSpec(StrictModel):
    """Bins of rows by access count (as in the learned sharders' 17-bin table features)."""

    kind: Literal["histogram"] = "histogram"
    bins: list[HistogramBin] = Field(min_length=1)


AccessSpec = Annotated[Union[UniformSpec, ZipfSpec, CdfSpec, HistogramSpec], Field(discriminator="kind")]


class TableSpec(StrictModel):
    """One embedding table."""

    name: str = Field(min_length=1)
    rows: PositiveInt
    dim: PositiveInt
    dtype: StorageDtype = "fp32"
    pooling_factor: PositiveFloat = Field(default=1.0, description="lookups per sample for each feature using it")
    access: AccessSpec = Field(default_factory=UniformSpec)
    allow_fp16: bool = Field(default=False, description="the planner may store this table at fp16")

    def row_bytes(self, dtype: str | None = None) -> int:
        """Bytes of one row at ``dtype`` (default: the table's own)."""
        return self.dim * element_bytes(dtype or self.dtype)

    def size_bytes(self, dtype: str | None = None) -> int:
        """Bytes of the whole table at ``dtype``, weights only."""
        return self.rows * self.row_bytes(dtype)


class FeatureSpec(StrictModel):
    """A sparse feature: looks up ``pooling_factor`` rows of ``table`` per sample and pools them (sum)."""

    name: str = Field(min_length=1)
    table: str
    pooling_factor: PositiveFloat | None = None


class DotInteraction(StrictModel):
    kind: Literal["dot"] = "dot"


class ConcatInteraction(StrictModel):
    kind: Literal["concat"] = "concat"


class Dcnv2Interaction(StrictModel):
    kind: Literal["dcnv2"] = "dcnv2"
    layers: PositiveInt = 3
    rank: PositiveInt = 512


Interaction = Annotated[Union[DotInteraction, ConcatInteraction, Dcnv2Interaction], Field(discriminator="kind")]


class DenseSpec(StrictModel):
    """The dense part of a DLRM: bottom MLP over dense features, interaction, top MLP."""

    num_dense_features: int = Field(default=13, ge=0)
    bottom_mlp: list[PositiveInt] = Field(default_factory=list)
    interaction: Interaction = Field(default_factory=DotInteraction)
    top_mlp: list[PositiveInt] = Field(min_length=1)
    dtype: Literal["fp32", "tf32", "bf16", "fp16"] = "fp32"


class OptimizerSpec(StrictModel):
    name: Literal["sgd", "adagrad", "rowwise_adagrad", "adam"] = "sgd"
    lr: PositiveFloat = 0.01


class Workload(StrictModel):
    """A training job: tables, features, dense model, global batch, optimizer."""

    schema_version: Literal[1] = 1
    name: str
    description: str = ""
    batch_size: PositiveInt = Field(description="global batch: samples per step over all devices")
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    tables: list[TableSpec] = Field(min_length=1)
    features: list[FeatureSpec] | None = None
    dense: DenseSpec
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
        return self

    # ---- derived quantities -------------------------------------------------------------------------------

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

    def lookups_per_sample(self, table: str) -> float:
        """Rows gathered from ``table`` per sample: the sum of its features' pooling factors."""
        return sum(f.pooling_factor for f in self.resolved_features if f.table == table)

    def outputs_per_sample(self, table: str) -> int:
        """Pooled vectors ``table`` produces per sample: one per feature using it."""
        return sum(1 for f in self.resolved_features if f.table == table)

    @cached_property
    def access_models(self) -> dict[str, AccessModel]:
        """Access model per table name."""
        base = Path(self.source_path).parent if self.source_path else Path(".")
        return {t.name: build_access_model(t.access, t.rows, base) for t in self.tables}

    @property
    def optimizer_state_factor(self) -> dict[str, float]:
        """Optimizer state per table as a multiple of the table's elements (rowwise_adagrad: 1/dim)."""
        if self.optimizer.name == "rowwise_adagrad":
            return {t.name: 1.0 / t.dim for t in self.tables}
        return {t.name: OPTIMIZER_STATE_ELEMENTS[self.optimizer.name] for t in self.tables}

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
        total = 0.0
        for t in self.tables:
            state = self.optimizer_state_factor[t.name] * t.rows * t.dim * 4 if with_optimizer else 0.0
            total += t.size_bytes() + state
        return total

    def with_scaled_rows(self, scale: float) -> "Workload":
        """The same workload with every table's rows divided by ``scale`` (at least 1 row), skew kept."""
        tables = [t.model_copy(update={"rows": max(1, int(t.rows // scale))}) for t in self.tables]
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
        arr = np.load(base_dir / spec.file)
        if arr.ndim == 2 and arr.shape[1] == 2:
            return CdfAccess(rows, arr[:, 0], arr[:, 1], label=f"cdf file {spec.file}")
        x, y = cdf_from_counts(arr)
        return CdfAccess(rows, x, y, label=f"counts file {spec.file}")
    raise TypeError(f"unknown access spec {spec!r}")


def load_workload(path: str | Path) -> Workload:
    """Load and validate a workload spec (YAML or JSON). Raises SpecError naming file and field."""
    from placer.errors import SpecError

    data = read_document(path)
    wl = load_model(Workload, path, data)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    wl = wl.model_copy(update={"source_path": str(path), "sha256": digest})
    for i, t in enumerate(wl.tables):  # access files and curves are checked now, not at first use
        try:
            build_access_model(t.access, t.rows, Path(path).parent)
        except FileNotFoundError as exc:
            raise SpecError(f"access file not found: {exc.filename}", file=str(path),
                            field=f"tables[{i}].access.file") from None
        except ValueError as exc:
            raise SpecError(str(exc), file=str(path), field=f"tables[{i}].access") from None
    return wl
