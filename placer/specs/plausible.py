"""Realistic ranges for hardware numbers (``limits.py`` holds what is refused outright). A value outside its
range that a unit mistake explains (hbm_GiB 143771 is 140 GiB written in MiB; a NIC at 400 "GB/s" is 50 GB/s
written in Gb/s; HBM at 4.8 "GB/s" is 4,800 GB/s written in TB/s) is an error naming the file, the field and
the value it most likely meant, unless the user says it is meant (--allow-implausible); any other value
outside its range is a ``SpecWarning``.

Ranges are per kind of part, wide enough for every datasheet through 2026 (units in the field names).
Templates whose "GPUs" are CPU processes (``unified_memory``) skip the HBM ranges: their "HBM" is DRAM.
"""
from __future__ import annotations

import sys
import warnings
from typing import Iterator, NamedTuple

from placer.specs.kinds import LINK_KINDS
from placer.specs.ranges import (DRAM_BW_GBps, DRAM_GiB, HBM_BW_GBps, HBM_GiB, LATENCY_us, NIC_BW_GBps, PEAK_TFLOPs,
                                 Range)


class SpecWarning(UserWarning):
    """A spec value placer accepts but that is outside the realistic range for its kind of part."""


class Finding(NamedTuple):
    """A value outside its realistic range: the field path, the message, and whether it is a likely unit
    mistake (an error unless allowed) rather than only unusual (a warning)."""

    field: str
    message: str
    mistake: bool
    fix: str = ""  # for a mistake: "write 40, or pass --allow-implausible if 40,960 GiB is meant"


def _outside(value: float, r: Range, field: str) -> Iterator[Finding]:
    if r.low <= value <= r.high:
        return
    side = "above" if value > r.high else "below"
    head = f"{value:,g} {r.unit} is {side} the realistic range [{r.low:,g}, {r.high:,g}] {r.unit}"
    for unit, factor in (r.above if side == "above" else r.below):
        meant = value * factor
        if r.real[0] <= meant <= r.real[1]:
            yield Finding(field, f"{head}: it looks like {unit} ({value:,g} {unit} is {meant:,.4g} {r.unit})", True,
                          f"write {meant:.4g}, or pass --allow-implausible if {value:,g} {r.unit} is meant")
            return
    yield Finding(field, f"{head} (no unit mistake explains it; check the value)", False)


def implausible_values(spec) -> list[Finding]:
    """Every value of a HardwareSpec outside its realistic range, each marked a likely unit mistake or not."""
    out: list[Finding] = []
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
            out += _outside(link.bw_GBps, LINK_KINDS[link.kind].bw_GBps, f"{at}.links[{i}].bw_GBps")
            out += _outside(link.latency_us, LATENCY_us, f"{at}.links[{i}].latency_us")
    if spec.fabric is not None:
        out += _outside(spec.fabric.latency_us, LATENCY_us, "fabric.latency_us")
    return out


def check_plausible(spec, file: str | None, allow_implausible: bool = False) -> list[Finding]:
    """Refuse likely unit mistakes (SpecError naming the file and every such field, exit 2) unless
    ``allow_implausible``; issue one SpecWarning per other value outside its range ("file: field: message"),
    and per mistake when allowed. Returns the findings."""
    found = implausible_values(spec)
    mistakes = [f for f in found if f.mistake]
    if mistakes and not allow_implausible:
        from placer.errors import SpecError

        if len(mistakes) == 1:
            m = mistakes[0]
            raise SpecError(f"likely a unit mistake: {m.message}; {m.fix}", file=file, field=m.field)
        raise SpecError("likely unit mistakes (pass --allow-implausible if the values are meant):\n  "
                        + "\n  ".join(f"{f.field}: {f.message}" for f in mistakes), file=file)
    for f in found:
        warnings.warn(f"{file + ': ' if file else ''}{f.field}: {f.message}", SpecWarning, stacklevel=3)
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
