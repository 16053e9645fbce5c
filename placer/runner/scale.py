"""Scale a plan to a workload whose tables have fewer rows (``Workload.with_scaled_rows``).

Every row boundary of a table maps to round(boundary * N' / N), kept strictly increasing so that no shard
becomes empty; each shard keeps its hot fraction (hbm_rows / rows, rounded); columns, devices, sharding and
precision are unchanged, and so is a compressed form (QR keeps its collisions k). The result refers to the scaled
workload by name, without hashes.
"""
from __future__ import annotations

from placer.errors import SpecError
from placer.forms.shardings import sharding_of
from placer.plan import Placement, Plan, Shard, SpecRef
from placer.specs.workload import Workload


def _boundary_map(bounds: list[int], old_rows: int, new_rows: int, table: str) -> dict[int, int]:
    inner = sorted(set(bounds) - {0, old_rows})
    if len(inner) + 1 > new_rows:
        raise SpecError(f"table {table!r} is split into {len(inner) + 1} row ranges but has only {new_rows} "
                        f"rows after scaling; use a smaller --scale")
    out = {0: 0, old_rows: new_rows}
    prev = 0
    for i, b in enumerate(inner):
        v = int(round(b * new_rows / old_rows))
        v = max(v, prev + 1)
        v = min(v, new_rows - (len(inner) - i))  # leave room for the ranges after it
        out[b] = v
        prev = v
    return out


def scale_plan(plan: Plan, scaled_workload: Workload) -> Plan:
    """The plan with every shard's rows scaled to ``scaled_workload``'s table sizes (see module docstring)."""
    tables = {t.name: t for t in scaled_workload.tables}
    placements = []
    for p in plan.placements:
        if p.table not in tables:
            raise SpecError(f"plan places table {p.table!r}, which the workload does not have")
        new_rows = tables[p.table].rows
        old_rows = max(s.rows[1] for s in p.shards)
        mapping = _boundary_map([b for s in p.shards for b in s.rows], old_rows, new_rows, p.table)
        shards = []
        for s in p.shards:
            a, b = mapping[s.rows[0]], mapping[s.rows[1]]
            n = b - a
            hot = s.hbm_rows / s.num_rows
            k = n if s.hbm_rows == s.num_rows else 0 if s.hbm_rows == 0 else min(n - 1, max(1, round(hot * n)))
            if not sharding_of(p).on_gpus:
                k = 0
            shards.append(Shard(device=s.device, rows=(a, b), cols=s.cols, hbm_rows=k, host_rows=n - k))
        placements.append(Placement(table=p.table, sharding=p.sharding, precision=p.precision, shards=shards,
                                    compression=p.compression, replicated=p.replicated))
    return plan.model_copy(update={
        "workload": SpecRef(name=scaled_workload.name),
        "hardware": SpecRef(name=plan.hardware.name),
        "placements": placements, "predicted": None, "solver": None,
        "method": plan.method})
