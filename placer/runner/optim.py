"""Sparse row optimizers for embedding tables: update only the distinct rows a step touched.

Never a dense gradient of a whole table (except for data-parallel replicas, which the cost model prices with a
dense gradient and an all-reduce; ``update_dense`` serves them). The caller expands pooled-output gradients to
one row per lookup, reduces them over duplicate ids (``aggregate``) and passes the distinct row ids with their
summed gradients to ``update``, which reads the rows and their state, computes, and writes them back: the
read-modify-write of each touched row that cost.py prices.

Math (g: the row's summed gradient, lr: learning rate, state in fp32, weights in their storage precision and
computed in fp32):
- sgd:             w -= lr * g
- adagrad:         s += g^2 (per element);              w -= lr * g / (sqrt(s) + eps)
- rowwise_adagrad: s += mean(g^2) (one value per row);  w -= lr * g / (sqrt(s) + eps)
- adam (lazy, as torch.optim.SparseAdam): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2 on touched rows only;
  w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) with t the global step count.
"""
from __future__ import annotations

import torch

ADAGRAD_EPS = 1e-10  # as torch.optim.Adagrad
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
NAMES = ("sgd", "adagrad", "rowwise_adagrad", "adam")


def state_shapes(name: str, rows: int, cols: int) -> list[tuple[int, ...]]:
    """Shapes of the fp32 state tensors the optimizer keeps for a block of ``rows`` x ``cols``."""
    return {"sgd": [], "adagrad": [(rows, cols)], "rowwise_adagrad": [(rows,)],
            "adam": [(rows, cols), (rows, cols)]}[name]


def state_bytes_per_row(name: str, cols: int) -> int:
    return 4 * sum(int(torch.Size(s[1:]).numel()) for s in state_shapes(name, 1, cols))


def aggregate(ids: torch.Tensor, grad_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct ids and the sum of their gradient rows: (unique ids, (u, c) fp32)."""
    uniq, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    summed = torch.zeros((uniq.numel(), grad_rows.shape[1]), dtype=torch.float32, device=grad_rows.device)
    summed.index_add_(0, inverse, grad_rows.float())
    return uniq, summed


class SparseRowOptimizer:
    """One optimizer for all embedding rows of a run (state lives beside each block of rows)."""

    def __init__(self, name: str, lr: float):
        if name not in NAMES:
            raise ValueError(f"unknown optimizer {name!r}")
        self.name = name
        self.lr = float(lr)
        self.step_count = 0

    def new_step(self) -> None:
        """Advance the global step (Adam's bias correction); call once per training step."""
        self.step_count += 1

    def update(self, weight: torch.Tensor, states: list[torch.Tensor], ids: torch.Tensor,
               grad: torch.Tensor) -> None:
        """Update rows ``ids`` (distinct; or, repeated, a scratch row whose gradients are all zero: static_step.py)
        of ``weight`` with summed gradients ``grad`` (fp32, len(ids) x cols). ``weight`` and ``states`` may live in
        HBM, in RAM, or in host memory mapped for the GPU."""
        if ids.numel() == 0:
            return
        ids = ids.to(device=weight.device, dtype=torch.int64)  # index_copy_ wants int64
        grad = grad.to(weight.device)
        w = weight.index_select(0, ids).float()
        new_states = self._math(w, [s.index_select(0, ids) for s in states], grad)
        weight.index_copy_(0, ids, w.to(weight.dtype))
        for s, ns in zip(states, new_states):
            s.index_copy_(0, ids, ns)

    def update_dense(self, weight: torch.Tensor, states: list[torch.Tensor], grad: torch.Tensor) -> None:
        """Update every row (data-parallel replicas: the all-reduced dense gradient streams the table)."""
        w = weight.float()  # the weight itself when fp32 (updated in place), a copy when fp16
        self._math(w, states, grad)  # states updated in place
        if w.data_ptr() != weight.data_ptr():
            weight.copy_(w)

    def _math(self, w: torch.Tensor, s: list[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
        """In place on ``w`` (fp32 rows); returns the new state rows."""
        lr = self.lr
        if self.name == "sgd":
            w.add_(g, alpha=-lr)
            return []
        if self.name == "adagrad":
            acc = s[0].addcmul_(g, g)
            w.addcdiv_(g, acc.sqrt().add_(ADAGRAD_EPS), value=-lr)
            return [acc]
        if self.name == "rowwise_adagrad":
            acc = s[0].add_(g.pow(2).mean(dim=1))
            w.addcdiv_(g, acc.sqrt().add_(ADAGRAD_EPS).unsqueeze(1), value=-lr)
            return [acc]
        return self._adam(w, s, g)

    def _adam(self, w: torch.Tensor, s: list[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
        """Adam's step on fp32 rows ``w`` (in place), its bias corrections from the host's step count."""
        lr = self.lr
        b1, b2 = ADAM_BETAS
        t = max(self.step_count, 1)
        m = s[0].mul_(b1).add_(g, alpha=1 - b1)
        v = s[1].mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v / (1 - b2 ** t)).sqrt_().add_(ADAM_EPS)
        w.addcdiv_(m, denom, value=-lr / (1 - b1 ** t))
        return [m, v]
