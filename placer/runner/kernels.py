"""The runner's implementation of each embedding op kind of the step program (placer/program/ops.py).

One function per op kind, on a fused group's tensors; ``placer calibrate`` times these same functions, so an
op's calibrated cost is the cost of the code that runs it. Row ids are int64; pooled outputs and gradients
fp32; weights in their storage dtype (fp16 rows are computed in fp32).

- lookup:          gather and sum-pool bags of rows (``embedding_bag``, sum mode)
- sort:            sort the step's row ids with their positions, and find the runs of equal ids (the distinct
                   rows and how many lookups each has); one device-to-host sync on CUDA (the run count)
- segment_reduce:  expand the pooled gradients to one row per lookup, in sorted order, and sum each run: on CUDA
                   a segmented reduction (no atomics piling on hot rows), on a CPU a sequential index_add over
                   the sorted runs (one thread, no atomics either)
- update:          the optimizer's read-modify-write of the distinct rows and their state (runner/optim.py)
- scatter:         a replica's summed rows written into its zeroed dense gradient
- pack_grad:       members' pooled gradients gathered into the group's one gradient buffer
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def lookup(weight: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """(bags, c) fp32: bag i sums rows ids[offsets[i]:offsets[i + 1]] of ``weight``."""
    out = F.embedding_bag(ids, weight, offsets, mode="sum")
    return out if out.dtype == torch.float32 else out.float()


def sort(ids: torch.Tensor, bags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(distinct ids in order, lookups per distinct id, bag of every lookup in sorted order)."""
    sorted_ids, order = torch.sort(ids)
    uniq, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
    return uniq, counts, bags.index_select(0, order)


def segment_reduce(grad: torch.Tensor, sorted_bags: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(distinct rows, c) fp32: each run's sum of the pooled gradients of its lookups' bags."""
    rows = grad.index_select(0, sorted_bags)
    if rows.is_cuda:
        return torch.segment_reduce(rows, "sum", lengths=counts, axis=0, unsafe=True)
    seg = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    out = torch.zeros((counts.numel(), grad.shape[1]), dtype=torch.float32)
    return out.index_add_(0, seg, rows)


def scatter(dense_grad: torch.Tensor, uniq: torch.Tensor, summed: torch.Tensor) -> None:
    """A replica's dense gradient: zero, then the summed rows of the distinct ids."""
    dense_grad.zero_()
    dense_grad.index_copy_(0, uniq, summed)


def pack_grad(parts: list[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """The members' (bags_i, c) pooled gradients, concatenated into ``out`` (total bags, c)."""
    return torch.cat(parts, out=out)
