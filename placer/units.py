"""Byte, bandwidth and time conversions in one place.

Conventions: sizes in bytes internally; GiB = 2**30 bytes (memory capacities), GB = 1e9 bytes
(bandwidths, as datasheets quote them); bandwidths internally in bytes/s; times in seconds.
"""
from __future__ import annotations

GiB = 2**30
MiB = 2**20
GB = 1e9

BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}


def gib_to_bytes(gib: float) -> float:
    """GiB (2**30) -> bytes."""
    return gib * GiB


def bytes_to_gib(n_bytes: float) -> float:
    """bytes -> GiB (2**30)."""
    return n_bytes / GiB


def gbps_to_bytes_per_s(gb_per_s: float) -> float:
    """GB/s (1e9 bytes/s, datasheet convention) -> bytes/s."""
    return gb_per_s * GB


def us_to_s(us: float) -> float:
    """microseconds -> seconds."""
    return us * 1e-6


def tflops_to_flops(tflops: float) -> float:
    """TFLOP/s -> FLOP/s."""
    return tflops * 1e12


def element_bytes(dtype: str) -> int:
    """Bytes per element of a storage dtype (fp32, fp16, bf16, int8)."""
    return BYTES_PER_ELEMENT[dtype]


def fmt_bytes(n_bytes: float) -> str:
    """Human string for a size, in GiB/MiB/KiB as fits."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes:,.0f} B"


def fmt_seconds(seconds: float) -> str:
    """Human string for a duration: s, ms or us as fits."""
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"
