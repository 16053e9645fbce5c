"""Compressed tables (runner/compressed.py) against a reference: the same table materialized in full and pooled by
torch's embedding_bag; forward and gradients equal, memory as stated."""
import math

import pytest
import torch
import torch.nn.functional as F

from placer.runner.compressed import (Int8EmbeddingBag, QREmbeddingBag, TTEmbeddingBag, dim_factors, pool_rows,
                                      tt_factors)


def _bags(rows: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 5, (32,), generator=g)
    ids = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
    return ids, offsets


@pytest.mark.parametrize("op", ["mult", "add"])
def test_qr_pools_like_its_materialized_table_forward_and_backward(op):
    rows, dim, k = 103, 8, 4
    m = QREmbeddingBag(rows, dim, k, op=op)
    with torch.no_grad():  # make the remainders non-trivial
        m.remainder.add_(torch.randn_like(m.remainder) * 0.1)
    ids, offsets = _bags(rows)
    full = torch.stack([m.quotient[i // k] * m.remainder[i % k] if op == "mult" else
                        m.quotient[i // k] + m.remainder[i % k] for i in range(rows)])
    ref = F.embedding_bag(ids, full, offsets, mode="sum")
    got = m(ids, offsets)
    torch.testing.assert_close(got, ref)
    w = torch.randn_like(got)
    gq, gr = torch.autograd.grad((got * w).sum(), [m.quotient, m.remainder])
    rq, rr = torch.autograd.grad((ref * w).sum(), [m.quotient, m.remainder])
    torch.testing.assert_close(gq, rq)
    torch.testing.assert_close(gr, rr)
    assert m.weight_bytes() == (math.ceil(rows / k) + k) * dim * 4
    assert len({tuple(r.tolist()) for r in full}) == rows  # every id keeps a unique vector


def test_qr_refuses_fewer_than_two_collisions():
    with pytest.raises(ValueError, match="at least 2"):
        QREmbeddingBag(10, 4, 1)


def test_tt_rows_are_the_cores_contracted_and_pool_like_the_materialized_table():
    rows, dim = 1000, 16
    m = TTEmbeddingBag(rows, dim, (3, 5))
    (n1, n2, n3), (d1, d2, d3) = m.n, m.d
    assert n1 * n2 * n3 >= rows and d1 * d2 * d3 == dim
    g1 = m.core1.view(n1, d1, 3)
    g2 = m.core2.view(n2, 3, d2, 5)
    g3 = m.core3.view(n3, 5, d3)
    i = 777
    i1, i2, i3 = i // (n2 * n3), (i // n3) % n2, i % n3
    explicit = torch.einsum("ar,rbs,sc->abc", g1[i1], g2[i2], g3[i3]).reshape(dim)
    torch.testing.assert_close(m.row(torch.tensor([i]))[0], explicit)
    ids, offsets = _bags(rows, 1)
    full = m.row(torch.arange(rows))
    got = m(ids, offsets)
    ref = F.embedding_bag(ids, full, offsets, mode="sum")
    torch.testing.assert_close(got, ref)
    w = torch.randn_like(got)
    params = [m.core1, m.core2, m.core3]
    for a, b in zip(torch.autograd.grad((got * w).sum(), params), torch.autograd.grad((ref * w).sum(), params)):
        torch.testing.assert_close(a, b)
    assert m.weight_bytes() < rows * dim * 4 / 4
    assert 0.3 < float(full.detach().std()) / math.sqrt(1 / rows / 3) < 3  # the init's spread is DLRM's


def test_factorizations():
    assert tt_factors(1_000_000) == [100, 100, 100]
    assert math.prod(tt_factors(12345)) >= 12345
    assert dim_factors(64) == [4, 4, 4] and dim_factors(128) == [4, 4, 8] and math.prod(dim_factors(12)) == 12


def test_int8_rows_are_within_half_a_step_and_pool_their_dequantized_values():
    w = torch.randn(50, 8)
    m = Int8EmbeddingBag(w)
    deq = m.dequantized()
    step = (w.max(dim=1).values - w.min(dim=1).values) / 255
    assert torch.all((deq - w).abs() <= step[:, None] / 2 + 1e-6)
    ids, offsets = _bags(50, 2)
    torch.testing.assert_close(m(ids, offsets), F.embedding_bag(ids, deq, offsets, mode="sum"))
    assert m.weight_bytes() == 50 * 8 + 50 * 2 * 4
    assert not list(m.parameters())  # frozen


def test_pool_rows_leaves_empty_bags_at_zero():
    rows = torch.ones(3, 2)
    out = pool_rows(rows, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 2]))
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0], [2.0, 2.0], [1.0, 1.0]]))
