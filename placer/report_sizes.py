"""A table's size as it is stored, for the reports (solve's and simulate's 'largest tables', explain, show): its
rows at its precision, or its compressed form's. Bytes of weights only (no optimizer state); every shard together.

- QR with k collisions: the quotient table's ceil(rows / k) rows and the remainder table's k rows, at the
  placement's precision (program/compressed_ops.qr_rows).
- int8 rows: dim int8 bytes and an fp32 scale and bias a row (program/ops.INT8_ROW_EXTRA_BYTES).
- TT: the three cores, fp32 (program/tt_shape.TTShape: the shape pricing and the runner share).
"""
from __future__ import annotations

from placer.program.compressed_ops import qr_rows
from placer.program.ops import INT8_ROW_EXTRA_BYTES, POOLED_BYTES
from placer.program.tt_shape import TTShape
from placer.units import element_bytes


def stored_bytes(t, p) -> int:
    """Bytes of table ``t``'s weights (a workload TableSpec) as placement ``p`` stores them."""
    c = p.compression
    if c is not None and c.tt is not None:
        return TTShape.of(t.rows, t.dim, c.tt.ranks).params * POOLED_BYTES
    if c is not None and c.int8:
        return t.rows * (t.dim + INT8_ROW_EXTRA_BYTES)
    if c is not None and c.qr is not None:
        q, r = qr_rows(t.rows, c.qr.collisions)
        return (q + r) * t.dim * element_bytes(p.precision)
    return t.size_bytes(p.precision)


def allowed_forms(t) -> list[tuple[str, int]]:
    """(form, bytes stored in it) for each compressed form workload table ``t`` allows, at its smallest: QR at its
    max_collisions, TT at its ranks, int8 rows; none when it allows none."""
    c = t.compression
    out: list[tuple[str, int]] = []
    if c is None:
        return out
    if c.qr is not None:
        q, r = qr_rows(t.rows, c.qr.max_collisions)
        out.append((f"qr k={c.qr.max_collisions}", (q + r) * t.row_bytes()))
    if c.tt is not None:
        out.append((f"tt {c.tt.ranks[0]},{c.tt.ranks[1]}", TTShape.of(t.rows, t.dim, c.tt.ranks).params * POOLED_BYTES))
    if c.int8 and t.frozen:
        out.append(("int8", t.rows * (t.dim + INT8_ROW_EXTRA_BYTES)))
    return out
