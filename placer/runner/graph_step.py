"""The training step replayed as CUDA graphs: no host in the loop for the device's groups and the dense part.

``GraphStep`` runs a Trainer built with ``graph_safe=True`` (runner/graph_groups.py). Its step is cut in two
segments of device work, each captured once as a CUDA graph after warm-up and replayed every step:

- A, the device forward: the step's inputs picked from the device-resident pool (``StaticInputs``: the pool's
  batches padded to one shape, chosen by a step index that lives on the device and advances in the graph), the
  graph-safe optimizer's step count advanced, every device group's lookup;
- B, the rest: the host-CPU groups' outputs copied in, the tables assembled, the dense part's forward, loss,
  backward and optimizer step, the pooled gradients packed (copied out for host-CPU groups), every device group's
  static-shape backward, the loss written into a device log.

Groups whose rows the host CPU looks up (``eager_keys``) stay eager on the host: their lookups run while A
replays (the overlap the program prices), their backward after B's gradients have arrived. Without such groups
A and B are one graph and a step is one launch. The dense optimizer runs capturable (its step counts on the
device: Adam's bias corrections) and autocast runs without its cast cache, as graph capture needs.

On a device that is not CUDA the same segments run as plain calls, in the same order, on the same padded inputs:
the CPU tests hold the path to the eager step's numbers and to the graph contract (graph_guard.GraphSafe), and a
dry run takes it up to the capture call. ``why_not_capturable`` says what keeps a plan's step off a graph
(replicated tables, compressed rows: their backward still sizes its work from the data).
"""
from __future__ import annotations

import contextlib

import torch

from placer.program.build import ProgramBuilder
from placer.runner.batches import Batch
from placer.runner.graph_groups import GraphSafeGroup, graph_safe
from placer.runner.groups import GroupInput
from placer.runner.timing import OpTimer, StepTimer, synchronize

#: eager steps run before the capture (optimizer state allocated, allocator and autotuning warm)
WARMUP_STEPS = 3


def eager_keys(groups: dict, device: torch.device) -> frozenset:
    """The groups that stay eager on the host: rows looked up by the host CPU (and, on a GPU run whose GPU
    cannot map host memory, every group whose lookups the CPU runs)."""
    return frozenset(k for k, g in groups.items()
                     if k.location == "cpu" or (device.type == "cuda" and g.on_cpu))


def why_not_capturable(groups: dict, device: torch.device) -> str | None:
    """Why the step of these groups cannot be replayed as a graph (the groups named), or None."""
    host = eager_keys(groups, device)
    return _why_groups([k.label for k, g in groups.items() if k not in host and not isinstance(g, GraphSafeGroup)])


def plan_why_not_capturable(plan, topo, workload) -> str | None:
    """why_not_capturable for ``plan``'s groups before they are built (from the step program's group keys)."""
    builder = ProgramBuilder(topo, workload)
    keys = sorted({key for p in plan.placements for key, _m in builder.members(p)})
    return _why_groups([k.label for k in keys if k.location != "cpu" and not graph_safe(k)])


def _why_groups(other: list[str]) -> str | None:
    if other:
        shown = ", ".join(other[:4]) + (f" and {len(other) - 4} more" if len(other) > 4 else "")
        return (f"groups without a graph-safe backward (replicated tables, compressed rows): {shown}; their "
                "backward sizes its work from the step's ids")
    return None


