"""What a fused group's op costs its host to issue inside a real step, beyond calibrate's tight loop (GPU only).

``placer calibrate`` times each op kind's fixed cost as the median of batches of 20 identical calls of the op on
one id, back to back: the host's dispatch path stays hot (the same ATen ops, the same allocator blocks, the
same branches). In a training step the runner issues each op once among hundreds of others, and on a GPU the
host issues for most of the step (validation/results/gpu-2026-11-27-run2/profile.json): each ATen op then
costs its host more. The dense step measured this as ``fixed_us.dense_op`` (about 11-12 us per traced op on an
H100's host); the groups' op chains measured the same (validation/gpu_micro.py ``groups``: 10-14 us per ATen op
beyond the tight-loop fixed costs). So on a GPU each op of a group costs, once per group,

    fixed(kind) + ATEN_OPS[kind] x fixed("embedding_op")

where ``embedding_op`` (seconds per ATen op) is fitted by calibrate from synthetic chains of groups run as the
runner runs them (calibrate/chain.py). A spec without it prices 0 (its datasheet default: KERNELS in
opcosts.py), so a CPU run, whose calibrate does not fit it, keeps its prices.
"""
from __future__ import annotations

#: ATen ops each runner op issues (runner/kernels.py, runner/optim.py; fp32 rows, the CUDA path), counted with
#: a dispatch-mode counter; tests/test_issue.py counts them again so that they follow the kernels
ATEN_OPS = {"lookup": 1, "pack_grad": 1, "sort": 3, "segment_reduce": 23, "scatter": 2,
            "copy_h2d": 1, "copy_d2h": 1, "all_reduce": 1}
#: ATen ops of SparseRowOptimizer.update (sparse rows) and update_dense (a replica's rows) per optimizer
UPDATE_ATEN_OPS = {"sgd": 3, "adagrad": 8, "rowwise_adagrad": 11, "adam": 14}
UPDATE_DENSE_ATEN_OPS = {"sgd": 1, "adagrad": 4, "rowwise_adagrad": 7, "adam": 8}


def aten_ops(kind: str, optimizer: str) -> int:
    """ATen ops one runner op of ``kind`` (a program op kind, ops.KINDS) issues with ``optimizer``."""
    if kind == "update":
        return UPDATE_ATEN_OPS[optimizer]
    if kind == "update_dense":
        return UPDATE_DENSE_ATEN_OPS[optimizer]
    return ATEN_OPS.get(kind, 1)


def group_aten_ops(optimizer: str) -> int:
    """ATen ops of one trained group's chain: lookup, pack_grad, sort, segment_reduce, update."""
    return sum(aten_ops(k, optimizer) for k in ("lookup", "pack_grad", "sort", "segment_reduce", "update"))


def issue_s(costs, kind: str, optimizer: str) -> float:
    """Seconds a group's op of ``kind`` costs its host beyond its calibrated fixed cost (``costs``: OpCosts)."""
    return aten_ops(kind, optimizer) * costs.fixed("embedding_op")
