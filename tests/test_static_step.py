"""The graph-safe group backward (runner/static_step.py) against the eager one (kernels.sort, segment_reduce,
optim.SparseRowOptimizer), and the contract it keeps (runner/graph_guard.py): no op that synchronises the host or
sizes its output from the data."""
from __future__ import annotations

import pytest
import torch

from placer.runner import kernels, static_step
from placer.runner.graph_guard import GraphSafe, GraphUnsafe, unsafe_ops
from placer.runner.optim import NAMES, SparseRowOptimizer, state_shapes

ROWS, COLS, BAGS, LOOKUPS = 1000, 16, 256, 4096


def _ids(kind: str, gen: torch.Generator) -> torch.Tensor:
    """Uniform ids, or zipf-like ids where row 7 takes over half of the lookups."""
    if kind == "uniform":
        return torch.randint(0, ROWS, (LOOKUPS,), generator=gen)
    ranks = torch.arange(1, ROWS + 1, dtype=torch.float64)
    ids = torch.multinomial(ranks.pow(-1.2), LOOKUPS, replacement=True, generator=gen)
    ids[: LOOKUPS // 2 + 1] = 7
    return ids[torch.randperm(LOOKUPS, generator=gen)]


def _tables(name: str, dtype: torch.dtype, scratch: int):
    """The same rows and state every call; with ``scratch`` one more row past them."""
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn((ROWS + 1, COLS), generator=gen).to(dtype)
    states = [torch.rand(shape, generator=gen) for shape in state_shapes(name, ROWS + 1, COLS)]
    n = ROWS + scratch
    return weight[:n].clone(), [s[:n].clone() for s in states]


@pytest.mark.parametrize("ids_kind", ["uniform", "zipf"])
@pytest.mark.parametrize("name", NAMES)
def test_static_backward_equals_the_eager_one_after_three_steps(name, ids_kind):
    w_eager, s_eager = _tables(name, torch.float32, 0)
    w_static, s_static = _tables(name, torch.float32, 1)  # the same rows, and one scratch row past them
    eager, static = SparseRowOptimizer(name, 0.05), static_step.StaticRowOptimizer(name, 0.05)
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        ids = _ids(ids_kind, gen)
        bags = torch.randint(0, BAGS, (LOOKUPS,), generator=gen)
        grad = torch.randn((BAGS, COLS), generator=gen)
        uniq, counts, sorted_bags = kernels.sort(ids, bags)
        eager.new_step()
        eager.update(w_eager, s_eager, uniq, kernels.segment_reduce(grad, sorted_bags, counts))
        static.new_step()
        static_step.backward(w_static, s_static, static, ids, bags, grad)
    # the same sums in the same order: equal but for Adam's step, computed on the device (fp32 rounding)
    tol = {"rtol": 1e-4, "atol": 1e-5} if name == "adam" else {"rtol": 1e-6, "atol": 1e-7}
    torch.testing.assert_close(w_static[:ROWS], w_eager, **tol)
    for a, b in zip(s_static, s_eager):
        torch.testing.assert_close(a[:ROWS], b, **tol)


def test_fp16_rows_and_an_empty_step():
    w_eager, _ = _tables("sgd", torch.float16, 0)
    w_static, _ = _tables("sgd", torch.float16, 1)
    gen = torch.Generator().manual_seed(3)
    ids, bags = _ids("zipf", gen), torch.randint(0, BAGS, (LOOKUPS,), generator=gen)
    grad = torch.randn((BAGS, COLS), generator=gen)
    uniq, counts, sorted_bags = kernels.sort(ids, bags)
    SparseRowOptimizer("sgd", 0.1).update(w_eager, [], uniq, kernels.segment_reduce(grad, sorted_bags, counts))
    opt = static_step.StaticRowOptimizer("sgd", 0.1)
    static_step.backward(w_static, [], opt, ids, bags, grad)
    assert torch.equal(w_static[:ROWS], w_eager)
    before = w_static.clone()
    none = torch.zeros(0, dtype=torch.int64)
    static_step.backward(w_static, [], opt, none, none, grad)
    assert torch.equal(w_static, before)


def test_padding_slots_write_only_the_scratch_row():
    """A step touching 3 distinct rows in 8 slots: 5 padding slots, all aimed at the scratch row."""
    ids = torch.tensor([5, 9, 5, 2, 9, 9, 5, 2])
    run, rows, sorted_bags = static_step.runs(ids, torch.arange(8), scratch_row=10)
    assert rows.tolist() == [2, 5, 9, 10, 10, 10, 10, 10]
    assert run.tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    assert sorted(sorted_bags.tolist()) == list(range(8))


@pytest.mark.parametrize("name", NAMES)
def test_static_backward_keeps_the_graph_contract(name):
    weight, states = _tables(name, torch.float32, 1)
    gen = torch.Generator().manual_seed(4)
    ids, bags = _ids("zipf", gen), torch.randint(0, BAGS, (LOOKUPS,), generator=gen)
    grad = torch.randn((BAGS, COLS), generator=gen)
    opt = static_step.StaticRowOptimizer(name, 0.05)
    with GraphSafe():
        opt.new_step()
        static_step.backward(weight, states, opt, ids, bags, grad)


def test_the_guard_finds_what_the_eager_backward_does():
    """The eager backward breaks the contract where it is known to (unique_consecutive's run count, the CPU
    reduce's repeat_interleave without its size): the guard is not blind."""
    gen = torch.Generator().manual_seed(5)
    ids, bags = _ids("uniform", gen), torch.randint(0, BAGS, (LOOKUPS,), generator=gen)
    grad = torch.randn((BAGS, COLS), generator=gen)

    def eager():
        uniq, counts, sorted_bags = kernels.sort(ids, bags)
        kernels.segment_reduce(grad, sorted_bags, counts)

    names = [n for n, _ in unsafe_ops(eager)]
    assert "aten::unique_consecutive" in names and "aten::repeat_interleave" in names


@pytest.mark.parametrize("op", [
    lambda x: x.sum().item(),
    lambda x: bool(x.sum() > 0),
    lambda x: x[x > 0],
    lambda x: torch.nonzero(x),
    lambda x: torch.unique(x),
    lambda x: torch.masked_select(x, x > 0),
    lambda x: torch.repeat_interleave(torch.tensor([1, 2, 3])),
    lambda x: torch.bincount(torch.tensor([1, 2, 3])),
])
def test_the_guard_refuses_syncs_and_data_shaped_outputs(op):
    x = torch.randn(16)
    with pytest.raises(GraphUnsafe):
        with GraphSafe():
            op(x)


def test_the_guard_lets_static_ops_through():
    x = torch.randn(16)
    with GraphSafe():
        torch.repeat_interleave(torch.arange(3), torch.tensor([1, 2, 3]), output_size=6)
        torch.sort(x)
        torch.cumsum(x > 0, 0)
        torch.zeros(4).index_add_(0, torch.tensor([0, 1, 1]), torch.ones(3))
