"""The Plan: where every table lives, with the prediction and the solver's account. JSON in and out.

Row ids vs ranks: a shard's ``rows`` is a range of row ids. Row ids are not popularity ranks: the hottest
rows of a table are spread evenly over its id space (the runner draws ids through a fixed seeded
permutation of ranks), so a shard of n rows receives n/N of the table's lookups and its own hottest
``hbm_rows`` rows receive coverage(hbm_rows / n) of those. A shard's ``hbm_rows`` live in the HBM of
``device``; its ``host_rows`` live in the DRAM of that device's host and are read by the GPU across PCIe
(UVM-style). For ``sharding: host`` the shard's device is a host and the CPU does the lookups.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator, with_config
from typing_extensions import TypedDict

from placer.errors import SpecError
from placer.forms.names import CPU_LOOKUP, SHARDING_NAMES
from placer.forms.tiers import tier_label
from placer.specs.detect import detect_kind
from placer.specs.documents import parse_json
from placer.specs.loading import load_model, read_document
from placer.specs.plausible import SpecWarning

#: the names of the shardings (placer/forms/names.py; each form's module: placer/forms)
Sharding = Literal[SHARDING_NAMES]
SCHEMA_VERSION = 1


class _PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Shard(_PlanModel):
    """A piece of a table on one device. Ranges are half-open [start, stop). Its hottest ``hbm_rows`` rows live in
    the device's HBM, the other ``host_rows`` (the cold rows) in its host's DRAM, or, where ``cold_memory`` names
    one, in that memory tier of its node (the hardware spec's ``tiers``: placer/forms/tiers.py)."""

    device: str
    rows: tuple[int, int]
    cols: tuple[int, int]
    hbm_rows: int = Field(ge=0)
    host_rows: int = Field(ge=0)
    cold_memory: str | None = None

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

    @property
    def is_split(self) -> bool:
        """Whether the shard keeps some rows in HBM and some in host memory (placer/forms/tiers.py)."""
        return 0 < self.hbm_rows < self.num_rows


class QRForm(_PlanModel):
    """Quotient-remainder rows (placer/specs/compression.py): ceil(rows / collisions) + collisions rows."""

    collisions: int = Field(ge=2)
    combine: Literal["mult", "add"] = "mult"

    @property
    def text(self) -> str:
        return f"qr k={self.collisions}"


class TTForm(_PlanModel):
    """Tensor-train rows (TT-Rec): three fp32 cores of inner ranks ``ranks`` = [r1, r2]; the row and column
    factors follow from the table's rows and dim (program/tt_shape.py, one function for pricing and runner)."""

    ranks: tuple[int, int]

    @property
    def text(self) -> str:
        return f"tt r={self.ranks[0]}x{self.ranks[1]}"

    @model_validator(mode="after")
    def _positive(self) -> "TTForm":
        if min(self.ranks) < 1:
            raise ValueError(f"TT ranks must be at least 1, got {list(self.ranks)}")
        return self


class Compression(_PlanModel):
    """The compressed form a placement stores its table in: ``{"qr": {...}}``, ``{"tt": {"ranks": [r1, r2]}}``
    or ``{"int8": true}`` (frozen tables only: int8 rows with an fp32 scale and bias each). Exactly one form."""

    qr: QRForm | None = None
    tt: TTForm | None = None
    int8: bool = False

    @model_validator(mode="after")
    def _one_form(self) -> "Compression":
        if (self.qr is not None) + (self.tt is not None) + bool(self.int8) != 1:
            raise ValueError("name exactly one compressed form: {\"qr\": {\"collisions\": k}}, {\"tt\": {\"ranks\": "
                             "[r1, r2]}} or {\"int8\": true}")
        return self

    @property
    def form(self) -> str:
        return next(name for name in type(self).model_fields if getattr(self, name) not in (None, False))


class Placement(_PlanModel):
    """Where one table lives: its sharding, storage precision and shards; ``compression`` the compressed form of
    its rows (None: the table's rows as they are). Whether the table is trained is the workload's (``frozen``)."""

    table: str
    sharding: Sharding
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    shards: list[Shard] = Field(min_length=1)
    compression: Compression | None = None
    #: "per_node": a node-local table (the workload's ``node_local``): one replica on every node, laid out alike on
    #: each (``shards`` lists every node's, node by node), trained on that node's samples alone; None: one copy
    replicated: Literal["per_node"] | None = None

    @property
    def node_local(self) -> bool:
        """Whether the table is replicated per node and trained node-locally (``replicated``)."""
        return self.replicated == "per_node"

    @property
    def form(self) -> str | None:
        """'qr', 'tt', 'int8', or None (uncompressed)."""
        return self.compression.form if self.compression is not None else None

    @property
    def form_text(self) -> str | None:
        """The compressed form for people: 'qr k=4', 'tt r=16x16', 'int8'; None when uncompressed."""
        c = self.compression
        if c is None:
            return None
        return "int8" if c.int8 else getattr(c, c.form).text

    @property
    def hot_fraction(self) -> float:
        """Fraction of the table's rows (over all shards) that sit in HBM."""
        total = sum(s.num_rows * s.num_cols for s in self.shards)
        return sum(s.hbm_rows * s.num_cols for s in self.shards) / total

    def label(self) -> str:
        """Short human description: 'table_wise node0/gpu1 hot 10%'."""
        devices = sorted({s.device for s in self.shards})
        where = devices[0] if len(devices) == 1 else f"{len(devices)} devices"
        if self.node_local:  # 'node*/gpu1', '8 GPUs per node'
            local = sorted({d.split("/", 1)[-1] for d in devices})
            where = f"node*/{local[0]}" if len(local) == 1 else f"{len(local)} GPUs per node"
        kind = self.sharding + ("" if self.sharding in CPU_LOOKUP else tier_label(self.hot_fraction))
        kind += "".join(sorted({f" cold in {s.cold_memory}" for s in self.shards if s.cold_memory and s.host_rows}))
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        form = f" {self.form_text}" if self.compression is not None else ""
        return f"{kind} {where}{prec}{form}{' node_local' if self.node_local else ''}"


#: a finite, non-negative number (seconds, bytes); ints are accepted, strings are not
_Amount = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]


