"""Fused groups whose backward is graph-safe (runner/static_step.py): static shapes, no host synchronisation.

A ``GraphSafeGroup`` is a FusedGroup of plain trained rows in HBM or in host memory read by the GPU (``hbm``,
``uvm``) that holds one scratch row past its own rows and runs its ``sort``, ``segment_reduce`` and ``update``
over the step's L lookup slots: the distinct rows in the first slots, the padding aimed at the scratch row. Its
optimizer is the run's ``StaticRowOptimizer`` (BuildContext.static_optimizer: the step count on the device).
Groups it does not cover (replicas, rows looked up by the host CPU, frozen and compressed rows) are built as
before (compressed_groups.make_group): ``graph_safe`` says which.
"""
from __future__ import annotations

import torch

from placer.program.ops import GroupKey
from placer.runner import kernels, static_step
from placer.runner.compressed_groups import make_group
from placer.runner.groups import BuildContext, FusedGroup, Slot


def graph_safe(key: GroupKey) -> bool:
    """Whether a group of ``key`` gets the graph-safe backward (frozen rows: only the padded lookup)."""
    return key.location in ("hbm", "uvm") and not key.form


class GraphSafeGroup(FusedGroup):
    """A FusedGroup with the static-shape backward (module docstring). Its inputs may be padded to a fixed
    number of lookups (runner/graph_step.StaticInputs): the padding looks up the scratch row (zeros, never
    changed: its gradient is zero) into one padding bag past the group's own, whose pooled gradient ``grad``
    keeps at zero in its last row."""

    extra_rows = 1  # the scratch row, at index ``rows``

    def __init__(self, key: GroupKey, slots: list[Slot], ctx: BuildContext):
        super().__init__(key, slots, ctx)
        self.grad = self.grad_op = torch.zeros((self.bags + 1, self.width), dtype=torch.float32,
                                               device=self.grad.device)

    def pack_grad(self, parts: list[torch.Tensor]) -> None:
        kernels.pack_grad(parts, self.grad[:self.bags])

    def sort(self, inp):
        return static_step.runs(inp.ids, inp.bags, self.rows)

    def segment_reduce(self, runs) -> torch.Tensor:
        run, _rows, sorted_bags = runs
        return static_step.segment_sums(self.grad_op, run, sorted_bags)

    def update(self, runs, summed: torch.Tensor) -> None:
        self.ctx.static_optimizer.update(self.weight, self.states, runs[1], summed)


def make_graph_group(key: GroupKey, slots: list[Slot], ctx: BuildContext) -> FusedGroup:
    """A GraphSafeGroup where ``graph_safe(key)``, else the group make_group builds."""
    return GraphSafeGroup(key, slots, ctx) if graph_safe(key) else make_group(key, slots, ctx)


def graph_record(mode: str, groups: dict, device: torch.device, step=None, why: str | None = None) -> dict:
    """What a run's result says of its step (``placer run --graph``): the mode asked for; the groups that ran the
    graph-safe step and those that ran eagerly; whether the timed steps replayed CUDA graphs, and why not where
    they did not; ``step``: the run's runner/graph_step.GraphStep, or None (the eager step ran: ``why``)."""
    safe = [k.label for k, g in groups.items() if isinstance(g, GraphSafeGroup)]
    other = [k.label for k, g in groups.items() if not isinstance(g, GraphSafeGroup)]
    record = {"mode": mode, "graph_safe_groups": safe, "eager_groups": other,
              "eager_groups_why": "rows looked up by the host CPU run eagerly beside the graphs" if safe and other
              else None, "captured": False, "not_captured_why": why}
    if step is not None:
        record.update(step.record())
    return record
