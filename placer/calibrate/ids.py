"""Row ids for benchmarks: uniform, or zipf-skewed as the workloads' access models assume (the hottest ids
scattered over the table by a fixed permutation of the ranks, so hot rows are not neighbours)."""
from __future__ import annotations

import numpy as np
import torch

#: a multiplier coprime with any table size we scatter over that is not a multiple of it: rank -> id
SCATTER = 2654435761


def skewed_ids(n: int, alpha: float | None, seed: int, space: int) -> torch.Tensor:
    """``n`` int64 ids in [0, space) on the CPU: uniform (``alpha`` None) or zipf(alpha) ranks (ranks past the
    table redrawn), rank r becoming id (r x SCATTER) mod space."""
    rng = np.random.default_rng(seed)
    if alpha is None:
        return torch.from_numpy(rng.integers(0, space, n, dtype=np.int64))
    ranks = rng.zipf(alpha, n) - 1
    ranks = ranks[ranks < space]
    while ranks.size < n:
        more = rng.zipf(alpha, n - ranks.size) - 1
        ranks = np.concatenate([ranks, more[more < space]])
    return torch.from_numpy((ranks.astype(np.int64) * SCATTER) % space)
