"""The dense part of a step as ops: the runner's own dense model, traced.

The dense model (program/dense_model.py) runs forward, loss, backward (autograd) and the dense optimizer's
step on the meta device (shapes only, no data, milliseconds) under a dispatch mode that records every ATen op
it issues: exactly the ops the runner executes, in order, however the model is written. Each is then one of:

- gemm: mm / addmm / bmm / baddbmm, with its (batch, m, k, n) and operand layout (whether each operand is a
  transposed view, as the backward's are): priced by the device's GEMM rates by shape and layout;
- view: an op whose every output aliases an input without writing it (t, view, select, detach, ...): no data
  moves, it costs the dispatch (fixed cost of kind "view");
- elementwise: everything else (activations, their gradients, bias sums, the interaction's copies, the loss,
  the optimizer's multi-tensor updates): the bytes of its tensor inputs and outputs, read + written.

The trace is of one steady-state step (the optimizer's state is created by a first, unrecorded step). The
optimizer runs the runner's way for the device type: multi-tensor (foreach) on CUDA, per tensor on a CPU.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import lru_cache

from placer.executor import no_cyclic_gc

GEMM_OPS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default"}
#: ops that read or write elements at positions an index tensor gives (the dot interaction's triangle and its
#: backward): priced at the ``indexed`` rate
INDEXED_OPS = {"aten.index.Tensor", "aten.index_put.default", "aten.index_put_.default",
               "aten._index_put_impl_.default",
               "aten.gather.default", "aten.scatter.src", "aten.scatter_add.default", "aten.index_select.default",
               "aten.index_add.default", "aten.index_add_.default"}
IGNORED_PREFIX = ("profiler.",)
#: a dtype conversion: under autocast, each GEMM operand of another dtype (weights, biases, fp32 activations) in the
#: forward and each of their gradients back in the backward; the loss's ``logits.float()`` at bf16 / fp16
CAST_OP = "aten._to_copy.default"


OPTIMIZER_STATE_TENSORS = {"sgd": 0, "adagrad": 1, "rowwise_adagrad": 1, "adam": 2}  # per dense parameter


@dataclass(frozen=True)
class DenseOp:
    """One recorded ATen op: ``kind`` gemm | view | elementwise; ``shape`` (batch, m, k, n) for a GEMM;
    ``bytes`` of tensor data read and written for the others; ``access`` of an elementwise op: "stream"
    (every operand contiguous or broadcast), "strided" (an operand a non-contiguous view, e.g. a transposed
    gradient) or "indexed" (INDEXED_OPS)."""

    name: str
    kind: str
    shape: tuple[int, int, int, int] | None
    bytes: float
    out_bytes: float = 0.0  # bytes of its outputs (0 for a view)
    layout: str = "nn"  # a GEMM's operands: n = row-major as multiplied, t = a transposed view of one
    access: str = "stream"
    stage: str = "forward"  # forward (model and loss) | backward (autograd) | optimizer (zero_grad and step)


def _tensors(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)


def _nbytes(obj) -> float:
    return float(sum(t.numel() * t.element_size() for t in _tensors(obj)))


def _access(name: str, args, out) -> str:
    """How an elementwise op walks memory (see DenseOp.access): an operand whose last dimension is not
    contiguous (a transposed view: elements a stride apart, not rows of them; broadcast zero strides aside)
    makes it strided; slices of whole rows stream."""
    if name in INDEXED_OPS:
        return "indexed"
    for t in (*_tensors(args), *_tensors(out)):
        if t.dim() >= 2 and t.shape[-1] > 1 and t.stride()[-1] not in (0, 1):
            return "strided"
    return "stream"


def is_view(func) -> bool:
    returns = func._schema.returns
    if not returns:
        return False
    for r in returns:
        info = r.alias_info
        if info is None or info.is_write:
            return False
    return True


def _layout(t) -> str:
    """'t' when a matrix operand is a transposed view (its last two strides swapped), else 'n'."""
    st = t.stride()
    return "t" if st[-1] != 1 and st[-2] == 1 else "n"


def _gemm_layout(name: str, args) -> str:
    a, b = (args[0], args[1]) if name in ("aten.mm.default", "aten.bmm.default") else (args[1], args[2])
    return _layout(a) + _layout(b)


def _gemm_shape(name: str, args) -> tuple[int, int, int, int]:
    if name == "aten.mm.default":
        (m, k), n = args[0].shape, args[1].shape[1]
        return 1, m, k, n
    if name == "aten.addmm.default":
        (m, k), n = args[1].shape, args[2].shape[1]
        return 1, m, k, n
    a, b = (args[0], args[1]) if name == "aten.bmm.default" else (args[1], args[2])
    return a.shape[0], a.shape[1], a.shape[2], b.shape[2]


@dataclass(frozen=True)
class DenseTrace:
    """One dense step: its ops in order, the model's parameter count, the bytes of the forward's outputs, and the
    most bytes the step's own tensors held at once (``peak_bytes``: activations kept for the backward, their
    gradients, low-precision copies, the optimizer's temporaries; not the parameters, their gradients or state)."""

    ops: tuple[DenseOp, ...]
    params: int
    forward_bytes: float
    peak_bytes: float = 0.0

    def _weights_bytes(self, optimizer: str) -> float:
        return self.params * 4 * (2 + OPTIMIZER_STATE_TENSORS[optimizer])

    def memory_bytes(self, optimizer: str) -> float:
        """The bytes one step touches (the working set whose share the caches hold, OpCosts.warm): weights,
        gradients and optimizer state (fp32) plus the forward's outputs and their gradients."""
        return self._weights_bytes(optimizer) + 2 * self.forward_bytes

    def resident_bytes(self, optimizer: str) -> float:
        """The device memory the dense part needs during a step: weights, gradients and optimizer state (fp32) plus
        the step's peak of live tensors (``peak_bytes``). Under autocast the activations kept are the
        low-precision copies, so a bf16 step needs less than an fp32 one (production-856's dense part on 16,384
        samples: 3.2 GB of fp32 activations kept, 1.7 GB in bf16), where the sum of the forward's outputs, casts
        included, counted more (issue 47)."""
        return self._weights_bytes(optimizer) + self.peak_bytes


