"""Realistic ranges of hardware numbers, per kind of part (plausible.py checks a spec against them; kinds.py gives
each link kind its own). Units in the names; the span real devices through 2026 have is each range's ``real``."""
from __future__ import annotations

from typing import NamedTuple


#: A field's realistic range, the span real devices through 2026 have (narrower), and the units a value is
#: most likely written in by mistake when it lies above / below the range: (unit, factor to the field's unit).
#: A value outside the range is a *likely unit mistake* when one of those units turns it into a value inside
#: the span of real devices (40,960 "GiB" of HBM: as MiB it is 40 GiB); that is an error unless the user says
#: the value is meant (load_hardware(allow_implausible=True), --allow-implausible). Any other value outside
#: the range (a deliberately tiny test machine, an exotic one) is a SpecWarning only.
class Range(NamedTuple):
    low: float
    high: float
    real: tuple[float, float]
    unit: str
    above: tuple[tuple[str, float], ...] = ()
    below: tuple[tuple[str, float], ...] = ()


MIB = (("MiB", 1 / 1024),)
TIB = (("TiB", 1024.0),)
MBPS = (("MB/s", 1e-3),)
TBPS = (("TB/s", 1e3),)
GBITS = (("Gb/s", 1 / 8), ("MB/s", 1e-3))
HBM_GiB = Range(1.0, 1024.0, (8.0, 288.0), "GiB", MIB, TIB)
HBM_BW_GBps = Range(10.0, 50_000.0, (100.0, 10_000.0), "GB/s", MBPS, TBPS)
DRAM_GiB = Range(0.5, 65_536.0, (8.0, 32_768.0), "GiB", MIB, TIB)
DRAM_BW_GBps = Range(0.5, 20_000.0, (5.0, 2_000.0), "GB/s", MBPS, TBPS)
NIC_BW_GBps = Range(0.01, 200.0, (1.0, 100.0), "GB/s", GBITS)
PEAK_TFLOPs = Range(1e-3, 20_000.0, (0.05, 10_000.0), "TFLOP/s", (("GFLOP/s", 1e-3),), (("PFLOP/s", 1e3),))
LATENCY_us = Range(0.0, 10_000.0, (0.1, 1_000.0), "us", (("ns", 1e-3),))
