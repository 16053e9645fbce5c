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
from placer.node_local_check import check_per_node
from placer.specs.detect import detect_kind
from placer.specs.documents import parse_json
from placer.specs.loading import load_model, read_document
from placer.specs.plausible import SpecWarning

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


class QRForm(_PlanModel):
    """Quotient-remainder rows (placer/specs/compression.py): ceil(rows / collisions) + collisions rows."""

    collisions: int = Field(ge=2)
    combine: Literal["mult", "add"] = "mult"


class TTForm(_PlanModel):
    """Tensor-train rows (TT-Rec): three fp32 cores of inner ranks ``ranks`` = [r1, r2]; the row and column
    factors follow from the table's rows and dim (program/tt_shape.py, one function for pricing and runner)."""

    ranks: tuple[int, int]

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
        return "qr" if self.qr is not None else "tt" if self.tt is not None else "int8"


class Placement(_PlanModel):
    """Where one table lives: its sharding, storage precision and shards; ``compression`` the compressed form of
    its rows (None: the table's rows as they are). Whether the table is trained is the workload's (``frozen``)."""

    table: str
    sharding: Sharding
    precision: Literal["fp32", "fp16"] = "fp32"
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
        return f"qr k={c.qr.collisions}" if c.qr is not None else \
            f"tt r={c.tt.ranks[0]}x{c.tt.ranks[1]}" if c.tt is not None else "int8"

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
        kind = self.sharding
        if self.sharding != "host":
            f = self.hot_fraction
            if f == 0:
                kind += " uvm"
            elif f < 1:
                kind += f" hot {f:.0%}"
        prec = "" if self.precision == "fp32" else f" {self.precision}"
        form = f" {self.form_text}" if self.compression is not None else ""
        return f"{kind} {where}{prec}{form}{' node_local' if self.node_local else ''}"


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


def check_plan(plan: Plan, topology, workload, *, file: str | None = None, check_hashes: bool = True) -> None:
    """Refuse a plan that does not match its hardware or workload: unknown device, missing or unknown table,
    rows or columns not covered exactly once, devices of the wrong kind. Raises SpecError. A hardware spec or
    workload that differs from the one the plan was made for is no refusal: with ``check_hashes`` it is a
    SpecWarning naming what changed (``spec_changes``), and the plan is checked and priced against it."""
    hw = topology.spec
    if check_hashes:
        for change in spec_changes(plan, hw, workload):
            warnings.warn(f"{file}: {change}" if file else change, SpecWarning, stacklevel=2)
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
        if p.compression is not None:
            _check_form(p, t, file, where)
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
        if p.replicated is not None:  # every node's replica alike (node_local_check.py), node0's a placement
            one = check_per_node(p, t, topology, file, where)
            _check_coverage(one, t, file, where)
            _check_label(one, t, file, where)
        elif geometry_label(p, t) is not None:  # several whole copies labelled table_wise: data_parallel, not overlap
            _check_label(p, t, file, where)
            _check_coverage(p, t, file, where)
        else:  # coverage faults first; a grid that covers the table exactly: no label describes it
            _check_coverage(p, t, file, where)
            _check_label(p, t, file, where)
    missing = [n for n in tables if n not in seen]
    if missing:
        raise SpecError(f"tables without a placement: {', '.join(missing[:8])}"
                        f"{' ...' if len(missing) > 8 else ''}", file=file, field="placements")


def _check_form(p: Placement, t, file, where) -> None:
    """A compressed placement: its form allowed by the table's workload entry (``compression``), on one GPU with
    every row in HBM (the only geometry priced and run compressed)."""
    c, allowed = p.compression, t.compression
    field = f"{where}.compression"
    if c.qr is not None:
        if allowed is None or allowed.qr is None:
            raise SpecError(f"table {p.table!r} is stored QR-compressed, but its workload entry does not allow it "
                            "(compression.qr)", file=file, field=field)
        if c.qr.collisions > allowed.qr.max_collisions:
            raise SpecError(f"table {p.table!r}: QR collisions {c.qr.collisions} exceed the workload's "
                            f"compression.qr.max_collisions {allowed.qr.max_collisions}", file=file,
                            field=f"{field}.qr.collisions")
        if c.qr.combine != allowed.qr.combine:
            raise SpecError(f"table {p.table!r}: QR combine {c.qr.combine!r} is not the workload's "
                            f"{allowed.qr.combine!r}", file=file, field=f"{field}.qr.combine")
        if c.qr.collisions > t.rows // 2:
            raise SpecError(f"table {p.table!r}: QR collisions {c.qr.collisions} leave fewer than 2 quotient rows "
                            f"of its {t.rows} rows", file=file, field=f"{field}.qr.collisions")
    elif c.tt is not None:
        _check_tt(p, t, file, field)
    elif allowed is None or not allowed.int8 or not t.frozen:
        raise SpecError(f"table {p.table!r} is stored int8, but its workload entry does not allow it "
                        "(compression.int8 on a frozen table)", file=file, field=field)
    s = p.shards[0]
    if p.sharding != "table_wise" or len(p.shards) != 1 or s.hbm_rows != s.num_rows:
        raise SpecError(f"table {p.table!r}: a compressed table must be table_wise on one GPU with every row in "
                        f"HBM (hbm_rows = rows), got {p.label()}", file=file, field=f"{where}.sharding")


