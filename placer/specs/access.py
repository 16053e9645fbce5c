"""Access-skew models: which fraction of a table's lookups hits its hottest rows.

Rows are ranked by popularity, rank 0 the hottest. ``coverage(f)`` is the fraction of lookups that fall on
the hottest ``f`` fraction of rows (f in [0, 1]); it is monotone non-decreasing with coverage(0) = 0 and
coverage(1) = 1. Every model can also draw row ranks (``sample``) and estimate how many distinct rows a
batch touches (``expected_unique_rows``), both from the same coverage curve.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from functools import cached_property, lru_cache

import numpy as np

_DIRECT_TERMS = 1024
_GRID_POINTS = 4096


def generalized_harmonic(n, alpha: float) -> np.ndarray:
    """H(n, alpha) = sum_{k=1..n} k**-alpha for integer n >= 0 (array or scalar), exact to double precision.

    The first 1024 terms are summed directly; the tail uses Euler-Maclaurin with three correction terms,
    whose error is below 1e-18 relative at that starting point. Cost is O(1) per n, so n = 4e7 is instant.
    """
    n = np.asarray(n, dtype=np.float64)
    prefix = _harmonic_prefix(float(alpha))
    small = n <= _DIRECT_TERMS
    out = np.empty_like(n)
    out[small] = prefix[n[small].astype(np.int64)]
    big = n[~small]
    if big.size:
        m = float(_DIRECT_TERMS + 1)
        a = alpha
        if abs(a - 1.0) < 1e-12:
            integral = np.log(big / m)
        else:
            integral = (big ** (1 - a) - m ** (1 - a)) / (1 - a)

        def f1(x):  # first derivative of x**-a
            return -a * x ** (-a - 1)

        def f3(x):  # third derivative of x**-a
            return -a * (a + 1) * (a + 2) * x ** (-a - 3)

        tail = (integral + (m ** -a + big ** -a) / 2 + (f1(big) - f1(m)) / 12 - (f3(big) - f3(m)) / 720)
        out[~small] = prefix[_DIRECT_TERMS] + tail
    return out


@lru_cache(maxsize=256)
def _harmonic_prefix(alpha: float) -> np.ndarray:
    """H(k, alpha) for k = 0..1024 (read-only; shared by every table with this alpha)."""
    k = np.arange(1, _DIRECT_TERMS + 1, dtype=np.float64)
    prefix = np.concatenate([[0.0], np.cumsum(k ** -alpha)])
    prefix.flags.writeable = False
    return prefix


class AccessModel(ABC):
    """Popularity of the rows of one table with ``rows`` rows."""

    def __init__(self, rows: int):
        if rows <= 0:
            raise ValueError("rows must be positive")
        self.rows = int(rows)

    @abstractmethod
    def coverage(self, fraction):
        """Fraction of lookups hitting the hottest ``fraction`` of rows. Vectorized; input clipped to [0, 1]."""

    @abstractmethod
    def describe(self) -> str:
        """Short human description, e.g. 'zipf(1.05)'."""

    @cached_property
    def _rank_grid(self) -> tuple[np.ndarray, np.ndarray]:
        """(ranks, coverage at those ranks): exact at ranks 0..1024, log-spaced beyond, always ending at rows."""
        n = self.rows
        head = np.arange(0, min(n, _DIRECT_TERMS) + 1, dtype=np.float64)
        tail = np.geomspace(max(head[-1], 1.0), n, _GRID_POINTS) if n > _DIRECT_TERMS else np.array([])
        ranks = np.unique(np.concatenate([head, np.round(tail), [float(n)]]))
        cov = np.maximum.accumulate(np.asarray(self.coverage(ranks / n), dtype=np.float64))
        return ranks, cov

    def sample(self, size, rng: np.random.Generator) -> np.ndarray:
        """Draw row ranks (int64, 0 = hottest) by inverting the coverage curve.

        Exact for the hottest 1024 rows; beyond that, ranks inside one grid segment (of 4096 log-spaced
        segments) are drawn uniformly, which keeps every segment's share of lookups exact.
        """
        ranks, cov = self._rank_grid
        u = rng.random(size)
        # drop flat steps so that interp is well defined
        keep = np.concatenate([[True], np.diff(cov) > 0])
        r = np.interp(u * cov[-1], cov[keep], ranks[keep])
        return np.minimum(r.astype(np.int64), self.rows - 1)

    def expected_unique_rows(self, lookups: float) -> float:
        """Expected number of distinct rows touched by ``lookups`` independent draws."""
        hot, cold = self.unique_rows_split(lookups, 1.0)
        return hot + cold

    def unique_rows_split(self, lookups: float, hot_fraction: float) -> tuple[float, float]:
        """Expected distinct rows touched by ``lookups`` draws among the hottest ``hot_fraction`` of rows and
        among the rest: (hot, cold). Rows inside one grid segment share that segment's mean probability."""
        if lookups <= 0:
            return 0.0, 0.0
        ranks, cumulative, per_row, scale = self._unique_profile(float(lookups))
        cut = min(max(hot_fraction, 0.0), 1.0) * self.rows
        i = int(np.searchsorted(ranks, cut, side="right")) - 1  # the segment [ranks[i], ranks[i+1]) holding cut
        total = float(cumulative[-1])
        hot = total if i >= len(per_row) else float(cumulative[i] + (cut - ranks[i]) * per_row[i])
        return hot * scale, (total - hot) * scale

    def _unique_profile(self, lookups: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """For ``lookups`` draws: (grid ranks, expected distinct rows among ranks below each grid point, the
        probability that one row of each segment is touched, the never-more-than-draws scale). Cached for a
        few ``lookups`` values: the planner splits one table at many fractions for the same draws."""
        cache = self.__dict__.setdefault("_unique_profiles", {})
        if lookups not in cache:
            if len(cache) >= 8:
                cache.clear()
            ranks, cov = self._rank_grid
            n_rows = np.diff(ranks)
            mass = np.diff(cov)
            with np.errstate(divide="ignore", invalid="ignore"):
                p = np.where(n_rows > 0, mass / n_rows, 0.0)
            per_row = -np.expm1(lookups * np.log1p(-np.clip(p, 0.0, 1 - 1e-16)))
            cumulative = np.concatenate([[0.0], np.cumsum(n_rows * per_row)])
            scale = min(1.0, lookups / max(float(cumulative[-1]), 1e-300))  # never more distinct rows than draws
            cache[lookups] = (ranks, cumulative, per_row, scale)
        return cache[lookups]


class UniformAccess(AccessModel):
    """Every row equally likely: coverage(f) = f."""

    def coverage(self, fraction):
        return np.clip(np.asarray(fraction, dtype=np.float64), 0.0, 1.0)

    def describe(self) -> str:
        return "uniform"


class ZipfAccess(AccessModel):
    """P(rank k) proportional to k**-alpha, k = 1..rows. coverage(f) = H(f*rows, alpha) / H(rows, alpha),
    linear between integer ranks."""

    def __init__(self, rows: int, alpha: float):
        super().__init__(rows)
        if alpha <= 0:
            raise ValueError("zipf alpha must be positive")
        self.alpha = float(alpha)
        self._total = float(generalized_harmonic(self.rows, self.alpha))

    def coverage(self, fraction):
        f = np.clip(np.asarray(fraction, dtype=np.float64), 0.0, 1.0)
        k = f * self.rows
        lo = np.floor(k)
        lo_h = generalized_harmonic(lo, self.alpha)
        next_term = np.where(lo < self.rows, (lo + 1) ** -self.alpha, 0.0)
        out = (lo_h + (k - lo) * next_term) / self._total
        return np.clip(out, 0.0, 1.0) if out.ndim else float(min(max(out, 0.0), 1.0))

    def describe(self) -> str:
        return f"zipf({self.alpha:g})"


class CdfAccess(AccessModel):
    """Empirical coverage curve through points (row fraction, lookup fraction), linear between them."""

    def __init__(self, rows: int, row_fractions, lookup_fractions, label: str = "empirical"):
        super().__init__(rows)
        x = np.asarray(row_fractions, dtype=np.float64)
        y = np.asarray(lookup_fractions, dtype=np.float64)
        if x.shape != y.shape or x.ndim != 1 or x.size == 0:
            raise ValueError("cdf points must be a non-empty list of [row_fraction, lookup_fraction] pairs")
        if np.any((x < 0) | (x > 1) | (y < 0) | (y > 1)):
            raise ValueError("cdf points must lie in [0, 1] x [0, 1]")
        if np.any(np.diff(x) < 0) or np.any(np.diff(y) < 0):
            raise ValueError("cdf points must be non-decreasing in both coordinates")
        if np.any((x == 0) & (y > 0)):
            raise ValueError("cdf points: row fraction 0 must have lookup fraction 0 (coverage(0) = 0)")
        if x[0] > 0:
            x, y = np.concatenate([[0.0], x]), np.concatenate([[0.0], y])
        if x[-1] < 1:
            x, y = np.concatenate([x, [1.0]]), np.concatenate([y, [1.0]])
        if y[-1] <= 0:
            raise ValueError("cdf must reach a positive lookup fraction")
        self._x, self._y = x, y / y[-1]
        self._label = label

    def coverage(self, fraction):
        out = np.interp(np.clip(np.asarray(fraction, dtype=np.float64), 0.0, 1.0), self._x, self._y)
        return out if np.ndim(out) else float(out)

    def describe(self) -> str:
        hot = float(self.coverage(0.01))
        return f"{self._label} (top 1% rows: {hot:.0%} of lookups)"


def cdf_from_histogram(accesses_per_row, rows_fraction) -> tuple[np.ndarray, np.ndarray]:
    """Coverage points from bins (accesses per row in the bin, fraction of rows in the bin), hottest first."""
    c = np.asarray(accesses_per_row, dtype=np.float64)
    r = np.asarray(rows_fraction, dtype=np.float64)
    order = np.argsort(-c, kind="stable")
    c, r = c[order], r[order] / r.sum()
    mass = c * r
    if mass.sum() <= 0:
        raise ValueError("histogram has no accesses")
    return _to_unit(np.cumsum(r)), _to_unit(np.cumsum(mass) / mass.sum())


def _to_unit(cumulative: np.ndarray) -> np.ndarray:
    """A cumulative share that must end at 1: rounding may leave it at 1 +- 1e-16; clip it and end it at 1."""
    out = np.clip(cumulative, 0.0, 1.0)
    out[-1] = 1.0
    return out


def cdf_from_counts(counts, max_points: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Coverage points from per-row access counts (any order), thinned to at most ``max_points`` points."""
    c = np.sort(np.asarray(counts, dtype=np.float64).ravel())[::-1]
    if c.size == 0 or np.any(c < 0) or not c[0] > 0:
        raise ValueError("access counts must be non-negative with a positive sum")
    c = c / c[0]  # relative to the largest count: a sum of counts near 1e308 cannot overflow
    y = _to_unit(np.cumsum(c) / c.sum())
    idx = np.unique(np.concatenate([np.geomspace(1, c.size, max_points).astype(np.int64) - 1, [c.size - 1]]))
    return (idx + 1) / c.size, y[idx]
