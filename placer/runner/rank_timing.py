"""Timers of a distributed run's instrumented passes (runner/timing.py's, with every rank in step).

- ``RankPhaseTimer``: at every phase boundary the device is synchronized and all ranks wait at a barrier (on
  a gloo group), which is charged to no phase; the exchange's own barrier (ExchangeRecorder) is left out too.
- ``RankOpTimer``: every op synchronized before and after (OpTimer); before a collective op (all_to_all,
  all_reduce) all ranks also meet at a barrier, so that the op's time is its work and transfer, not a rank
  waiting for the others to arrive. Every rank runs the same collectives in the same order, so the barriers
  pair up (the other ops differ from rank to rank: each runs its own groups).

Seconds throughout (perf_counter).
"""
from __future__ import annotations

import time
from collections import defaultdict

import torch

from placer.runner import waiting
from placer.runner.exchange import ExchangeRecorder
from placer.runner.timing import OpTimer, PhaseTimer, synchronize

#: op kinds that are collectives (every rank runs them, in the same order)
COLLECTIVE_KINDS = ("all_to_all", "all_reduce")


class RankPhaseTimer(PhaseTimer):
    """PhaseTimer whose boundaries also wait for every rank (a barrier, not charged to any phase)."""

    def __init__(self, device: torch.device, group, recorder: ExchangeRecorder | None = None):
        super().__init__(device)
        self.group = group
        self.recorder = recorder

    def begin(self) -> None:
        synchronize(self.device)
        waiting.barrier(self.group)
        self.by_step.append(defaultdict(float))
        self._t = time.perf_counter()

    def mark(self, phase: str) -> None:
        synchronize(self.device)
        now = time.perf_counter()
        spent = now - self._t - (self.recorder.take_excluded() if self.recorder else 0.0)
        self.totals[phase] += spent
        if self.by_step:
            self.by_step[-1][phase] += spent
        waiting.barrier(self.group)
        self._t = time.perf_counter()


class RankOpTimer(OpTimer):
    """OpTimer that lines the ranks up (a barrier, untimed) before every collective op."""

    def __init__(self, device: torch.device, group):
        super().__init__(device)
        self.group = group

    def run(self, kind: str, stream: str, fn):
        if self.active and kind in COLLECTIVE_KINDS:
            synchronize(self.device)
            waiting.barrier(self.group)
        return super().run(kind, stream, fn)