def trace(workload, samples: int, device_type: str) -> DenseTrace:
    """The dense step (forward, BCE loss, backward, optimizer step) of ``workload`` on ``samples`` samples, as
    the runner issues it on a ``device_type`` ("cuda" or "cpu") device."""
    # keyed on the workload less its tables' access skew, which the dense step never reads: a plan's skew what-ifs
    # (placer/skew.py: the same workload at skew x0.8 and x1.2) reuse the trace instead of tracing it twice more
    # (1.5 s each on production-856 @ dgx-h100, after the solve and within its --time-limit; issue 36)
    return _cached_trace(_key(workload), int(samples), device_type)


def _key(workload) -> str:
    # a workload without a dense_optimizer keys as it did before that field existed (traces already cached stay)
    unset = {"dense_optimizer": True} if workload.dense_optimizer is None else {}
    return workload.model_dump_json(exclude={"tables": {"__all__": {"access"}}, "constraints": True, **unset})


def is_traced(workload, samples: int, device_type: str) -> bool:
    """Whether ``trace`` of these is at hand without tracing: made in this process, or in the command's disk
    cache (program/trace_cache.py)."""
    from placer.program import trace_cache

    key = (_key(workload), int(samples), device_type)
    return key in _made or trace_cache.exists(trace_cache.key(*key))


_made: set[tuple[str, int, str]] = set()  # the (workload, samples, device type) traced or read in this process


