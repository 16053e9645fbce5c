"""Access-skew models: coverage curves, sampling and unique-row estimates agree with direct computation."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placer.specs.access import (CdfAccess, UniformAccess, ZipfAccess, cdf_from_counts, cdf_from_histogram,
                                 generalized_harmonic)
from placer.specs.locality import batch_locality, poisson_counts, table_locality

alphas = st.floats(min_value=0.01, max_value=3.0, allow_nan=False)
rows = st.integers(min_value=1, max_value=10**9)


def _direct_coverage(n: int, alpha: float, k: np.ndarray) -> np.ndarray:
    p = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    c = np.concatenate([[0.0], np.cumsum(p)])
    return c[k] / c[-1]


@settings(max_examples=150, deadline=None)
@given(alpha=alphas, n=rows)
def test_zipf_coverage_is_a_cdf(alpha, n):
    z = ZipfAccess(n, alpha)
    f = np.concatenate([[0.0], np.geomspace(1e-9, 1.0, 200)])
    c = z.coverage(f)
    assert z.coverage(0.0) == 0.0
    assert z.coverage(1.0) == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(c) >= -1e-12)
    assert np.all((c >= 0) & (c <= 1))
    assert np.all(c >= f - 1e-9)  # the hottest rows carry at least their share


@settings(max_examples=60, deadline=None)
@given(points=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=12), n=rows)
def test_cdf_coverage_is_a_cdf(points, n):
    xs = np.sort([p[0] for p in points])
    ys = np.sort([p[1] for p in points])
    ys[xs == 0] = 0.0  # no rows take no lookups
    if ys[-1] <= 0:
        ys[-1] = 0.5
        xs[-1] = max(xs[-1], 0.5)
    m = CdfAccess(n, xs, ys)
    f = np.linspace(0, 1, 101)
    c = m.coverage(f)
    assert m.coverage(0.0) == 0.0 and m.coverage(1.0) == pytest.approx(1.0)
    assert np.all(np.diff(c) >= -1e-12)


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 1025, 4096, 99_991, 100_000])
@pytest.mark.parametrize("alpha", [0.05, 0.5, 0.99, 1.0, 1.01, 1.2, 2.5])
def test_zipf_coverage_matches_direct_sum(n, alpha):
    z = ZipfAccess(n, alpha)
    k = np.unique(np.concatenate([np.arange(0, min(n, 2000) + 1), np.linspace(0, n, 500).astype(np.int64)]))
    assert np.max(np.abs(z.coverage(k / n) - _direct_coverage(n, alpha, k))) < 1e-9


def test_generalized_harmonic_matches_direct_sum_far_out():
    n = np.array([1, 1024, 1025, 10**5, 10**6])
    for alpha in (0.3, 1.0, 1.7):
        direct = [np.sum(np.arange(1, m + 1, dtype=np.float64) ** -alpha) for m in n]
        assert np.allclose(generalized_harmonic(n, alpha), direct, rtol=1e-12)


def test_zipf_coverage_of_40m_rows():  # its speed: validation/perf_checks.py
    f = np.geomspace(1e-8, 1.0, 1000)
    z = ZipfAccess(40_000_000, 1.1)
    c = z.coverage(f)
    assert 0.8 < z.coverage(0.001) < 0.9 and c[-1] == pytest.approx(1.0)


def test_uniform_coverage_is_identity():
    u = UniformAccess(1000)
    f = np.linspace(0, 1, 11)
    assert np.allclose(u.coverage(f), f)
    assert u.describe() == "uniform"


@pytest.mark.parametrize("model", [
    ZipfAccess(1000, 1.05), ZipfAccess(3_000_000, 0.8), UniformAccess(500),
    CdfAccess(10_000, [0.01, 0.1, 0.5], [0.5, 0.8, 0.97]),
], ids=["zipf-1k", "zipf-3m", "uniform", "cdf"])
def test_sample_frequencies_match_coverage(model):
    rng = np.random.default_rng(7)
    n_draws = 200_000
    ranks = model.sample(n_draws, rng)
    assert ranks.dtype == np.int64 and ranks.min() >= 0 and ranks.max() < model.rows
    for f in (0.001, 0.01, 0.1, 0.5):
        k = max(1, int(round(f * model.rows)))
        expected = float(model.coverage(k / model.rows))
        observed = float(np.mean(ranks < k))
        sigma = np.sqrt(expected * (1 - expected) / n_draws)
        assert abs(observed - expected) < 5 * sigma + 2e-3, (f, observed, expected)


def test_sample_is_reproducible_with_a_seed():
    z = ZipfAccess(10**6, 1.1)
    a = z.sample(1000, np.random.default_rng(3))
    b = z.sample(1000, np.random.default_rng(3))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("model, lookups", [
    (ZipfAccess(100_000, 1.05), 50_000), (ZipfAccess(20_000, 0.6), 100_000), (UniformAccess(10_000), 10_000),
    (CdfAccess(50_000, [0.01, 0.2], [0.6, 0.9]), 30_000),
], ids=["zipf-steep", "zipf-flat", "uniform", "cdf"])
def test_expected_unique_rows_matches_simulation(model, lookups):
    rng = np.random.default_rng(11)
    sims = [len(np.unique(model.sample(lookups, rng))) for _ in range(5)]
    expected = model.expected_unique_rows(lookups)
    assert expected == pytest.approx(np.mean(sims), rel=0.02)
    assert 0 < expected <= min(model.rows, lookups)


def test_expected_unique_rows_limits():
    z = ZipfAccess(1000, 1.0)
    assert z.expected_unique_rows(0) == 0.0
    assert z.expected_unique_rows(1) == pytest.approx(1.0, abs=1e-6)
    assert z.expected_unique_rows(10**9) == pytest.approx(1000, rel=1e-6)
    assert UniformAccess(100).expected_unique_rows(100) == pytest.approx(100 * (1 - (1 - 1 / 100) ** 100), rel=1e-3)


def test_histogram_and_counts_give_the_same_curve():
    # 2% of rows read 100 times, 30% read 5 times, 68% once
    x, y = cdf_from_histogram([1, 100, 5], [0.68, 0.02, 0.30])
    assert np.allclose(x, [0.02, 0.32, 1.0])
    total = 0.02 * 100 + 0.30 * 5 + 0.68
    assert np.allclose(y, [2 / total, 3.5 / total, 1.0])
    counts = np.array([100] * 2 + [5] * 30 + [1] * 68)
    cx, cy = cdf_from_counts(counts)
    m = CdfAccess(100, cx, cy)
    assert m.coverage(0.02) == pytest.approx(2 / total) and m.coverage(0.32) == pytest.approx(3.5 / total)


def test_cdf_rejects_bad_curves():
    with pytest.raises(ValueError, match="non-decreasing"):
        CdfAccess(10, [0.1, 0.2], [0.6, 0.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        CdfAccess(10, [0.1], [1.5])
    with pytest.raises(ValueError, match="row fraction 0"):
        CdfAccess(10, [0.0, 0.5], [0.3, 0.9])
    with pytest.raises(ValueError):
        ZipfAccess(10, 0.0)


# ---- batch locality (placer.specs.locality) -----------------------------------------------------------------

@pytest.mark.parametrize("n, alpha, lookups", [(100_000, 1.05, 200_000), (100_000, 0.7, 50_000),
                                               (3000, 1.2, 1e6), (400_000, 1.1, 3e5)])
def test_locality_grid_matches_per_row_computation(n, alpha, lookups):
    p = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    exact = poisson_counts(lookups * p / p.sum(), np.ones(n)).as_dict()
    approx = table_locality(ZipfAccess(n, alpha), lookups).as_dict()
    for k, v in exact.items():
        assert approx[k] == pytest.approx(v, rel=2e-3, abs=1e-6), k


def test_locality_matches_simulation():
    z = ZipfAccess(100_000, 1.05)
    lookups = 200_000
    rng = np.random.default_rng(5)
    counts = np.bincount(z.sample(lookups, rng))
    counts = counts[counts > 0]
    s = table_locality(z, lookups)
    assert s.unique_rows == pytest.approx(len(counts), rel=0.02)
    assert s.once_rows_fraction == pytest.approx(np.mean(counts == 1), abs=0.01)
    assert s.rows_over_fraction(16) == pytest.approx(np.mean(counts > 16), rel=0.05)
    assert s.lookups_over_fraction(16) == pytest.approx(counts[counts > 16].sum() / lookups, abs=0.01)
    assert s.lookups_over_fraction(64) == pytest.approx(counts[counts > 64].sum() / lookups, abs=0.01)


def test_locality_adds_over_tables():
    a, b = (ZipfAccess(1000, 1.0), 5000.0), (UniformAccess(10**6), 1000.0)
    both = batch_locality([a, b])
    assert both.lookups == pytest.approx(6000.0)
    assert both.unique_rows == pytest.approx(table_locality(*a).unique_rows + table_locality(*b).unique_rows)
    assert table_locality(*b).once_rows_fraction == pytest.approx(1.0, abs=1e-3)  # 1000 draws over 1M rows


def test_counts_near_the_float_limit_do_not_overflow():
    """Ten counts of 1e308 sum past the largest float: the coverage is still a finite, even 0.1 per row."""
    import numpy as np

    from placer.specs.access import cdf_from_counts

    x, y = cdf_from_counts(np.full(10, 1e308))
    assert np.all(np.isfinite(y)) and np.allclose(y, x)
