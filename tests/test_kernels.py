"""runner/kernels.py's reductions: the GPU's split-runs sum (run here on the CPU, the same code) equals a
float64 reference on uniform and zipf-skewed ids, one huge run included, and so does the CPU's index_add."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from placer.runner import kernels


def _case(ids: np.ndarray, width: int = 8, seed: int = 0):
    ids_t = torch.from_numpy(ids.astype(np.int64))
    bags = torch.arange(ids_t.numel()) // 4
    uniq, counts, sorted_bags = kernels.sort(ids_t, bags)
    grad = torch.randn((ids_t.numel() // 4 + 1, width), generator=torch.Generator().manual_seed(seed))
    ref = torch.zeros((uniq.numel(), width), dtype=torch.float64)
    inverse = torch.searchsorted(uniq, ids_t)
    ref.index_add_(0, inverse, grad.double().index_select(0, bags))
    return grad, sorted_bags, counts, ref


@pytest.mark.parametrize("kind", ["uniform", "zipf1.05", "zipf1.2", "one-run", "all-distinct"])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 5000, 70000])
def test_split_runs_sum_equals_the_reference(kind, n):
    rng = np.random.default_rng(n)
    ids = {"uniform": lambda: rng.integers(0, max(1, n // 2), n), "zipf1.05": lambda: rng.zipf(1.05, n) % 10**6,
           "zipf1.2": lambda: rng.zipf(1.2, n) % 10**6, "one-run": lambda: np.full(n, 7),
           "all-distinct": lambda: rng.permutation(n)}[kind]()
    grad, sorted_bags, counts, ref = _case(ids)
    rows = grad.index_select(0, sorted_bags)
    got = kernels.split_runs_sum(rows, counts)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-4 * max(1.0, counts.max().item() ** 0.5))
    cpu = kernels.segment_reduce(grad, sorted_bags, counts)  # the CPU's sequential index_add
    torch.testing.assert_close(cpu.double(), ref, rtol=1e-5, atol=1e-4 * max(1.0, counts.max().item() ** 0.5))


def test_split_runs_sum_of_nothing():
    assert kernels.split_runs_sum(torch.zeros((0, 4)), torch.zeros(0, dtype=torch.int64)).shape == (0, 4)


def test_pieces_bound_both_stages():
    """A run of n lookups is cut into pieces of P ~ sqrt(n): no stage adds more than ~sqrt(n) rows into one."""
    for n in (1, 100, 2**20, 2**23):
        P = kernels.run_piece(n)
        assert P >= 64 and P * P >= n and -(-n // P) <= max(64, P)
