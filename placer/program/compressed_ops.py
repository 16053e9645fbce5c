"""The compressed forms' members and ops on a step program (build.py hands them here): QR tables and int8 rows.

A placement with ``compression`` (placer/plan.py) is table_wise on one GPU with all its rows in HBM
(check_plan refuses other geometries), so its members are simple:

- QR (quotient-remainder, k collisions, N rows): two members of the device's QR group of its dtype, width and
  combine (form ``qr:mult`` or ``qr:add``; the runner fuses the group's sub-tables in one tensor as it fuses any
  group, placer/runner/compressed_groups.py): the quotient table (ceil(N / k) rows) and the remainder table (k
  rows). Forward: a gather in each for the same L ids, then the combine (the two rows of every lookup multiplied or
  added), pooled into bags. Backward: the pooled gradient packed, each lookup's gradient (mult: times the other
  sub-table's row) for both sub-tables, then one sort, segment reduce and update over both (each member adds its L
  ids and its distinct rows). The
  remainder table's k rows take every lookup between them: its update is a few rows, each the sum of ~L / k
  gradients (on a GPU a contended reduce; priced here as the segment reduce of L rows and an update of k rows).
- int8 (frozen tables only): one group of every int8 table of the device and width (form ``int8``), rows of
  dim int8 bytes + an fp32 scale and bias (INT8_ROW_EXTRA_BYTES); forward only: the gather of those rows (at the
  16-bit gather rates for that row size: no int8 gather is calibrated) and the dequantize, an elementwise op
  reading them and writing fp32 rows that the pooling reads again.

Every size is per step: lookups and rows are counts, bytes bytes, seconds seconds.
"""
from __future__ import annotations

import math

from placer.plan import Placement
from placer.program.ops import BWD, BX, FROZEN, FWD, INT8, INT8_ROW_EXTRA_BYTES, POOLED_BYTES, QR_PREFIX, TT_PREFIX, \
    GroupKey, Member, Op
from placer.units import element_bytes

#: the storage dtype whose calibrated gather rates price an int8 row's gather (by its row bytes)
INT8_GATHER_RATES = "fp16"


def qr_rows(rows: int, collisions: int) -> tuple[int, int]:
    """(quotient rows, remainder rows) of a QR table of ``rows`` rows: (ceil(rows / k), k)."""
    return math.ceil(rows / collisions), collisions


def form_of(p: Placement, frozen: bool) -> str:
    """The group form (GroupKey.form) of a placement's members."""
    if p.compression is not None and p.compression.tt is not None:
        return f"{TT_PREFIX}{p.table}"  # one group per TT table (its cores are its own shape)
    if p.compression is not None:
        return INT8 if p.compression.int8 else f"{QR_PREFIX}{p.compression.qr.combine}"
    return FROZEN if frozen else ""


def qr_combine(key: GroupKey) -> str:
    """'mult' or 'add': how a QR group's rows combine."""
    return key.form[len(QR_PREFIX):]


def storage_dtype(p: Placement) -> str:
    """The dtype its group's rows are stored in: int8 for int8 rows, else the placement's precision."""
    return "int8" if p.compression is not None and p.compression.int8 else p.precision


def row_bytes(key: GroupKey, cols: int) -> int:
    """Bytes of one stored row of ``cols`` columns in the group: int8 rows carry their scale and bias."""
    if key.dtype == "int8":
        return cols + INT8_ROW_EXTRA_BYTES
    return cols * element_bytes(key.dtype)


def touched_subrows(rows: int, unique: float, subrows: int, share: float) -> float:
    """Of ``subrows`` rows of a compressed table (QR sub-table rows, TT core slices), each standing for ``share``
    of a table's ``rows`` rows, those touched when ``unique`` of the table's rows are (spread evenly over its id
    space, placer/plan.py): each unless all its ``share`` table rows are missed."""
    p_miss = max(0.0, 1.0 - unique / rows)
    return subrows * (1.0 - math.exp(share * math.log(p_miss))) if p_miss > 0 else float(subrows)


def distinct_of(rows: int, unique: float, share: int) -> float:
    """Distinct rows of a QR sub-table whose every row stands for ``share`` table rows (rows / share sub-rows)
    touched when ``unique`` of the table's ``rows`` rows are (touched_subrows)."""
    return touched_subrows(rows, unique, math.ceil(rows / share), share)


