"""A fused group's backward with static shapes and no host synchronisation: what a CUDA graph can capture.

The eager backward (kernels.sort, kernels.segment_reduce, optim.SparseRowOptimizer.update) finds the distinct
rows of a step with ``unique_consecutive``, whose output length is the data's: on CUDA a blocking read of the run
count, and a shape no graph can replay. Here every tensor has the step's L lookup slots, whatever the ids:

1. sort the L ids (with their bags);
2. run heads: slot i starts a run where its id differs from slot i - 1; each slot's run index is the cumulative
   sum of the heads, less one (runs 0..U-1 in the first U slots' order, U never read on the host);
3. segment sums into L slots: the pooled gradient of each lookup's bag added into its run's slot (slots U..L-1
   stay zero);
4. the rows to update: slot r < U holds run r's id, the padding slots U..L-1 the group's scratch row (one row
   past the table's, kept for this: its weight and state absorb the padding's writes, never read as a table row);
5. the optimizer over the L slots: gather rows and state, compute, scatter back (the scratch row written by every
   padding slot, in any order); Adam's step count a device tensor, its bias corrections computed there.

Rows a step does not touch are never read or written, so the result equals the eager step's (the same sums, the
same math, rows at their own ids). ``graph_guard.GraphSafe`` checks the contract op by op.
"""
from __future__ import annotations

import torch

from placer.runner.optim import ADAM_BETAS, ADAM_EPS, SparseRowOptimizer


def runs(ids: torch.Tensor, bags: torch.Tensor, scratch_row: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(run of every sorted lookup slot (L,), the row each slot updates (L,): its run's id in the first U slots
    and ``scratch_row`` in the rest, the bag of every lookup in sorted order (L,)). No host sync, static shapes."""
    n = ids.numel()
    sorted_ids, order = torch.sort(ids)
    heads = torch.ones(n, dtype=torch.bool, device=ids.device)
    if n > 1:
        heads[1:] = sorted_ids[1:] != sorted_ids[:-1]
    run = torch.cumsum(heads, 0) - 1
    rows = torch.full((n,), scratch_row, dtype=torch.int64, device=ids.device)
    rows.scatter_(0, run, sorted_ids.to(torch.int64))  # every slot of a run writes the same id
    return run, rows, bags.index_select(0, order)


def segment_sums(grad: torch.Tensor, run: torch.Tensor, sorted_bags: torch.Tensor) -> torch.Tensor:
    """(L, c) fp32: slot r holds run r's sum of its lookups' pooled gradients (rows ``grad[bag]``); the padding
    slots zero."""
    out = torch.zeros((run.numel(), grad.shape[1]), dtype=torch.float32, device=grad.device)
    return out.index_add_(0, run, grad.index_select(0, sorted_bags).float())


class StaticRowOptimizer(SparseRowOptimizer):
    """optim.SparseRowOptimizer over the L slots of ``runs`` (its update gathers, computes and scatters them, the
    padding slots' zero gradients landing in the scratch row), its step count on ``device`` (a graph replays the
    increment), Adam's bias corrections computed there."""

    def __init__(self, name: str, lr: float, device: torch.device | str = "cpu"):
        super().__init__(name, lr)
        self.step_count = torch.zeros((), dtype=torch.float64, device=device)  # exact counts, as the eager int

    def new_step(self) -> None:
        """Advance the global step (Adam's bias correction) on the device; once per training step."""
        self.step_count.add_(1.0)

    def _adam(self, w: torch.Tensor, s: list[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
        lr = self.lr
        b1, b2 = ADAM_BETAS
        t = torch.clamp(self.step_count, min=1.0)
        m = s[0].mul_(b1).add_(g, alpha=1 - b1)
        v = s[1].mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v / (1 - torch.pow(b2, t))).sqrt_().add_(ADAM_EPS)
        w.add_(m.div(denom).mul_((-lr / (1 - torch.pow(b1, t))).float()))  # as eager's addcdiv, to fp32 rounding
        return [m, v]


def backward(weight: torch.Tensor, states: list[torch.Tensor], optimizer: StaticRowOptimizer, ids: torch.Tensor,
             bags: torch.Tensor, grad: torch.Tensor) -> None:
    """One group's backward after its pooled gradients ``grad`` (bags, c): runs, segment sums and the update of
    the rows its lookups ``ids`` (local row ids, each in bag ``bags``) touched. ``weight`` and ``states`` hold
    one scratch row past the table's (their last row)."""
    run, rows, sorted_bags = runs(ids, bags, weight.shape[0] - 1)
    optimizer.update(weight, states, rows, segment_sums(grad, run, sorted_bags))