class StaticInputs:
    """The pool's batches on the device at one shape, picked by a device step index (no host in the loop).

    Per device group: ids (P, L) with L the pool's most lookups, the padding aimed at the group's scratch row;
    bags (P, L), the padding in one extra bag (index ``bags``); offsets (P, bags + 1), the padding bag starting
    after each batch's own lookups. Dense features (P, B, d) and labels (P, B). ``index`` (1,) int64 on the
    device: the pool position of the next step (mod P)."""

    def __init__(self, pool: list[Batch], groups: dict, keys, device: torch.device, start: int = 0):
        self.P = len(pool)
        self.index = torch.full((1,), start, dtype=torch.int64, device=device)
        self.ids, self.offsets, self.bags = {}, {}, {}
        for k in keys:
            g = groups[k]
            L = max(1, max(b.groups[k].ids.numel() for b in pool))
            dev = pool[0].groups[k].ids.device
            ids = torch.full((self.P, L), g.rows, dtype=torch.int64, device=dev)
            bags = torch.full((self.P, L), g.bags, dtype=torch.int64, device=dev)
            offsets = torch.empty((self.P, g.bags + 1), dtype=torch.int64, device=dev)
            for i, b in enumerate(pool):
                inp = b.groups[k]
                n = inp.ids.numel()
                ids[i, :n] = inp.ids
                bags[i, :n] = inp.bags
                offsets[i, :g.bags] = inp.offsets
                offsets[i, g.bags] = n
            self.ids[k], self.offsets[k], self.bags[k] = ids, offsets, bags
        self.dense = torch.stack([b.dense for b in pool])
        self.labels = torch.stack([b.labels for b in pool])

    def nbytes(self) -> int:
        """Device bytes of the padded pool."""
        ts = [*self.ids.values(), *self.offsets.values(), *self.bags.values(), self.dense, self.labels]
        return sum(t.numel() * t.element_size() for t in ts)

    def pick(self) -> Batch:
        """The next step's inputs (views of one pool position, chosen on the device); the index advances."""
        at = torch.remainder(self.index, self.P)
        one = lambda t: t.index_select(0, at.to(t.device))[0]
        groups = {k: GroupInput(ids=one(self.ids[k]), offsets=one(self.offsets[k]), bags=one(self.bags[k]))
                  for k in self.ids}
        batch = Batch(dense=one(self.dense), labels=one(self.labels), groups=groups, table_ids={})
        self.index.add_(1)
        return batch


