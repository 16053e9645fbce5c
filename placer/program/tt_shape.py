"""The shape of a tensor-train (TT-Rec) table: how its rows and columns factor and what its cores hold.

One function pair decides the factorization, shared by the cost model (program/tt_ops.py), the runner
(runner/tt_group.py) and the reference module (runner/compressed.py TTEmbeddingBag), so a plan's
``compression: {"tt": {"ranks": [r1, r2]}}`` names one shape for a table of N rows and dim columns:

- rows: N <= n1 n2 n3 (``tt_factors``: each factor near N^(1/3), the rounding carried forward); row i is
  (i1, i2, i3) = (i // (n2 n3), (i // n3) % n2, i % n3);
- columns: dim = d1 d2 d3 (``dim_factors``: the divisors as even as they go, largest last);
- cores: G1 (n1, d1 r1), G2 (n2, r1 d2 r2), G3 (n3, r2 d3), one "slice" (row) of each per table row; row i is
  G1[i1] (d1 x r1) . G2[i2] (r1 x d2 r2) -> (d1 d2 x r2) . G3[i3] (r2 x d3) -> d1 d2 d3 = dim values.

Sizes are counts of fp32 values unless named bytes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def tt_factors(n: int, parts: int = 3) -> list[int]:
    """``parts`` integers near n^(1/parts) whose product is at least ``n`` (rows of a TT table's cores)."""
    out = []
    left = n
    for i in range(parts, 0, -1):
        f = max(1, math.ceil(left ** (1.0 / i)))
        out.append(f)
        left = math.ceil(left / f)
    return out


def dim_factors(dim: int) -> list[int]:
    """dim = d1 d2 d3, the factors as even as the divisors allow (largest last)."""
    best = None
    for d1 in range(1, dim + 1):
        if dim % d1:
            continue
        for d2 in range(d1, dim // d1 + 1):
            if (dim // d1) % d2:
                continue
            d3 = dim // d1 // d2
            if d3 < d2:
                continue
            spread = d3 / d1
            if best is None or spread < best[0]:
                best = (spread, [d1, d2, d3])
    return best[1]


def slice_ids(ids, n):
    """(i1, i2, i3): the core slices of table rows ``ids`` (a numpy array or a torch tensor of ints) in cores of
    ``n`` = (n1, n2, n3) rows: i = (i1 n2 + i2) n3 + i3."""
    _, n2, n3 = n
    return ids // (n2 * n3), (ids // n3) % n2, ids % n3


@dataclass(frozen=True)
class TTShape:
    """A TT table's factors (module docstring): ``n`` = (n1, n2, n3) core rows, ``d`` = (d1, d2, d3) column
    factors, ``ranks`` = (r1, r2)."""

    n: tuple[int, int, int]
    d: tuple[int, int, int]
    ranks: tuple[int, int]

    @classmethod
    def of(cls, rows: int, dim: int, ranks) -> "TTShape":
        return cls(tuple(tt_factors(rows)), tuple(dim_factors(dim)), (int(ranks[0]), int(ranks[1])))

    @property
    def widths(self) -> tuple[int, int, int]:
        """Values in one slice (row) of each core: d1 r1, r1 d2 r2, r2 d3."""
        (d1, d2, d3), (r1, r2) = self.d, self.ranks
        return d1 * r1, r1 * d2 * r2, r2 * d3

    @property
    def params(self) -> int:
        """Values in the three cores."""
        return sum(n * w for n, w in zip(self.n, self.widths))

    @property
    def forward_flops(self) -> tuple[float, float]:
        """FLOPs per lookup of the two matrix products: (d1 x r1)(r1 x d2 r2), then (d1 d2 x r2)(r2 x d3)."""
        (d1, d2, d3), (r1, r2) = self.d, self.ranks
        return 2.0 * d1 * r1 * d2 * r2, 2.0 * d1 * d2 * r2 * d3