@lru_cache(maxsize=64)
def _cached_trace(workload_json: str, samples: int, device_type: str) -> DenseTrace:
    """The trace from the command's disk cache (program/trace_cache.py), else made (and stored there)."""
    from placer.program import trace_cache

    name = trace_cache.key(workload_json, samples, device_type)
    _made.add((workload_json, samples, device_type))
    stored = trace_cache.load(name)
    if stored is not None:
        try:
            return _from_json(stored)
        except (KeyError, TypeError, ValueError):
            pass  # another layout: traced again below, and stored anew
    with no_cyclic_gc():  # the first one imports torch: five collections of a growing heap, 0.6 s (placer/executor.py)
        made = _trace(workload_json, samples, device_type)
    trace_cache.save(name, _to_json(made))
    return made


def _to_json(t: DenseTrace) -> dict:
    return {"params": t.params, "forward_bytes": t.forward_bytes, "peak_bytes": t.peak_bytes,
            "ops": [[op.name, op.kind, op.shape, op.bytes, op.out_bytes, op.layout, op.access, op.stage]
                    for op in t.ops]}


def _from_json(d: dict) -> DenseTrace:
    ops = tuple(DenseOp(name, kind, None if shape is None else tuple(int(v) for v in shape), float(moved),
                        float(out), layout, access, stage)
                for name, kind, shape, moved, out, layout, access, stage in d["ops"])
    return DenseTrace(ops, int(d["params"]), float(d["forward_bytes"]), float(d["peak_bytes"]))


def dense_step_s(issue_s: float, work_s: float, asynchronous: bool) -> float:
    """A dense step's seconds from the host's issuing of its ops (fixed costs and dense_op) and their work
    (FLOPs and bytes): a CPU does both, one after the other (the sum); a GPU runs the work while the host issues
    the next ops, so the step lasts as long as the longer of the two (the first GPU campaign: the
    host issued for 98% of every dense step measured, its kernels ran 10-60% of it)."""
    return max(issue_s, work_s) if asynchronous else issue_s + work_s


def autocast_emulation(dtype):
    """A torch-function mode that does what CUDA's autocast does to the dense model's GEMMs on the meta device
    (where autocast does nothing): each floating operand of another dtype cast to ``dtype`` first, above autograd,
    so the trace records the casts in the forward and their gradients' casts in the backward, and the GEMMs and
    what follows them in ``dtype``. On an H100 (validation/results/gpu-2026-11-27-run2/profile.json) bf16
    autocast issued 1.2-2.3x the fp32 trace's ATen ops per stage, at about the same host time per op."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    gemms = {F.linear, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, torch.matmul, torch.Tensor.matmul,
             torch.Tensor.__matmul__, torch.Tensor.mm, torch.Tensor.bmm}

    def cast(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype:
            return x.to(dtype)
        return x

    class Emulation(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in gemms:
                args = tuple(cast(a) for a in args)
                kwargs = {k: cast(v) for k, v in kwargs.items()}
            return func(*args, **kwargs)

    return Emulation()


class LiveBytes:
    """The bytes of the tensors a traced step creates that are alive at once, read after every op (meta tensors
    are storages without data, freed when the last reference goes, as on a device). Storages that existed before
    the step (parameters, optimizer state, inputs) are not counted; ``peak(excluded)`` leaves out those named
    (the gradients of the parameters and of the pooled inputs, which other terms count)."""

    def __init__(self, before):
        from torch.multiprocessing.reductions import StorageWeakRef

        self._ref = StorageWeakRef
        self._before = {t.untyped_storage()._cdata for t in before}
        self._live: dict[int, tuple[int, object]] = {}  # storage address -> (serial, weak ref)
        self._lives: list[list] = []  # per serial: [bytes, the op it was made by, the op after which it was gone]
        self._op = 0

    def saw(self, out) -> None:
        """After an op: its new output storages born, the storages gone since the last op dead."""
        self._op += 1
        gone = [key for key, (_, ref) in self._live.items() if ref.expired()]
        for key in gone:
            self._lives[self._live.pop(key)[0]][2] = self._op
        for t in _tensors(out):
            st = t.untyped_storage()
            key = st._cdata
            if key in self._before or key in self._live:
                continue
            self._live[key] = (len(self._lives), self._ref(st))
            self._lives.append([float(st.nbytes()), self._op, None])

    def serials(self, tensors) -> set[int]:
        """The serials of ``tensors``' storages, where the step created them."""
        out = set()
        for t in tensors:
            kept = self._live.get(t.untyped_storage()._cdata)
            if kept is not None and not kept[1].expired():
                out.add(kept[0])
        return out

    def peak(self, excluded: set[int]) -> float:
        """The most bytes alive at once after any op, ``excluded`` serials left out."""
        change = [0.0] * (self._op + 2)
        for serial, (n, born, died) in enumerate(self._lives):
            if serial not in excluded:
                change[born] += n
                change[self._op + 1 if died is None else died] -= n
        total = best = 0.0
        for c in change:
            total += c
            best = max(best, total)
        return best