def qr_members(p: Placement, key: GroupKey, rows: int, bags: int, lookups: float, unique: float
               ) -> list[tuple[GroupKey, Member]]:
    """A QR placement's two members: the quotient table (part 'quotient') and the remainder table ('remainder'),
    each with every lookup; distinct rows from the table's ``unique`` (distinct_of)."""
    k = p.compression.qr.collisions
    q, r = qr_rows(rows, k)
    s = p.shards[0]
    cols, ids = (s.cols[0], s.cols[1]), (s.rows[0], s.rows[1])
    return [(key, Member(p.table, 0, "quotient", q, cols, bags, lookups, distinct_of(rows, unique, k), ids)),
            (key, Member(p.table, 0, "remainder", r, cols, bags, lookups, distinct_of(rows, unique, rows // k or 1),
                         ids))]


def fixed_ops(key: GroupKey, costs, stream: str, optimizer: str) -> list[Op]:
    """The fixed costs of a compressed group (once per group): int8's lookup and dequantize; QR's lookup, combine,
    pack_grad, sort, segment reduce and update (and, for mult, the backward's multiply)."""
    mk = lambda kind, phase, cost_kind: Op(kind, phase, stream, costs.fixed(cost_kind), group=key, once=True)
    if key.form == INT8:
        return [mk("lookup", FWD, "lookup"), mk("elementwise", FWD, "elementwise")]
    ops = [mk("lookup", FWD, "lookup"), mk("combine", FWD, "elementwise"), mk("pack_grad", BX, "copy"),
           mk("sort", BWD, "sort"), mk("segment_reduce", BWD, "segment_reduce"),
           mk("update", BWD, f"update_{optimizer}")]
    if qr_combine(key) == "mult":
        ops.append(mk("combine", BWD, "elementwise"))
    return ops


def int8_member_ops(key: GroupKey, m: Member, costs, stream: str) -> list[Op]:
    """An int8 member's forward: the gather of its rows (dim + 8 bytes) and the dequantize to fp32 rows."""
    c = m.cols[1] - m.cols[0]
    rb = row_bytes(key, c)
    fp32_rows = m.lookups * c * POOLED_BYTES
    out_bytes = m.bags * c * POOLED_BYTES
    return [Op("lookup", FWD, stream, costs.lookup_s(INT8_GATHER_RATES, rb, m.lookups, m.unique_rows, out_bytes, False),
               key, m.table, sizes={"lookups": m.lookups, "unique_rows": m.unique_rows, "row_bytes": rb,
                                    "bags": m.bags}),
            Op("elementwise", FWD, stream, costs.stream_s(m.lookups * rb + 2 * fp32_rows), key, m.table,
               sizes={"bytes": m.lookups * rb + 2 * fp32_rows, "what": "int8 dequantize"})]


def qr_member_ops(key: GroupKey, m: Member, costs, stream: str, optimizer: str, state_bytes: float) -> list[Op]:
    """A QR sub-table's work (module docstring): its gathers, sort, segment reduce and update; the quotient member
    also carries the table's combine, the pack of its pooled gradient and (mult) the backward's multiply."""
    combine = qr_combine(key)
    c = m.cols[1] - m.cols[0]
    rb = c * element_bytes(key.dtype)
    L = m.lookups
    grad_row = c * POOLED_BYTES
    pooled = m.bags * grad_row
    ops = [Op("lookup", FWD, stream, costs.lookup_s(key.dtype, rb, L, m.unique_rows, L * grad_row, False), key, m.table,
              sizes={"lookups": L, "unique_rows": m.unique_rows, "row_bytes": rb, "bags": m.bags}),
           Op("sort", BWD, stream, costs.sort_s(L), key, m.table, sizes={"ids": L}),
           Op("segment_reduce", BWD, stream, costs.segment_reduce_s(grad_row, L), key, m.table,
              sizes={"lookups": L, "row_bytes": grad_row}),
           Op("update", BWD, stream,
              costs.update_s(optimizer, key.dtype, rb + state_bytes, m.unique_rows, False, width=c), key, m.table,
              sizes={"rows": m.unique_rows, "row_bytes": rb + state_bytes})]
    if m.part == "remainder":
        return ops
    # combine: the two gathered rows of every lookup multiplied or added (read 2, write 1), then pooled (read L
    # rows, write the bags)
    fwd = 3 * L * grad_row + L * grad_row + pooled
    ops.append(Op("combine", FWD, stream, costs.stream_s(fwd), key, m.table, sizes={"bytes": fwd, "parts": 2}))
    ops.append(Op("pack_grad", BX, stream, costs.stream_s(2 * pooled), key, m.table, sizes={"bytes": pooled}))
    if combine == "mult":  # each lookup's gradient times the other sub-table's gathered row, for both sub-tables
        bwd = 2 * 3 * L * grad_row
        ops.append(Op("combine", BWD, stream, costs.stream_s(bwd), key, m.table, sizes={"bytes": bwd, "parts": 2}))
    return ops