def _check_tt(p: Placement, t, file, field) -> None:
    """A TT placement: allowed by the workload (compression.tt) at exactly its ranks, on a trained table, fp32."""
    allowed = t.compression.tt if t.compression is not None else None
    if allowed is None:
        raise SpecError(f"table {p.table!r} is stored TT-compressed, but its workload entry does not allow it "
                        "(compression.tt)", file=file, field=field)
    if tuple(p.compression.tt.ranks) != tuple(allowed.ranks):
        raise SpecError(f"table {p.table!r}: TT ranks {list(p.compression.tt.ranks)} are not the workload's "
                        f"compression.tt.ranks {list(allowed.ranks)}", file=file, field=f"{field}.tt.ranks")
    if t.frozen or p.precision != "fp32":
        raise SpecError(f"table {p.table!r}: TT cores are fp32 and trained (a frozen table takes int8 rows, and "
                        f"fp16 cores are not run), got precision {p.precision}{' on a frozen table' * t.frozen}",
                        file=file, field=field)


def geometry_label(p: Placement, t) -> str | None:
    """The sharding label the shards' geometry is, whatever ``p.sharding`` says: 'table_wise' (one shard, the
    whole table), 'row_wise' (pieces of full width, split by rows), 'column_wise' (pieces of all rows, split by
    columns), 'data_parallel' (several whole copies); None for a grid of row and column pieces, which no label
    describes. ``host`` is a table_wise geometry on a host device (check_plan checks the device's kind)."""
    shards = p.shards
    whole_rows = all(s.rows == (0, t.rows) for s in shards)
    whole_cols = all(s.cols == (0, t.dim) for s in shards)
    if len(shards) == 1:
        return "table_wise" if whole_rows and whole_cols else None
    if whole_rows and whole_cols:
        return "data_parallel"
    if whole_cols:
        return "row_wise"
    if whole_rows:
        return "column_wise"
    return None


#: what each label's shards must be, for the message that refuses another geometry
_LABEL_MEANS = {"table_wise": "one shard holding the whole table on one GPU",
                "host": "one shard holding the whole table in a host's memory",
                "row_wise": "pieces of the table's full width, split by rows",
                "column_wise": "pieces holding all of the table's rows, split by columns",
                "data_parallel": "a whole copy of the table on each of several GPUs"}


def _shape(p: Placement, t, label: str | None) -> str:
    """'its 4 shards split the rows over 4 devices' and the like, for a refusal."""
    n, devices = len(p.shards), len({s.device for s in p.shards})
    if label == "table_wise":
        return "its one shard holds the whole table"
    if label == "row_wise":
        return f"its {n} shards split the rows over {devices} device(s)"
    if label == "column_wise":
        return f"its {n} shards split the columns over {devices} device(s)"
    if label == "data_parallel":
        return f"its {n} shards are whole copies of the table"
    if n == 1:
        return f"its one shard holds rows {list(p.shards[0].rows)} x cols {list(p.shards[0].cols)}, not the whole table"
    return f"its {n} shards split both rows and columns (a grid, which no sharding label describes)"


def _check_label(p: Placement, t, file, where) -> None:
    """The placement's sharding label against the geometry of its shards (``geometry_label``): a label that says
    one thing over shards of another is refused, so that what is priced, run and exported (TorchRec's sharding
    type is this label) is what the shards are. One-shard row_wise / column_wise (a split into one piece, as a
    TorchRec plan on one GPU writes it) are accepted: the geometry is the same as table_wise's."""
    shape = geometry_label(p, t)
    label = p.sharding
    fits = {"table_wise": shape == "table_wise", "host": shape == "table_wise",
            "row_wise": shape in ("row_wise", "table_wise"), "column_wise": shape in ("column_wise", "table_wise"),
            "data_parallel": shape in ("data_parallel", "table_wise")}[label]
    if fits:
        return
    suggest = f" (that is {shape})" if shape and shape != label and label != "host" else ""
    raise SpecError(f"table {p.table!r} is labelled {label}, which is {_LABEL_MEANS[label]}, but "
                    f"{_shape(p, t, shape)}{suggest}: the label must describe the shards", file=file,
                    field=f"{where}.sharding")


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
