"""Compressed embedding tables in pure PyTorch: the answers to "it does not fit" that trade accuracy for memory.

Every module here pools like ``torch.nn.functional.embedding_bag(mode="sum")``: ``forward(ids, offsets)`` ->
(bags, dim) fp32, ``ids`` int64 row ids of the full table, ``offsets`` the start of every bag in ``ids``.

- ``QREmbeddingBag``: the quotient-remainder trick (Shi et al., "Compositional Embeddings Using Complementary
  Partitions for Memory-Efficient Recommendation Systems", KDD 2020). A table of N rows becomes a quotient table
  of ceil(N / k) rows and a remainder table of k rows; row i is Q[i // k] * R[i % k] (``op="mult"``, the paper's
  default) or Q[i // k] + R[i % k] (``op="add"``). Every id keeps a unique vector; memory falls about k-fold.
- ``TTEmbeddingBag``: a tensor-train table (Yin et al., "TT-Rec: Tensor Train Compression for Deep Learning
  Recommendation Model Embeddings", MLSys 2021): N <= n1 n2 n3 rows and dim = d1 d2 d3 columns held as three
  cores G1 (n1, d1, r1), G2 (n2, r1, d2, r2), G3 (n3, r2, d3); row i = G1[i1] . G2[i2] . G3[i3] (two batched
  matrix products per lookup), i = (i1 n2 + i2) n3 + i3.
- ``Int8EmbeddingBag``: a frozen table stored row-wise quantized to 8 bits with an fp32 scale and bias per row
  (as FBGEMM stores tables for inference); the lookup dequantizes the rows it gathers. Not trained (frozen).

``weight_bytes()`` is what each keeps in memory for its weights (the optimizer's state is the trainer's).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from placer.program.tt_shape import dim_factors, slice_ids, tt_factors  # noqa: F401 (shared with the cost model)

#: bytes of one fp32 value
FP32_BYTES = 4


def bag_index(ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The bag of every id: (len(ids),) int64 from the bags' start offsets."""
    counts = torch.diff(offsets, append=torch.tensor([ids.numel()], dtype=offsets.dtype, device=offsets.device))
    return torch.repeat_interleave(torch.arange(offsets.numel(), device=ids.device), counts)


def pool_rows(rows: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Per-id rows (L, dim) summed into their bags: (bags, dim)."""
    out = rows.new_zeros(offsets.numel(), rows.shape[1])
    return out.index_add_(0, bag_index(ids, offsets), rows)


def uniform_bound(rows: int) -> float:
    """DLRM's initial range of a table's values: U(-sqrt(1/rows), sqrt(1/rows))."""
    return math.sqrt(1.0 / max(rows, 1))


class QREmbeddingBag(nn.Module):
    """The quotient-remainder trick over ``rows`` x ``dim`` with ``collisions`` = k (module docstring)."""

    def __init__(self, rows: int, dim: int, collisions: int, op: str = "mult", seed: int = 0):
        super().__init__()
        if collisions < 2:
            raise ValueError(f"collisions must be at least 2, got {collisions}")
        if op not in ("mult", "add"):
            raise ValueError(f"op must be mult or add, got {op!r}")
        self.rows, self.dim, self.k, self.op = rows, dim, collisions, op
        g = torch.Generator().manual_seed(seed)
        q_rows = math.ceil(rows / collisions)
        bound = uniform_bound(rows)
        self.quotient = nn.Parameter((torch.rand(q_rows, dim, generator=g) * 2 - 1) * bound)
        # mult: the remainders start at one, so every id starts at its quotient row; add: at zero
        start = 1.0 if op == "mult" else 0.0
        self.remainder = nn.Parameter(start + (torch.rand(collisions, dim, generator=g) * 2 - 1) * bound)

    def row(self, ids: torch.Tensor) -> torch.Tensor:
        """The (L, dim) rows of ``ids``."""
        q, r = self.quotient[ids // self.k], self.remainder[ids % self.k]
        return q * r if self.op == "mult" else q + r

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        if self.op == "add":  # sums commute with pooling: two bags
            return (F.embedding_bag(ids // self.k, self.quotient, offsets, mode="sum")
                    + F.embedding_bag(ids % self.k, self.remainder, offsets, mode="sum"))
        return pool_rows(self.row(ids), ids, offsets)

    def weight_bytes(self) -> int:
        return (self.quotient.numel() + self.remainder.numel()) * FP32_BYTES


class TTEmbeddingBag(nn.Module):
    """A tensor-train table of ``rows`` x ``dim`` with TT ranks ``ranks`` = [r1, r2] (module docstring)."""

    def __init__(self, rows: int, dim: int, ranks: tuple[int, int] | list[int], seed: int = 0):
        super().__init__()
        if len(ranks) != 2 or min(ranks) < 1:
            raise ValueError(f"ranks must be two positive integers, got {ranks}")
        self.rows, self.dim = rows, dim
        self.n = tt_factors(rows)
        self.d = dim_factors(dim)
        r1, r2 = int(ranks[0]), int(ranks[1])
        self.ranks = (r1, r2)
        g = torch.Generator().manual_seed(seed)
        # each core N(0, s^2): a row's variance r1 r2 s^6 matches U(-b, b)'s b^2 / 3
        s = (uniform_bound(rows) ** 2 / 3 / (r1 * r2)) ** (1 / 6)
        n1, n2, n3 = self.n
        d1, d2, d3 = self.d
        self.core1 = nn.Parameter(torch.randn(n1, d1 * r1, generator=g) * s)
        self.core2 = nn.Parameter(torch.randn(n2, r1 * d2 * r2, generator=g) * s)
        self.core3 = nn.Parameter(torch.randn(n3, r2 * d3, generator=g) * s)

    def row(self, ids: torch.Tensor) -> torch.Tensor:
        """The (L, dim) rows of ``ids``: two batched matrix products over the gathered core slices."""
        d1, d2, d3 = self.d
        r1, r2 = self.ranks
        i1, i2, i3 = slice_ids(ids, self.n)
        L = ids.numel()
        a = self.core1[i1].view(L, d1, r1)
        b = self.core2[i2].view(L, r1, d2 * r2)
        ab = torch.bmm(a, b).view(L, d1 * d2, r2)
        c = self.core3[i3].view(L, r2, d3)
        return torch.bmm(ab, c).reshape(L, self.dim)

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return pool_rows(self.row(ids), ids, offsets)

    def weight_bytes(self) -> int:
        return (self.core1.numel() + self.core2.numel() + self.core3.numel()) * FP32_BYTES


class Int8EmbeddingBag(nn.Module):
    """A frozen table, row-wise 8-bit: value = q * scale + bias per row (module docstring)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        w = weight.detach().float()
        lo, hi = w.min(dim=1, keepdim=True).values, w.max(dim=1, keepdim=True).values
        scale = ((hi - lo) / 255.0).clamp_min(torch.finfo(torch.float32).tiny)
        self.register_buffer("q", torch.round((w - lo) / scale).clamp(0, 255).to(torch.uint8))
        self.register_buffer("scale", scale)
        self.register_buffer("bias", lo)
        self.rows, self.dim = w.shape

    def dequantized(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """The fp32 rows of ``ids`` (every row when None)."""
        if ids is None:
            return self.q.float() * self.scale + self.bias
        return self.q[ids].float() * self.scale[ids] + self.bias[ids]

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return pool_rows(self.dequantized(ids), ids, offsets)

    def weight_bytes(self) -> int:
        return self.q.numel() + (self.scale.numel() + self.bias.numel()) * FP32_BYTES
