"""Realistic ranges for hardware numbers: a value outside one is accepted (``limits.py`` holds what is refused)
but reported as a ``SpecWarning`` naming the file, the field and the unit mistake it most likely is
(hbm_GiB 143771 looks like MiB; a NIC at 400 GB/s looks like Gb/s; HBM at 4.8 GB/s looks like TB/s).

Ranges are per kind of part, wide enough for every datasheet through 2026 (units in the field names).
Templates whose "GPUs" are CPU processes (``unified_memory``) skip the HBM ranges: their "HBM" is DRAM.
"""
from __future__ import annotations

import sys
import warnings
from typing import Iterator


class SpecWarning(UserWarning):
    """A spec value placer accepts but that is outside the realistic range for its kind of part."""


#: (lowest, highest) realistic value, and the likely mistake below / above it
HBM_GiB = (1.0, 1024.0, "looks like TiB", "looks like MiB (143,771 MiB is 140 GiB)")
HBM_BW_GBps = (10.0, 50_000.0, "looks like TB/s (4.8 TB/s is 4,800 GB/s)", "looks like MB/s")
DRAM_GiB = (0.5, 65_536.0, "looks like TiB", "looks like MiB")
DRAM_BW_GBps = (0.5, 20_000.0, "looks like TB/s", "looks like MB/s")
NIC_BW_GBps = (0.01, 200.0, "looks like bits or MB/s", "looks like Gb/s (400 Gb/s is 50 GB/s)")
LINK_BW_GBps = {  # per link kind
    "nvlink": (1.0, 2_000.0, "looks like TB/s", "looks like Gb/s or MB/s"),
    "pcie": (0.05, 256.0, "looks like TB/s", "looks like Gb/s (PCIe Gen5 x16 is 64 GB/s, 512 Gb/s)"),
    "network": (0.01, 200.0, "looks like bits or MB/s", "looks like Gb/s (400 Gb/s is 50 GB/s)"),
}
PEAK_TFLOPs = (1e-3, 20_000.0, "looks like PFLOP/s", "looks like GFLOP/s")
LATENCY_us = (0.0, 10_000.0, "", "looks like ns (10,000 us is 10 ms)")


def _outside(value: float, limits, field: str) -> Iterator[tuple[str, str]]:
    low, high, below, above = limits
    if value < low and below:
        yield field, f"{value:g} is below the realistic range [{low:g}, {high:g}]: {below}"
    elif value > high and above:
        yield field, f"{value:g} is above the realistic range [{low:g}, {high:g}]: {above}"


def hardware_warnings(spec) -> list[tuple[str, str]]:
    """(field path, message) for every value of a HardwareSpec outside its realistic range."""
    out: list[tuple[str, str]] = []
    for name, t in spec.templates.items():
        at = f"templates.{name}"
        g, h = t.gpus, t.host
        if not t.unified_memory:
            out += _outside(g.hbm_GiB, HBM_GiB, f"{at}.gpus.hbm_GiB")
            out += _outside(g.hbm_bw_GBps, HBM_BW_GBps, f"{at}.gpus.hbm_bw_GBps")
        for dtype, peak in g.peak_TFLOPs.items():
            out += _outside(peak, PEAK_TFLOPs, f"{at}.gpus.peak_TFLOPs.{dtype}")
        out += _outside(g.kernel_launch_us, LATENCY_us, f"{at}.gpus.kernel_launch_us")
        out += _outside(h.dram_GiB, DRAM_GiB, f"{at}.host.dram_GiB")
        out += _outside(h.dram_bw_GBps, DRAM_BW_GBps, f"{at}.host.dram_bw_GBps")
        out += _outside(h.cpu_peak_TFLOPs, PEAK_TFLOPs, f"{at}.host.cpu_peak_TFLOPs")
        if t.nics:
            out += _outside(t.nics.bw_GBps, NIC_BW_GBps, f"{at}.nics.bw_GBps")
            out += _outside(t.nics.latency_us, LATENCY_us, f"{at}.nics.latency_us")
        for i, link in enumerate(t.links):
            out += _outside(link.bw_GBps, LINK_BW_GBps[link.kind], f"{at}.links[{i}].bw_GBps")
            out += _outside(link.latency_us, LATENCY_us, f"{at}.links[{i}].latency_us")
    if spec.fabric is not None:
        out += _outside(spec.fabric.latency_us, LATENCY_us, "fabric.latency_us")
    return out


def warn_implausible(spec, file: str | None) -> list[tuple[str, str]]:
    """Issue one SpecWarning per value outside its realistic range ("file: field: message"); returns them."""
    found = hardware_warnings(spec)
    for field, message in found:
        warnings.warn(f"{file + ': ' if file else ''}{field}: {message}", SpecWarning, stacklevel=3)
    return found


def print_spec_warnings_plainly() -> None:
    """Show every SpecWarning as one ``warning: <file>: <field>: <message>`` line on stderr, without Python's
    source-line decoration; other warnings are shown as before. For the CLI to call once at start-up."""
    previous = warnings.showwarning
    if getattr(previous, "_placer_plain", False):
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SpecWarning):
            print(f"warning: {message}", file=file or sys.stderr)
        else:
            previous(message, category, filename, lineno, file, line)

    show._placer_plain = True
    warnings.showwarning = show
