"""Batch locality: how often the rows touched by one training batch are reused, from the access models.

For a table with ``lookups`` independent draws per batch from an access model, the number of times row k
is hit is ~ Poisson(lambda_k) with lambda_k = lookups * p_k (p_k the row's share of lookups; the exact law
is binomial, and p_k is tiny for all but the hottest rows of small tables, where both laws agree on what
is measured here: whether a row is touched once, more than 16 times, more than 64 times). Summed over
tables, this gives the statistics published with Meta's DLRM datasets (docs/references.md): unique rows per
batch, the share of touched rows used once, and the shares of rows and lookups on rows used more than T
times. Everything is analytic: no sampling, so it is deterministic and fast (a few ms per table).

Rows are grouped into rank segments: the hottest ``exact_ranks`` rows one by one, the rest in
geometrically growing segments (each 1% wider than the last) inside which every row gets the segment's
mean probability. For zipf models that moves each lambda by < 1% (a bound, checked in tests/test_access.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from placer.specs.access import AccessModel

DEFAULT_THRESHOLDS = (16, 64)


@dataclass
class Locality:
    """Expected reuse statistics of one batch. Counts are expected values (floats)."""

    lookups: float
    unique_rows: float
    once_rows: float  #: rows touched exactly once (= lookups on them)
    rows_over: dict[int, float] = field(default_factory=dict)  #: T -> rows touched more than T times
    lookups_over: dict[int, float] = field(default_factory=dict)  #: T -> lookups on those rows

    @property
    def lookups_per_unique_row(self) -> float:
        return self.lookups / self.unique_rows if self.unique_rows else float("nan")

    @property
    def once_rows_fraction(self) -> float:
        """Share of touched rows used exactly once."""
        return self.once_rows / self.unique_rows if self.unique_rows else 0.0

    @property
    def once_lookups_fraction(self) -> float:
        """Share of lookups that fall on rows used exactly once."""
        return self.once_rows / self.lookups if self.lookups else 0.0

    def rows_over_fraction(self, t: int) -> float:
        """Share of touched rows used more than ``t`` times."""
        return self.rows_over[t] / self.unique_rows if self.unique_rows else 0.0

    def lookups_over_fraction(self, t: int) -> float:
        """Share of lookups that fall on rows used more than ``t`` times."""
        return self.lookups_over[t] / self.lookups if self.lookups else 0.0

    def __add__(self, other: "Locality") -> "Locality":
        keys = set(self.rows_over) | set(other.rows_over)
        return Locality(self.lookups + other.lookups, self.unique_rows + other.unique_rows,
                        self.once_rows + other.once_rows,
                        {t: self.rows_over.get(t, 0.0) + other.rows_over.get(t, 0.0) for t in keys},
                        {t: self.lookups_over.get(t, 0.0) + other.lookups_over.get(t, 0.0) for t in keys})

    def as_dict(self) -> dict[str, float]:
        """Flat summary: the fractions as published (per batch)."""
        out = {"lookups": self.lookups, "unique_rows": self.unique_rows,
               "lookups_per_unique_row": self.lookups_per_unique_row,
               "once_rows_fraction": self.once_rows_fraction, "once_lookups_fraction": self.once_lookups_fraction}
        for t in sorted(self.rows_over):
            out[f"rows_over_{t}_fraction"] = self.rows_over_fraction(t)
            out[f"lookups_over_{t}_fraction"] = self.lookups_over_fraction(t)
        return out


def rank_segments(model: AccessModel, exact_ranks: int = 256, growth: float = 1.01) -> tuple[np.ndarray, np.ndarray]:
    """(rows per segment, lookup share per segment), hottest first; the shares sum to 1."""
    n = model.rows
    head = np.arange(0, min(n, exact_ranks) + 1, dtype=np.float64)
    if n > exact_ranks:
        steps = int(math.ceil(math.log(n / exact_ranks) / math.log(growth)))
        tail = np.unique(np.round(exact_ranks * growth ** np.arange(1, steps + 1)))
        ranks = np.unique(np.concatenate([head, np.minimum(tail, n), [float(n)]]))
    else:
        ranks = head
    cov = np.maximum.accumulate(np.asarray(model.coverage(ranks / n), dtype=np.float64))
    return np.diff(ranks), np.diff(cov) / cov[-1]


def poisson_counts(lam: np.ndarray, weights: np.ndarray, thresholds=DEFAULT_THRESHOLDS) -> Locality:
    """Expected statistics for ``weights[i]`` rows each hit ~ Poisson(lam[i]) times."""
    lam = np.asarray(lam, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = lam > 0
    lam, w = lam[keep], w[keep]
    touched = -np.expm1(-lam)
    once = lam * np.exp(-lam)
    tmax = max(thresholds) if thresholds else 0
    log_lam = np.log(lam)
    cdf = np.zeros_like(lam)  # P(X <= j), accumulated
    rows_over, lookups_over = {}, {}
    for j in range(tmax + 1):
        cdf += np.exp(-lam + j * log_lam - math.lgamma(j + 1))
        for t in thresholds:
            if j == t - 1:  # E[X; X > t] = lam * P(X >= t) = lam * (1 - P(X <= t - 1))
                lookups_over[t] = float((w * lam * np.clip(1.0 - cdf, 0.0, 1.0)).sum())
            if j == t:
                rows_over[t] = float((w * np.clip(1.0 - cdf, 0.0, 1.0)).sum())
    return Locality(float((w * lam).sum()), float((w * touched).sum()), float((w * once).sum()),
                    rows_over, lookups_over)


def table_locality(model: AccessModel, lookups: float, thresholds=DEFAULT_THRESHOLDS,
                   growth: float = 1.01) -> Locality:
    """Expected reuse statistics of ``lookups`` independent draws from one table's access model.
    ``growth`` is the width ratio of consecutive rank segments (smaller: finer and slower)."""
    n_rows, share = rank_segments(model, growth=growth)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(n_rows > 0, lookups * share / n_rows, 0.0)
    return poisson_counts(lam, n_rows, thresholds)


def batch_locality(tables: Iterable[tuple[AccessModel, float]], thresholds=DEFAULT_THRESHOLDS,
                   growth: float = 1.01) -> Locality:
    """Sum of :func:`table_locality` over ``(access model, lookups per batch)`` pairs."""
    total = Locality(0.0, 0.0, 0.0, {t: 0.0 for t in thresholds}, {t: 0.0 for t in thresholds})
    for model, lookups in tables:
        total = total + table_locality(model, lookups, thresholds, growth)
    return total


def workload_locality(workload, thresholds=DEFAULT_THRESHOLDS) -> Locality:
    """Batch locality of a Workload: every table drawn ``batch_size x lookups_per_sample`` times."""
    models = workload.access_models
    return batch_locality(((models[t.name], workload.batch_size * workload.lookups_per_sample(t.name))
                           for t in workload.tables), thresholds)
