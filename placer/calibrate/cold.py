"""Cold operands for ``placer calibrate``: a pool of memory that timed ops take their operands from, so that no
repeat finds its operands in a cache the previous repeat warmed.

In the real step a big tensor comes cold: between two uses of a weight or an activation the step touches far
more than the last-level cache holds. A benchmark that multiplies or copies the SAME tensors every repeat
finds them in that cache (a cloud VM may report a 480 MiB L3) and measures a rate the step never sees
(a fidelity campaign found GEMMs and copies 1.1-2.2x slower in the step than calibrated).
So every timed op whose operands could stay cache-resident across repeats (GEMMs, pack_grad copies, the
replica's scatter and dense updates, segment reductions) takes them from a ``ColdPool``:

- one buffer of at least 2 x the last-level cache (sysfs on a CPU; 4 x the GPU's L2 on CUDA; 32 MiB where the
  CPU reports none), grown to 2 x the largest operand set, capped at ``Sizes.pool_cap_bytes`` (2 GiB; 256
  MiB with --quick) and at an eighth of the free memory: the comments say so where the cap binds;
- carved into operand sets by a cursor that only moves forward and wraps at the end: consecutive repeats,
  and consecutive benchmarks, never touch the same memory, and a set comes round again only after the rest
  of the pool has been touched (more than the cache holds, unless capped);
- filled once with the byte 0x3C, which every dtype reads as a small positive normal number (fp32 and bf16
  0.0115, fp16 1.06): no denormals, no NaN, a square root of any state is defined.

Only ``gather_cached`` stays warm on purpose: its formula prices rows read again within the step.
Sizes are bytes.
"""
from __future__ import annotations

import math

import torch

from placer.calibrate.timing import CACHE_MULTIPLE, last_level_cache_bytes, meminfo
from placer.units import GiB, MiB

ALIGN = 64  # bytes: each operand starts on a cache line
FILL_BYTE = 0x3C
LLC_FALLBACK = 32 * MiB  # a CPU whose sysfs reports no cache size

GPU_L2_FALLBACK = 64 * MiB


def _mib(n: float) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB"


def cache_bytes(device: torch.device) -> tuple[int, str]:
    """(bytes, where the number comes from) of the last-level cache in front of ``device``'s memory."""
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        return (l2, "the GPU's L2") if l2 else (GPU_L2_FALLBACK, "assumed: the GPU reports no L2 size")
    llc = last_level_cache_bytes()
    return (llc, "the CPU's last-level cache (sysfs)") if llc else (LLC_FALLBACK, "assumed: sysfs reports none")


def _free_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    return meminfo("MemAvailable") or 8 * GiB


def operand_bytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    """Bytes an operand takes in the pool (rounded up to ALIGN)."""
    n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    return -(-n // ALIGN) * ALIGN


class ColdPool:
    """The operand pool of one device (see the module docstring). ``cap``: the most bytes it may hold."""

    def __init__(self, device: torch.device, cap: int):
        self.device = device
        self.llc, self.llc_source = cache_bytes(device)
        self.multiple = CACHE_MULTIPLE.get(device.type, 2)
        self.cap = int(min(cap, _free_bytes(device) / 8))
        self.buf: torch.Tensor | None = None
        self.size = 0
        self.cursor = 0
        self._grow(self.multiple * self.llc)

    def _grow(self, nbytes: int) -> None:
        nbytes = -(-int(min(nbytes, self.cap)) // ALIGN) * ALIGN
        if nbytes <= self.size:
            return
        self.buf = None  # the old pool freed before the new one is made
        self.buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device).fill_(FILL_BYTE)
        self.size, self.cursor = nbytes, 0

    def release(self) -> None:
        self.buf, self.size, self.cursor = None, 0, 0

    @property
    def capped(self) -> bool:
        return self.size < self.multiple * self.llc

    def describe(self) -> str:
        """The rotation, for the spec's header: the pool against the cache, and whether the cap bound."""
        text = (f"cold operands (GEMMs, copies, segment reductions, a replica's scatter and dense updates): each "
                f"repeat takes a fresh stretch of a {_mib(self.size)} {self.device.type} pool, filled once")
        if self.capped:
            return text + (f"; capped at {_mib(self.size)} ({_mib(self.cap)} allowed: 2 GiB, 256 MiB with --quick, "
                           f"at most 1/8 of free memory), less than {self.multiple} x the {_mib(self.llc)} cache "
                           f"({self.llc_source}): a set may come round still cached")
        return text + f", >= {self.multiple} x the {_mib(self.llc)} cache ({self.llc_source})"

    def note(self, set_bytes: int) -> str:
        """A comment's word on the rotation of one benchmark whose operand set is ``set_bytes``."""
        if set_bytes > self.size / 2:
            return f"one {_mib(set_bytes)} operand set: consecutive repeats reuse it (two exceed the pool's cap)"
        capped = f" (pool capped below {self.multiple} x the cache)" if self.capped else ""
        return "cold operands, a fresh set per repeat" + capped

    def take(self, nbytes: int) -> int:
        """Offset of the next ``nbytes`` of the pool (the cursor moves past them; wraps at the end)."""
        nbytes = -(-nbytes // ALIGN) * ALIGN
        if self.buf is None or nbytes > self.size:
            self._grow(max(nbytes, self.multiple * self.llc))
            if nbytes > self.size:  # beyond the cap: one set, only as large as it must be
                self.buf = None
                self.buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device).fill_(FILL_BYTE)
                self.size, self.cursor = nbytes, 0
        if self.cursor + nbytes > self.size:
            self.cursor = 0
        off = self.cursor
        self.cursor += nbytes
        return off

    def view(self, offset: int, dtype: torch.dtype, shape: tuple[int, ...], transposed: bool = False) -> torch.Tensor:
        """The operand of ``shape`` at ``offset``; ``transposed``: a view with the last two dimensions swapped
        of a row-major (..., shape[-1], shape[-2]) tensor (as the backward multiplies them)."""
        n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        flat = self.buf[offset:offset + n].view(dtype)
        if transposed and len(shape) >= 2:
            stored = (*shape[:-2], shape[-1], shape[-2])
            return flat.view(stored).transpose(-1, -2)
        return flat.view(shape)

    def sets(self, operands: list[tuple[torch.dtype, tuple[int, ...], bool]], count: int) -> list[list[torch.Tensor]]:
        """``count`` operand sets, each a list of views (dtype, shape, transposed) as given, in consecutive
        stretches of the pool. The pool first grows to hold two sets where the cap allows."""
        set_bytes = self.set_bytes(operands)
        if 2 * set_bytes > self.size:
            self._grow(2 * set_bytes)
        out = []
        for _ in range(count):
            off = self.take(set_bytes)
            views = []
            for dtype, shape, transposed in operands:
                views.append(self.view(off, dtype, shape, transposed))
                off += operand_bytes(dtype, shape)
            out.append(views)
        return out

    @staticmethod
    def set_bytes(operands) -> int:
        return sum(operand_bytes(dtype, shape) for dtype, shape, _ in operands)
