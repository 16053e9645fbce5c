"""The runner's implementation of each embedding op kind of the step program (placer/program/ops.py).

One function per op kind, on a fused group's tensors; ``placer calibrate`` times these same functions, so an
op's calibrated cost is the cost of the code that runs it. Row ids are int64; pooled outputs and gradients
fp32; weights in their storage dtype (fp16 rows are computed in fp32).

- lookup:          gather and sum-pool bags of rows (``embedding_bag``, sum mode)
- sort:            sort the step's row ids with their positions, and find the runs of equal ids (the distinct
                   rows and how many lookups each has); one device-to-host sync on CUDA (the run count)
- segment_reduce:  expand the pooled gradients to one row per lookup, in sorted order, and sum each run: on a
                   CPU a sequential index_add over the sorted runs (one thread, no atomics); on CUDA
                   ``split_runs_sum``, whose time does not grow with the hottest row's lookups (runs cut into
                   pieces of at most ``run_piece(n)`` lookups, summed in two index_adds; no host sync).
                   torch.segment_reduce, which CUDA ran before, walks each run serially in one thread per column:
                   a zipf table's hottest row, with 10^5-10^6 lookups in a step, serialized the whole reduce
- update:          the optimizer's read-modify-write of the distinct rows and their state (runner/optim.py)
- scatter:         a replica's summed rows written into its zeroed dense gradient
- pack_grad:       members' pooled gradients gathered into the group's one gradient buffer
"""
from __future__ import annotations

import math

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
        return split_runs_sum(rows, counts)
    seg = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    out = torch.zeros((counts.numel(), grad.shape[1]), dtype=torch.float32)
    return out.index_add_(0, seg, rows)


def run_piece(lookups: int) -> int:
    """Lookups per piece of a run in ``split_runs_sum``: about sqrt(lookups), at least 64, so that neither of
    its two stages adds more than about sqrt(lookups) rows into one output row."""
    return max(64, math.isqrt(max(lookups, 1)) + 1)


def split_runs_sum(rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """(runs, c) fp32: the sum of each run of ``rows`` ((n, c), sorted by id; run r has ``counts[r]`` rows).

    Each run is cut into pieces of at most P = run_piece(n) rows; stage 1 adds every row into its piece
    (index_add_: at most P rows meet in one piece), stage 2 adds the pieces into their runs (a run of k rows
    receives ceil(k / P) pieces). The piece buffer is sized from host numbers (runs + n / P), never read back,
    so there is no device-to-host sync; pieces beyond the last used one are zeros, spread over the runs. Time
    grows with n, not with the longest run. Any device (the tests run it on a CPU)."""
    n, m, c = rows.shape[0], counts.numel(), rows.shape[1]
    dev = rows.device
    out = torch.zeros((m, c), dtype=torch.float32, device=dev)
    if n == 0 or m == 0:
        return out
    P = run_piece(n)
    run = torch.repeat_interleave(torch.arange(m, device=dev), counts, output_size=n)  # run of each row
    start = torch.cumsum(counts, 0) - counts  # first row of each run
    pieces = torch.div(counts + (P - 1), P, rounding_mode="floor")
    first_piece = torch.cumsum(pieces, 0) - pieces
    piece = first_piece[run] + torch.div(torch.arange(n, device=dev) - start[run], P, rounding_mode="floor")
    bound = m + n // P  # sum of ceil(k / P) over the runs <= runs + n / P
    partial = torch.zeros((bound, c), dtype=torch.float32, device=dev).index_add_(0, piece, rows)
    piece_run = (torch.arange(bound, device=dev) % m).scatter_(0, piece, run)  # unused pieces: zeros, spread
    return out.index_add_(0, piece_run, partial)


def scatter(dense_grad: torch.Tensor, uniq: torch.Tensor, summed: torch.Tensor) -> None:
    """A replica's dense gradient: zero, then the summed rows of the distinct ids."""
    dense_grad.zero_()
    dense_grad.index_copy_(0, uniq, summed)


def pack_grad(parts: list[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """The members' (bags_i, c) pooled gradients, concatenated into ``out`` (total bags, c)."""
    return torch.cat(parts, out=out)
