"""Calibration that repeats: K passes of every benchmark, combined into one spec with each number's spread.

One pass of ``placer calibrate`` times each op once (the median of its repeats, timing.py). On a shared machine a
slow stretch lasts seconds to minutes, so one pass can price a whole family of ops 20-30% off (two one-pass
calibrations of one quiet 2-core machine, minutes apart, priced the same plans 1.42-1.48 ms and 1.13-1.19 ms).
``placer calibrate --passes K`` runs the whole sequence K times, one pass after the other, so that every op is
timed in each pass (interleaved: A B C .. A B C, never A A A), and ``combine`` keeps per spec number the median
of its K values: one disturbed pass (an outlier) of three changes nothing. Each number's comment says how many
passes it took and their spread ((max - min) / median), and the spec's header the spread over all numbers and the
widest ones. The samples (timed ops) are the medians of their K times; where several samples define one number
(a fit), the median of the fits is not the fit of the medians, so combined samples are marked inexact.
"""
from __future__ import annotations

import statistics
from dataclasses import fields

from placer.calibrate.record import Calibration, Entry, Measurement, OpCostEntries

#: spreads above this are named in the spec's header (one in ten: a number that moved that much between passes)
WIDE_SPREAD = 0.10
#: how many of the widest spreads the header names
WIDEST_NAMED = 5


def spread(values: list[float]) -> float:
    """(max - min) / median of ``values``, 0 for one value or a zero median."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / abs(mid) if len(values) > 1 and mid else 0.0


def _leaves(obj, path: str = ""):
    """(path, Entry or Measurement) for every number under ``obj`` (nested dicts of them)."""
    if isinstance(obj, (Entry, Measurement)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k))


def _numbers(cal: Calibration) -> dict[str, Entry | Measurement]:
    """Every number of one pass by its path: op costs of the device (and host), the scalar fields, the peaks."""
    out = {}
    for side, costs in (("device", cal.device_costs), ("host", cal.host_costs)):
        if costs is None:
            continue
        for f in fields(OpCostEntries):
            out.update({f"{side}.{p}": e for p, e in _leaves(getattr(costs, f.name), f.name)})
    out.update({f"values.{p}": m for p, m in _leaves(cal.values)})
    out.update({f"peaks.{p}": m for p, m in _leaves(cal.peaks)})
    return out


def combine(passes: list[Calibration]) -> Calibration:
    """One Calibration from ``passes`` of the same benchmarks (module docstring): the first pass's numbers set to
    the median over the passes that measured them, their comments extended with the passes and the spread; its
    samples' times the medians of theirs; the header notes the spreads. One pass is returned as it is."""
    first = passes[0]
    if len(passes) == 1:
        return first
    others = [_numbers(c) for c in passes[1:]]
    spreads = []
    for path, item in _numbers(first).items():
        vals = [item.value] + [o[path].value for o in others if path in o]
        item.value = statistics.median(vals)
        s = spread(vals)
        spreads.append((s, path))
        item.how = f"{item.how}; median of {len(vals)} passes (spread {s:.1%}: {min(vals):.5g}-{max(vals):.5g})"
    same = all(len(c.samples) == len(first.samples) and all(a.what == b.what for a, b in zip(c.samples, first.samples))
               for c in passes[1:])
    if same:
        for i, sample in enumerate(first.samples):
            sample.seconds = statistics.median(c.samples[i].seconds for c in passes)
            sample.exact = sample.exact and not sample.defines
    else:
        first.notes.append("the passes timed different samples: the samples are the first pass's")
    first.wall_s = sum(c.wall_s for c in passes)
    first.notes.append(spread_note(spreads, len(passes)))
    first.notes += [n for c in passes[1:] for n in c.notes if n.startswith("WARNING") and n not in first.notes]
    return first


def spread_note(spreads: list[tuple[float, str]], k: int) -> str:
    """The header line: how far the passes agreed."""
    if not spreads:
        return f"{k} passes: no numbers to compare"
    values = sorted(s for s, _ in spreads)
    wide = sorted(spreads, reverse=True)[:WIDEST_NAMED]
    named = ", ".join(f"{p} {s:.0%}" for s, p in wide if s > WIDE_SPREAD)
    return (f"{k} passes, every number the median of its passes: spread between passes median "
            f"{statistics.median(values):.1%}, 90th percentile {values[int(0.9 * (len(values) - 1))]:.1%}, "
            f"{sum(s > WIDE_SPREAD for s in values)} of {len(values)} numbers over {WIDE_SPREAD:.0%}"
            + (f" (widest: {named})" if named else ""))
