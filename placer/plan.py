"""The Plan: where every table lives, with the prediction and the solver's account. JSON in and out.

Row ids vs ranks: a shard's ``rows`` is a range of row ids. Row ids are not popularity ranks: the hottest
rows of a table are spread evenly over its id space (the runner draws ids through a fixed seeded
permutation of ranks), so a shard of n rows receives n/N of the table's lookups and its own hottest
``hbm_rows`` rows receive coverage(hbm_rows / n) of those. A shard's ``hbm_rows`` live in the HBM of
``device``; its ``host_rows`` live in the DRAM of that device's host and are read by the GPU across PCIe
(UVM-style). For ``sharding: host`` the shard's device is a host and the CPU does the lookups.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator, with_config
from typing_extensions import TypedDict

from placer.errors import SpecError
from placer.specs.detect import detect_kind
from placer.specs.documents import parse_json
from placer.specs.loading import load_model, read_document

Sharding = Literal["table_wise", "row_wise", "column_wise", "data_parallel", "host"]
SCHEMA_VERSION = 1


class _PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Shard(_PlanModel):
    """A piece of a table on one device. Ranges are half-open [start, stop)."""

    device: str
    rows: tuple[int, int]
    cols: tuple[int, int]
    hbm_rows: int = Field(ge=0)
    host_rows: int = Field(ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> "Shard":
        if not (0 <= self.rows[0] < self.rows[1]):
            raise ValueError(f"rows {list(self.rows)}: expected 0 <= start < stop")
        if not (0 <= self.cols[0] < self.cols[1]):
            raise ValueError(f"cols {list(self.cols)}: expected 0 <= start < stop")
        if self.hbm_rows + self.host_rows != self.num_rows:
            raise ValueError(f"hbm_rows + host_rows = {self.hbm_rows + self.host_rows}, "
                             f"but the shard has {self.num_rows} rows")
        return self

    @property
    def num_rows(self) -> int:
        return self.rows[1] - self.rows[0]

    @property
    def num_cols(self) -> int:
        return self.cols[1] - self.cols[0]


class Placement(_PlanModel):
    """Where one table lives: its sharding, storage precision and shards."""

    table: str
    sharding: Sharding
    precision: Literal["fp32", "fp16"] = "fp32"
    shards: list[Shard] = Field(min_length=1)

    @property
    def hot_fraction(self) -> float:
        """Fraction of the table's rows (over all shards) that sit in HBM."""
        total = sum(s.num_rows * s.num_cols for s in self.shards)
        return sum(s.hbm_rows * s.num_cols for s in self.shards) / total

    def label(self) -> str:
        """Short human description: 'table_wise node0/gpu1 hot 10%'."""
        devices = sorted({s.device for s in self.shards})
        where = devices[0] if len(devices) == 1 else f"{len(devices)} devices"
        kind = self.sharding
        if self.sharding != "host":
            f = self.hot_fraction
            if f == 0:
                kind += " uvm"
            elif f < 1:
                kind += f" hot {f:.0%}"
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        return f"{kind} {where}{prec}"


#: a finite, non-negative number (seconds, bytes); ints are accepted, strings are not
_Amount = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]


@with_config(ConfigDict(extra="allow"))
class PredictedDevice(TypedDict, total=False):
    """One device of the 'predicted' block: bytes used and held, busy seconds per 'phase:resource kind'."""

    hbm_used_bytes: _Amount
    hbm_capacity_bytes: _Amount
    host_used_bytes: _Amount
    host_capacity_bytes: _Amount
    busy_s: dict[str, _Amount]


@with_config(ConfigDict(extra="allow"))
class Predicted(TypedDict, total=False):
    """The 'predicted' block of a plan file (simulate.predict writes it). It is what the file SAYS: its types
    and ranges are validated on load, its numbers are not re-derived (re-price the plan for that: simulate)."""

    step_time_s: _Amount
    throughput_samples_per_s: Annotated[float, Field(ge=0, allow_inf_nan=True, strict=True)] | None
    phases_s: dict[str, _Amount]
    phase_bottlenecks: dict[str, str]
    devices: dict[str, PredictedDevice]
    bottleneck: str


class SpecRef(_PlanModel):
    name: str
    sha256: str | None = None


class SolverInfo(_PlanModel):
    """The solver's account of how the plan was found (seconds, relative gaps). A claim of the file: a plan
    read back is not re-solved, so its status is reported as recorded, not as proven."""

    backend: str
    status: Literal["optimal", "feasible", "infeasible", "heuristic"]
    objective_step_time_s: _Amount | None = None
    lower_bound_step_time_s: _Amount | None = None
    gap: _Amount | None = None
    gap_tolerance: _Amount | None = None
    time_limit_s: _Amount | None = None
    wall_s: _Amount | None = None
    num_variables: int | None = Field(default=None, ge=0)
    num_constraints: int | None = Field(default=None, ge=0)
    warm_start: str | None = None
    note: str | None = None
    #: the second objective (planner/tiebreak.py): {objective, before, after, step_time_s, ...}
    tie_break: dict | None = None


