"""The graph-safety contract, checked op by op: no host synchronisation, no output shape that depends on the data.

A CUDA graph replays fixed kernels on fixed buffers: an op that reads a device value on the host (``item``, a
tensor used as a Python bool or int), or whose output's shape depends on the values (``nonzero``, the ``unique``
family, ``masked_select``, boolean-mask indexing, ``repeat_interleave`` without its output size, ``bincount``),
cannot be captured, and on an eager GPU step it stalls the host until the device catches up. ``GraphSafe`` is a
dispatch mode that raises ``GraphUnsafe`` at the first such op, so a CPU test can hold the GPU path to the
contract (tests/test_static_step.py); ``unsafe_ops`` lists them instead of raising.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten ops (overload packets) whose output shape depends on the data, or that copy a device value to the host
UNSAFE = frozenset({
    "aten::_local_scalar_dense", "aten::nonzero", "aten::argwhere", "aten::unique", "aten::_unique",
    "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive", "aten::unique_dim_consecutive",
    "aten::masked_select", "aten::bincount",
})


class GraphUnsafe(RuntimeError):
    """An op that a CUDA graph cannot capture (or that synchronises the host), named with why."""


def _why(func, args, kwargs, host_values: frozenset = frozenset()) -> str | None:
    """Why ``func`` breaks the contract, or None. ``host_values``: data pointers of scalars that live on the host
    by design (reading them synchronises nothing)."""
    name = func._schema.name
    if name == "aten::_local_scalar_dense" and args and args[0].data_ptr() in host_values:
        return None
    if name in UNSAFE:
        return "its output shape depends on the data, or it reads a device value on the host"
    if name == "aten::repeat_interleave" and func._overloadname == "Tensor" and kwargs.get("output_size") is None:
        return "repeat_interleave without output_size sizes its output from the repeats' sum"
    if name == "aten::index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                      for i in (args[1] if len(args) > 1 else ())):
        return "indexing with a boolean mask sizes its output from the mask's count"
    return None


class GraphSafe(TorchDispatchMode):
    """Within ``with GraphSafe():`` every aten op is checked; ``strict`` (default) raises GraphUnsafe at the
    first breach, else the breaches are collected in ``found`` as (op name, why). ``host_values``: tensors that
    live on the host on a GPU run too (e.g. torch's Adagrad keeps its step counts there), whose reads are allowed
    (on a CPU run every tensor is on the host, so they must be named)."""

    def __init__(self, strict: bool = True, host_values=()):
        super().__init__()
        self.strict = strict
        self.host_values = frozenset(t.data_ptr() for t in host_values)
        self.found: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = _why(func, args, kwargs, self.host_values)
        if why is not None:
            if self.strict:
                raise GraphUnsafe(f"{func._schema.name}: {why}")
            self.found.append((func._schema.name, why))
        return func(*args, **kwargs)


def unsafe_ops(fn, *args, **kwargs) -> list[tuple[str, str]]:
    """The breaches of the contract that ``fn(*args, **kwargs)`` commits, in order (it runs once)."""
    with GraphSafe(strict=False) as mode:
        fn(*args, **kwargs)
    return mode.found
