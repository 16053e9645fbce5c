"""A plan against its hardware and workload: every table placed once, on devices of the right kind, its rows and
columns covered exactly once, its sharding label describing its shards, and each form it uses allowed by the
table's workload entry (each form's own check: placer/forms). ``placer check``, ``simulate``, ``run`` and the
planner's own plans go through ``check_plan`` (placer/plan_price.py)."""
from __future__ import annotations

import warnings

from placer.constraints import Rules
from placer.errors import SpecError
from placer.forms.node_local import check_per_node
from placer.forms.shardings import SHARDINGS, sharding_of
from placer.forms.storage import check_compressed
from placer.forms.tiers import local_tiers
from placer.plan import Placement, Plan, spec_changes
from placer.specs.plausible import SpecWarning


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
        if p.precision not in t.storage_precisions():
            flag = f" (allow_{p.precision} is false)" if t.dtype == "fp32" else f" (its dtype is {t.dtype})"
            raise SpecError(f"table {p.table!r} may not be stored at {p.precision}{flag}",
                            file=file, field=f"{where}.precision")
        if p.compression is not None:
            check_compressed(p, t, file, where)
        for j, s in enumerate(p.shards):
            f = f"{where}.shards[{j}]"
            on_gpus = sharding_of(p).on_gpus
            if s.device not in (gpus if on_gpus else hosts):
                kind = "GPU" if on_gpus else "host"
                raise SpecError(f"unknown {kind} device {s.device!r} for sharding {p.sharding}",
                                file=file, field=f"{f}.device")
            if s.rows[1] > t.rows or s.cols[1] > t.dim:
                raise SpecError(f"shard rows {list(s.rows)} x cols {list(s.cols)} exceed the table's "
                                f"{t.rows} rows x {t.dim} dims", file=file, field=f)
            if not on_gpus and s.hbm_rows:
                raise SpecError("a host shard has no HBM rows", file=file, field=f"{f}.hbm_rows")
            if s.cold_memory is not None:
                _check_cold_memory(p, s, topology, file, f)
        if p.replicated is not None:  # every node's replica alike (forms/node_local.py), node0's a placement
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
    check_constraints(plan, topology, workload, file)


def check_constraints(plan: Plan, topology, workload, file: str | None = None) -> None:
    """Refuse a plan that breaks the workload's constraints (placer/constraints.py): SpecError naming the placement
    (or, for a co-location, the plan) and every constraint broken, first fault first."""
    if not workload.constraints.tables:
        return
    faults = Rules.of(workload, topology).plan_faults(plan.placements)
    if faults:
        i, first = faults[0]
        more = f" (and {len(faults) - 1} more: " + "; ".join(m for _, m in faults[1:4]) + \
            (" ..." if len(faults) > 4 else "") + ")" if len(faults) > 1 else ""
        raise SpecError(f"the plan breaks the workload's constraints: {first}{more}", file=file,
                        field=f"placements[{i}]" if i is not None else "placements")


def _check_cold_memory(p: Placement, s, topology, file, field: str) -> None:
    """A shard whose cold rows name a memory tier: a GPU shard, uncompressed, with cold rows, the tier one of its
    node's (the hardware spec's ``tiers``)."""
    tiers = local_tiers(topology, s.device)
    if not sharding_of(p).on_gpus or p.compression is not None:
        raise SpecError(f"table {p.table!r}: cold rows in a memory tier are for uncompressed GPU shards",
                        file=file, field=f"{field}.cold_memory")
    if s.cold_memory not in tiers:
        known = ", ".join(tiers) if tiers else "none: the spec declares no tiers"
        raise SpecError(f"unknown memory tier {s.cold_memory!r} of {topology.node_of[s.device]} (its tiers: {known})",
                        file=file, field=f"{field}.cold_memory")
    if s.host_rows == 0:
        raise SpecError(f"cold_memory {s.cold_memory!r} on a shard with every row in HBM (host_rows 0): leave it out",
                        file=file, field=f"{field}.cold_memory")


def geometry_label(p: Placement, t) -> str | None:
    """The sharding label the shards' geometry is, whatever ``p.sharding`` says: 'table_wise' (one shard, the
    whole table), 'row_wise' (pieces of full width, split by rows), 'column_wise' (pieces of all rows, split by
    columns), 'data_parallel' (several whole copies); None for a grid of row and column pieces, which no label
    describes. ``host`` is a table_wise geometry on a host device (check_plan checks the device's kind)."""
    shards = p.shards
    whole_rows = all(s.rows == (0, t.rows) for s in shards)
    whole_cols = all(s.cols == (0, t.dim) for s in shards)
    whole = whole_rows and whole_cols
    if len(shards) == 1:
        return next(n for n, f in SHARDINGS.items() if f.on_gpus and f.split is None and not f.whole_copies) \
            if whole else None
    if whole:
        return next(n for n, f in SHARDINGS.items() if f.whole_copies)
    split = "rows" if whole_cols else "cols" if whole_rows else None
    return next((n for n, f in SHARDINGS.items() if split and f.split == split), None)


def _shape(p: Placement, t, label: str | None) -> str:
    """'its 4 shards split the rows over 4 devices' and the like, for a refusal."""
    n, devices = len(p.shards), len({s.device for s in p.shards})
    if label is not None:
        return SHARDINGS[label].shape_text(n, devices)
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
    form = SHARDINGS[label]
    if form.accepts(shape):
        return
    suggest = f" (that is {shape})" if shape and shape != label and form.on_gpus else ""
    raise SpecError(f"table {p.table!r} is labelled {label}, which is {form.meaning}, but "
                    f"{_shape(p, t, shape)}{suggest}: the label must describe the shards", file=file,
                    field=f"{where}.sharding")


def _check_coverage(p: Placement, t, file, where) -> None:
    """Every (row, col) of the table covered exactly once (data_parallel: once per replica, full table)."""
    if sharding_of(p).whole_copies:
        for j, s in enumerate(p.shards):
            if s.rows != (0, t.rows) or s.cols != (0, t.dim):
                raise SpecError(f"a {p.sharding} shard must hold the whole table", file=file,
                                field=f"{where}.shards[{j}]")
        if len({s.device for s in p.shards}) != len(p.shards):
            raise SpecError(f"a {p.sharding} table has two replicas on one device", file=file, field=where)
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