class Plan(_PlanModel):
    """A placement of every table of a workload on a machine, with its prediction (see simulate.py)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    hardware: SpecRef
    workload: SpecRef
    method: str
    placements: list[Placement] = Field(min_length=1)
    predicted: Predicted | None = None
    solver: SolverInfo | None = None
    #: step time at other access skews (placer/skew.py robustness): {rule, step_time_s: {"0.8": s, "1": s, ...}}
    robustness: dict | None = None

    def to_json(self, indent: int | None = 1) -> str:
        return self.model_dump_json(indent=indent, exclude_none=True)

    def write(self, path: str | Path) -> None:
        """Write the plan JSON to ``path``; SpecError naming the file when it cannot be written."""
        try:
            Path(path).write_text(self.to_json() + "\n", encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"cannot write the plan ({exc.strerror or exc})", file=str(path)) from None

    def placement_of(self, table: str) -> Placement:
        for p in self.placements:
            if p.table == table:
                return p
        raise KeyError(table)


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan JSON (structure only; see ``check_plan`` for hardware/workload checks)."""
    data = read_document(path)
    if isinstance(data, dict) and "placements" not in data:
        try:
            kind = detect_kind(data, path)
        except SpecError:
            kind = None
        if kind in ("hardware", "workload"):
            raise SpecError(f"this is a {kind} spec, not a plan (a plan has 'placements'; placer solve writes one)",
                            file=str(path))
    return load_model(Plan, path, data)


def check_plan(plan: Plan, topology, workload, *, file: str | None = None, check_hashes: bool = True) -> None:
    """Refuse a plan that does not match its hardware or workload: hash mismatch, unknown device, missing or
    unknown table, rows or columns not covered exactly once, devices of the wrong kind. Raises SpecError."""
    hw = topology.spec
    if check_hashes:
        for ref, spec, what in ((plan.hardware, hw, "hardware"), (plan.workload, workload, "workload")):
            if ref.sha256 and spec.sha256 and ref.sha256 != spec.sha256:
                raise SpecError(f"plan was made for {what} {ref.name!r} with sha256 {ref.sha256[:12]}..., "
                                f"but {spec.source_path or spec.name} has sha256 {spec.sha256[:12]}...",
                                file=file, field=f"{what}.sha256")
    tables = {t.name: t for t in workload.tables}
    seen = set()
    gpus, hosts = set(topology.gpus), set(topology.hosts)
    for i, p in enumerate(plan.placements):
        where = f"placements[{i}]"
        if p.table not in tables:
            raise SpecError(f"unknown table {p.table!r}", file=file, field=f"{where}.table")
        if p.table in seen:
            raise SpecError(f"table {p.table!r} placed twice", file=file, field=f"{where}.table")
        seen.add(p.table)
        t = tables[p.table]
        if p.precision == "fp16" and t.dtype == "fp32" and not t.allow_fp16:
            raise SpecError(f"table {p.table!r} may not be stored at fp16 (allow_fp16 is false)",
                            file=file, field=f"{where}.precision")
        for j, s in enumerate(p.shards):
            f = f"{where}.shards[{j}]"
            allowed = hosts if p.sharding == "host" else gpus
            if s.device not in allowed:
                kind = "host" if p.sharding == "host" else "GPU"
                raise SpecError(f"unknown {kind} device {s.device!r} for sharding {p.sharding}",
                                file=file, field=f"{f}.device")
            if s.rows[1] > t.rows or s.cols[1] > t.dim:
                raise SpecError(f"shard rows {list(s.rows)} x cols {list(s.cols)} exceed the table's "
                                f"{t.rows} rows x {t.dim} dims", file=file, field=f)
            if p.sharding == "host" and s.hbm_rows:
                raise SpecError("a host shard has no HBM rows", file=file, field=f"{f}.hbm_rows")
        _check_coverage(p, t, file, where)
    missing = [n for n in tables if n not in seen]
    if missing:
        raise SpecError(f"tables without a placement: {', '.join(missing[:8])}"
                        f"{' ...' if len(missing) > 8 else ''}", file=file, field="placements")


def _check_coverage(p: Placement, t, file, where) -> None:
    """Every (row, col) of the table covered exactly once (data_parallel: once per replica, full table)."""
    if p.sharding == "data_parallel":
        for j, s in enumerate(p.shards):
            if s.rows != (0, t.rows) or s.cols != (0, t.dim):
                raise SpecError("a data_parallel shard must hold the whole table", file=file,
                                field=f"{where}.shards[{j}]")
        if len({s.device for s in p.shards}) != len(p.shards):
            raise SpecError("a data_parallel table has two replicas on one device", file=file, field=where)
        return
    area = sum(s.num_rows * s.num_cols for s in p.shards)
    # Column blocks x row blocks must tile the table: check by sweeping every distinct column band.
    bounds = sorted({c for s in p.shards for c in s.cols})
    for lo, hi in zip(bounds, bounds[1:]):
        spans = sorted(s.rows for s in p.shards if s.cols[0] <= lo and s.cols[1] >= hi)
        pos = 0
        for a, b in spans:
            if a != pos:
                raise SpecError(f"rows not covered exactly once in columns [{lo}, {hi}): "
                                f"gap or overlap at row {min(a, pos)}", file=file, field=where)
            pos = b
        if pos != t.rows:
            raise SpecError(f"rows [{pos}, {t.rows}) of columns [{lo}, {hi}) are not placed", file=file,
                            field=where)
    if bounds[0] != 0 or bounds[-1] != t.dim or area != t.rows * t.dim:
        raise SpecError(f"shards cover {area:,} of the table's {t.rows * t.dim:,} cells", file=file, field=where)


def plan_from_json(text: str, file: str | None = None) -> Plan:
    """Parse a plan from a JSON string (used by tests and the API)."""
    data = parse_json(text, file or "<plan>")
    if not isinstance(data, dict):
        raise SpecError(f"expected a JSON object at the top level, found {type(data).__name__}", file=file or "<plan>")
    return load_model(Plan, file or "<plan>", data)