def _trace(workload_json: str, samples: int, device_type: str) -> DenseTrace:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from placer.program.dense_model import DenseDLRM, make_dense_optimizer
    from placer.specs.workload import Workload

    wl = Workload.model_validate_json(workload_json)
    dims = {t.name: t.dim for t in wl.tables}
    ops: list[DenseOp] = []
    stage = ["forward"]  # the part of the step being recorded (DenseOp.stage)

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            live.saw(out)
            name = str(func)
            if name.startswith(IGNORED_PREFIX):
                return out
            if is_view(func):
                ops.append(DenseOp(name, "view", None, 0.0, stage=stage[0]))
            elif name in GEMM_OPS:
                ops.append(DenseOp(name, "gemm", _gemm_shape(name, args), 0.0, _nbytes(out),
                                   _gemm_layout(name, args), stage=stage[0]))
            else:
                written = _nbytes(out)
                inputs = (args, list((kwargs or {}).values()))
                moved = _nbytes(inputs) + written
                ops.append(DenseOp(name, "elementwise", None, moved, written, access=_access(name, inputs, out),
                                   stage=stage[0]))
            return out

    with torch.device("meta"):
        model = DenseDLRM(wl)
        dense = torch.zeros(samples, wl.dense.num_dense_features)
        labels = torch.zeros(samples)
        pooled = [torch.zeros(samples, dims[f.table]) for f in wl.resolved_features]
    # built outside the meta context: the optimizer's step counters stay on the CPU, as they are in the runner
    spec = wl.resolved_dense_optimizer
    opt = make_dense_optimizer(model, spec.name, spec.lr, foreach=device_type == "cuda")
    loss_fn = torch.nn.BCEWithLogitsLoss()

    forward_ops = []

    def leaves():  # fresh every step, as the runner hands them over (made in the forward exchange, not here)
        return [p.detach().requires_grad_(True) for p in pooled]

    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(wl.dense.dtype)
    # the runner's autocast (runner/trainer.py dense_autocast) around the model's forward, on CUDA
    autocast = autocast_emulation(low) if (low is not None and device_type == "cuda") else contextlib.nullcontext()

    def step(embeddings):
        stage[0] = "forward"
        with autocast:
            logits = model(dense, embeddings)
        loss = loss_fn(logits.float(), labels)
        forward_ops[:] = list(ops)
        stage[0] = "optimizer"
        opt.zero_grad(set_to_none=True)
        stage[0] = "backward"
        loss.backward()
        stage[0] = "optimizer"
        opt.step()

    step(leaves())  # creates the optimizer's state
    ops.clear()
    embeddings = leaves()
    state = [t for per in opt.state.values() for t in per.values() if isinstance(t, torch.Tensor)]
    live = LiveBytes([*model.parameters(), *state, dense, labels, *embeddings, *pooled])
    with Recorder():
        step(embeddings)
    forward = sum(op.out_bytes for op in forward_ops)
    grads = live.serials(t.grad for t in (*model.parameters(), *embeddings) if t.grad is not None)
    return DenseTrace(tuple(ops), sum(p.numel() for p in model.parameters()), forward, live.peak(grads))
