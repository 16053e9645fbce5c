"""What accuracy allows for a table: the compressed forms and the node-local training a user permits.

A workload states per table (or for all of them in ``table_defaults``) which answers to "it does not fit" the
model's accuracy allows; placer never picks one the user did not allow:

    compression:
      qr: {max_collisions: 4, combine: mult}   # quotient-remainder (Shi et al. 2020): ceil(rows / k) + k rows
      tt: {ranks: [8, 8]}                       # tensor train (TT-Rec, MLSys'21): three cores, inner ranks r1, r2
      int8: true                                # int8 rows with a scale and bias per row: frozen tables only
    frozen: true                                # the table is not trained (its rows are read, never updated)
    node_local: true                            # a replica per node trained on that node's samples alone

validation/accuracy_compression.py measures what each costs in log-loss on a synthetic task
(docs/validation.md); placer/runner/compressed.py runs them.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from placer.specs import limits as L
from placer.specs.common import StrictModel


class QRSpec(StrictModel):
    """Quotient-remainder rows: row i is combine(Q[i // k], R[i % k]) for k = ``max_collisions``."""

    max_collisions: L.QrCollisions = Field(description="k: rows that share one quotient row (>= 2)")
    combine: Literal["mult", "add"] = Field(default="mult", description="how the two rows combine")


class TTSpec(StrictModel):
    """Tensor-train rows: three cores of inner ranks ``ranks`` = [r1, r2]."""

    ranks: tuple[L.TtRank, L.TtRank] = Field(description="the inner TT ranks [r1, r2]")


class CompressionSpec(StrictModel):
    """The compressed forms a table may take (none unless named)."""

    qr: QRSpec | None = None
    tt: TTSpec | None = None
    int8: bool = Field(default=False, description="int8 rows (a scale and bias per row); frozen tables only")

    def allowed(self) -> list[str]:
        """The forms named, in the order above."""
        return [name for name, on in (("qr", self.qr), ("tt", self.tt), ("int8", self.int8)) if on]
