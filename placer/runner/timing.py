"""Timers. Step times: CUDA events on a GPU (no synchronization inside the timed steps), perf_counter on the
CPU. Phase times: a separate instrumented pass that synchronizes the device at every phase boundary."""
from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepTimer:
    """Per-step wall times. ``start()``/``stop()`` around each step; ``times_s()`` after the last one."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self._events: list[tuple] = []
        self._times: list[float] = []
        self._t0 = 0.0

    def start(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events.append((ev, None))
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._events[-1] = (self._events[-1][0], ev)
        else:
            self._times.append(time.perf_counter() - self._t0)

    def times_s(self) -> list[float]:
        if self.cuda:
            synchronize(self.device)
            return [a.elapsed_time(b) / 1e3 for a, b in self._events]
        return list(self._times)


class PhaseTimer:
    """Wall time per phase name and step; synchronizes the device before reading the clock. ``per_step`` gives
    each phase's median over the steps (robust to a step disturbed by other work on the machine)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.totals: dict[str, float] = defaultdict(float)
        self.by_step: list[dict[str, float]] = []
        self._t = 0.0
        self.steps = 0

    def begin(self) -> None:
        synchronize(self.device)
        self.by_step.append(defaultdict(float))
        self._t = time.perf_counter()

    def mark(self, phase: str) -> None:
        """Charge the time since the last mark (or begin) to ``phase``."""
        synchronize(self.device)
        now = time.perf_counter()
        self.totals[phase] += now - self._t
        if self.by_step:
            self.by_step[-1][phase] += now - self._t
        self._t = now

    def per_step(self) -> dict[str, float]:
        phases = {k for step in self.by_step for k in step}
        return {k: statistics.median(step.get(k, 0.0) for step in self.by_step) for k in phases}


class OpTimer:
    """Seconds per (op kind, stream) over instrumented steps: every op synchronized before and after, so each
    is its own time (the keys are the step program's, placer/program/ops.py). ``off()`` runs ops untimed."""

    def __init__(self, device: torch.device | None, active: bool = True):
        self.device = device
        self.active = active
        self.totals: dict[tuple[str, str], float] = defaultdict(float)
        self.counts: dict[tuple[str, str], int] = defaultdict(int)
        self.steps = 0

    @classmethod
    def off(cls) -> "OpTimer":
        return _OFF

    def run(self, kind: str, stream: str, fn):
        if not self.active:
            return fn()
        synchronize(self.device)
        t0 = time.perf_counter()
        out = fn()
        synchronize(self.device)
        self.totals[(kind, stream)] += time.perf_counter() - t0
        self.counts[(kind, stream)] += 1
        return out

    def per_step(self) -> dict[tuple[str, str], float]:
        """Mean seconds per step of each (kind, stream)."""
        return {k: v / max(self.steps, 1) for k, v in self.totals.items()}


_OFF = OpTimer(None, active=False)


def step_measurements(batch_size: int, step_s: float, stats: dict, phases_s: dict[str, float]) -> dict:
    """The opening of a run's ``measured`` block: step time and throughput (samples/s), the step-time
    statistics (``summarize``) and the phases' times with their sum, seconds."""
    return {"step_time_s": step_s,
            "throughput_samples_per_s": batch_size / step_s if step_s > 0 else float("inf"),
            "step_time_stats_s": stats, "phases_s": phases_s, "phases_sum_s": sum(phases_s.values())}


def summarize(times: list[float]) -> dict[str, float]:
    """median (the reported step time), mean, min, max, p90 and count of per-step times, seconds."""
    if not times:
        return {"median": float("nan"), "mean": float("nan"), "min": float("nan"), "max": float("nan"),
                "p90": float("nan"), "count": 0}
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median": statistics.median(ordered), "mean": statistics.fmean(ordered), "min": ordered[0],
            "max": ordered[-1], "p90": p90, "count": len(ordered)}