@with_config(ConfigDict(extra="allow"))
class PredictedDevice(TypedDict, total=False):
    """One device of the 'predicted' block: bytes used and held, busy seconds per 'phase:resource kind'. Bytes
    used count against the capacity less the reserve (the spec's hbm_reserve_GiB, dram_reserve_GiB; absent in
    plans written before it was recorded: read as none)."""

    hbm_used_bytes: _Amount
    hbm_capacity_bytes: _Amount
    hbm_reserve_bytes: _Amount
    host_used_bytes: _Amount
    host_capacity_bytes: _Amount
    host_reserve_bytes: _Amount
    tier_used_bytes: _Amount
    tier_capacity_bytes: _Amount
    tier_reserve_bytes: _Amount
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
    """The spec a plan was made for: its name, the sha256 of its document and (plans from placer solve) its
    values by field path (``spec_fields``), so a changed spec can be named field by field when re-priced."""

    name: str
    sha256: str | None = None
    fields: dict[str, Any] | None = None


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
    #: wall seconds per stage of the solve (planner/budget.py), e.g. {"baselines": s, "stage 1": s, ...}; None in
    #: plans written before it was recorded, and for the baselines
    stage_times_s: dict[str, _Amount] | None = None
    #: a solve under a work limit (planner/budget.py): the limit, in work units (nominal milliseconds); None for
    #: solves under a time limit, whose plan can vary with the machine's speed
    work_limit: _Amount | None = None
    #: the search's counted work, in work units, under either limit (two plans of the same inputs made under a time
    #: limit on different machines show here how much each searched)
    work_used: _Amount | None = None
    #: ... and the work units counted per stage (stages as in stage_times_s)
    stage_work: dict[str, _Amount] | None = None
    #: the stages whose search stopped because the limit was spent (planner/budget.py): under a time limit, those
    #: whose result a faster or busier machine can change; [] if none did; None in plans written before
    ran_out: list[str] | None = None


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


#: lists of plain values longer than this are recorded by digest, strings longer than this too
_LIST_KEEP = 8
_STR_KEEP = 120
#: changes a warning names before "and N more"
_CHANGES_SHOWN = 6


def _digest(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    n = f"{len(value)} values, " if isinstance(value, list) else ""
    return f"<{n}sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}>"


def _flatten(x, at: str, out: dict) -> None:
    if isinstance(x, dict):
        if not x:
            out[at] = {}
        for k, v in x.items():
            _flatten(v, f"{at}.{k}" if at else str(k), out)
    elif isinstance(x, list):
        names = [v.get("name") for v in x if isinstance(v, dict)]
        if x and len(names) == len(x) and all(isinstance(n, str) for n in names) and len(set(names)) == len(x):
            for v in x:  # a list of named items (tables, features): keyed by name, so a reorder is no change
                _flatten({k: w for k, w in v.items() if k != "name"} or {"name": v["name"]}, f"{at}.{v['name']}", out)
        elif all(not isinstance(v, dict) for v in x):  # values, pairs (a cdf's points): one value
            out[at] = list(x) if len(x) <= _LIST_KEEP else _digest(x)
        else:
            for i, v in enumerate(x):
                _flatten(v, f"{at}[{i}]", out)
    elif isinstance(x, str) and len(x) > _STR_KEEP:
        out[at] = _digest(x)
    else:
        out[at] = x


def spec_fields(spec) -> dict[str, Any]:
    """A hardware spec's or workload's values by field path ('batch_size', 'tables.t3.rows',
    'templates.dgx.gpus.hbm_GiB'; named list items keyed by name; long lists and strings by digest): what a plan
    records of the specs it was made for, so ``spec_changes`` can say what changed."""
    out: dict[str, Any] = {}
    _flatten(spec.model_dump(mode="json"), "", out)
    return out


def record_specs(plan: Plan, hardware, workload) -> Plan:
    """``plan`` with the name, sha256 and fields of the hardware spec and workload it was made for."""
    return plan.model_copy(update={
        "hardware": SpecRef(name=hardware.name, sha256=hardware.sha256, fields=spec_fields(hardware)),
        "workload": SpecRef(name=workload.name, sha256=workload.sha256, fields=spec_fields(workload))})


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v) if not isinstance(v, str) else v