class GraphStep:
    """A Trainer's step as segments A and B (module docstring), captured as CUDA graphs where the device is CUDA
    and the plan allows it; ``train`` runs steps (timed by a StepTimer like Trainer.train) and logs their losses
    on the device. ``capacity``: the most steps whose losses are kept (the log is cyclic beyond)."""

    def __init__(self, trainer, capacity: int, start: int = 0):
        self.tr = trainer
        self.device = trainer.device
        self.eager_keys = eager_keys(trainer.groups, self.device)
        self.device_keys = [k for k in trainer.groups if k not in self.eager_keys]
        self.why_not = why_not_capturable(trainer.groups, self.device)
        if self.why_not is not None:
            raise ValueError(self.why_not)
        self.inputs = StaticInputs(trainer.pool, trainer.groups, self.device_keys, self.device, start)
        self.position = start  # the host's copy of the pool position (host-CPU groups' inputs)
        self.capacity = max(1, capacity)
        self.loss_log = torch.zeros(self.capacity, dtype=torch.float32, device=self.device)
        self.logged = torch.zeros((1,), dtype=torch.int64, device=self.device)
        self.steps = 0
        self.graphs: list | None = None
        self.captured = False
        self.not_captured_why: str | None = None
        self._batch: Batch | None = None
        self._outs: dict = {}
        self._host_outs: dict = {}
        self._b_done = None

    # ---- the segments -----------------------------------------------------------------------------------------

    def _segment_a(self) -> None:
        """Device work of the forward: the inputs picked, the static optimizer's step, the device lookups."""
        if self.tr.static_optimizer is not None:
            self.tr.static_optimizer.new_step()
        self._batch = self.inputs.pick()
        self._outs = {k: self.tr.groups[k].lookup(self._batch.groups[k]) for k in self.device_keys}

    def _segment_b(self) -> None:
        """The rest of the step's device work (module docstring); the loss into the log."""
        outs = dict(self._outs)
        outs.update(self._host_outs)
        loss = self.tr.finish_step(outs, self._batch, OpTimer.off(), eager_keys=self.eager_keys)
        at = torch.remainder(self.logged, self.capacity)
        self.loss_log.index_copy_(0, at, loss.float().view(1))
        self.logged.add_(1)

    def _host_forward(self) -> None:
        """The host-CPU groups' lookups of this step (their outputs: pinned buffers a graph copies from)."""
        batch = self.tr.pool[self.position % len(self.tr.pool)]
        self._host_outs = {k: self.tr.groups[k].lookup(batch.groups[k]) for k in self.eager_keys}

    def _host_backward(self) -> None:
        """The host-CPU groups' backward, once segment B's gradients have arrived."""
        if not self.eager_keys:
            return
        if self._b_done is not None:  # set on CUDA (_one_step): B's copies of the gradients have landed
            self._b_done.synchronize()
        batch = self.tr.pool[self.position % len(self.tr.pool)]
        for k in sorted(self.eager_keys):
            g = self.tr.groups[k]
            if g.key.trained:
                self.tr._backward(k, g, batch, OpTimer.off())

    def _one_step(self, replay: bool) -> None:
        """One step: A, the host-CPU groups' lookups meanwhile, B, then their backward (replayed or called)."""
        self.tr.optimizer.new_step()  # the eager optimizer's host step count (host-CPU groups' Adam)
        if replay:
            self.graphs[0].replay()
        else:
            self._segment_a()
        self._host_forward()
        if not replay:
            self._segment_b()
        elif len(self.graphs) == 2:
            self.graphs[1].replay()
        if self.device.type == "cuda" and self.eager_keys:
            self._b_done = torch.cuda.Event()
            self._b_done.record()
        self._host_backward()
        self.position += 1
        self.steps += 1

    # ---- capture and the loop ---------------------------------------------------------------------------------

    def capture(self, warmup: int = WARMUP_STEPS) -> None:
        """``warmup`` eager steps (on a side stream on CUDA), then segments A and B captured as CUDA graphs (one
        graph without host-CPU groups). On another device nothing is captured: ``not_captured_why`` says so and
        the steps run the segments as plain calls."""
        cuda = self.device.type == "cuda"
        side = torch.cuda.Stream(self.device) if cuda else None
        if cuda:
            side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side) if cuda else contextlib.nullcontext():
            for _ in range(warmup):
                self._one_step(replay=False)
        if not cuda:
            self.not_captured_why = "CUDA graphs are CUDA's: on this device the same segments run as plain calls"
            return
        torch.cuda.current_stream(self.device).wait_stream(side)
        synchronize(self.device)
        try:
            self.graphs = self._capture_graphs()
        except RuntimeError as exc:  # an op the guard cannot see (a sync inside a kernel's C++): run uncaptured
            self.graphs = None
            self.not_captured_why = f"the capture failed, so the steps run as plain calls: {exc}"[:500]
            synchronize(self.device)
            return
        self.captured = True
        synchronize(self.device)

    def _capture_graphs(self) -> list:
        """Segments A and B captured (one graph without host-CPU groups, else two sharing one memory pool)."""
        pool = torch.cuda.graph_pool_handle()
        if not self.eager_keys:
            whole = torch.cuda.CUDAGraph()
            with torch.cuda.graph(whole, pool=pool):
                self._segment_a()
                self._segment_b()
            return [whole]
        a, b = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(a, pool=pool):
            self._segment_a()
        self._host_outs = {k: self.tr.groups[k].out_pinned for k in self.eager_keys}
        with torch.cuda.graph(b, pool=pool):
            self._segment_b()
        return [a, b]

    def train(self, steps: int, timer: StepTimer | None = None) -> None:
        """``steps`` steps: replays where captured, else the segments as plain calls."""
        for _ in range(steps):
            if timer:
                timer.start()
            self._one_step(replay=self.captured)
            if timer:
                timer.stop()

    def losses(self) -> list[float]:
        """The logged losses, oldest first (the last ``capacity`` steps)."""
        n = int(self.logged.item())
        log = self.loss_log.cpu().tolist()
        if n <= self.capacity:
            return log[:n]
        cut = n % self.capacity
        return log[cut:] + log[:cut]

    def record(self) -> dict:
        """What ran, for a run's result."""
        return {"captured": self.captured, "not_captured_why": self.not_captured_why,
                "graphs": len(self.graphs or []), "eager_host_groups": sorted(k.label for k in self.eager_keys),
                "static_pool_bytes": self.inputs.nbytes(), "steps": self.steps}