def _diff(old: dict, new: dict) -> list[str]:
    """'batch_size 65536 -> 131072', 'tables.t3 removed', 'tables.t9 added', ... in field order."""
    out, done = [], set()

    def entity(path: str) -> str:  # 'tables.t3' of 'tables.t3.rows'
        return ".".join(path.split(".")[:2])

    def under(d: dict, k: str) -> dict:  # the fields below k: {'kind': 'infiniband', ...} of 'fabric'
        return {p[len(k) + 1:]: v for p, v in d.items() if p.startswith(k + ".")}

    def brief(d: dict) -> str:
        return ", ".join(f"{p} {_show(v)}" for p, v in list(d.items())[:4]) + (", ..." if len(d) > 4 else "")

    entities = {id(old): {entity(p) for p in old}, id(new): {entity(p) for p in new}}

    def one_side(a: dict, b: dict, k: str, gone: bool) -> None:
        e = entity(k)
        parts = k.split(".")
        if any(".".join(parts[:i]) in b for i in range(1, len(parts))):
            return  # a block that became a value ({kind: ...} -> null): named once, from that value's side
        if e != k and e not in done and e not in entities[id(b)]:
            done.add(e)
            out.append(f"{e} {'removed' if gone else 'added'}")
        elif e != k and e in done:
            return
        elif under(b, k) and k not in done:  # a value became a block (fabric: null -> {kind: ...}) or back
            done.add(k)
            out.append(f"{k} {_show(a[k])} -> {brief(under(b, k))}" if gone else
                       f"{k} {brief(under(b, k))} -> {_show(a[k])}")
        elif not any(k.startswith(d + ".") for d in done):
            out.append(f"{k} {_show(a[k])} -> (none)" if gone else f"{k} (none) -> {_show(a[k])}")

    for k, v in old.items():
        if k not in new:
            one_side(old, new, k, True)
        elif new[k] != v:
            out.append(f"{k} {_show(v)} -> {_show(new[k])}")
    for k in new:
        if k not in old:
            one_side(new, old, k, False)
    return out


def spec_changes(plan: Plan, hardware, workload) -> list[str]:
    """One sentence per spec (hardware, workload) that differs from the one the plan was made for: the changed
    fields with old -> new values when the plan records them (``record_specs``), else the two sha256s. Empty
    when the hashes agree or either side has none (a hand-written plan, a spec built in memory)."""
    out = []
    for ref, spec, what in ((plan.hardware, hardware, "hardware"), (plan.workload, workload, "workload")):
        if not (ref.sha256 and spec.sha256) or ref.sha256 == spec.sha256:
            continue
        head = f"the {what} differs from the one the plan was made for"
        if ref.fields is None:
            out.append(f"{head} (sha256 {ref.sha256[:12]} -> {spec.sha256[:12]}); re-priced")
            continue
        changes = _diff(ref.fields, spec_fields(spec))
        if not changes:
            out.append(f"{head} (sha256 {ref.sha256[:12]} -> {spec.sha256[:12]}), in no field the plan records; "
                       "re-priced")
            continue
        more = f"; and {len(changes) - _CHANGES_SHOWN} more" if len(changes) > _CHANGES_SHOWN else ""
        out.append(f"{head}: {'; '.join(changes[:_CHANGES_SHOWN])}{more}; re-priced")
    return out


def plan_from_json(text: str, file: str | None = None) -> Plan:
    """Parse a plan from a JSON string (used by tests and the API)."""
    data = parse_json(text, file or "<plan>")
    if not isinstance(data, dict):
        raise SpecError(f"expected a JSON object at the top level, found {type(data).__name__}", file=file or "<plan>")
    return load_model(Plan, file or "<plan>", data)
