"""Measured time per op kind and stream beside the step program's price of the same ops.

The runner's instrumented pass times every op it runs (timing.OpTimer) under the program's names (kind,
stream), so that a miss points at one op kind's calibration. Two names differ in grain: the runner times the
dense model as one block ("dense": forward, loss, backward, optimizer step), which the program lists as its
traced GEMMs and elementwise ops; and the feature leaves made in the forward exchange, "elementwise" in both.
"""
from __future__ import annotations

from collections import defaultdict

from placer.program.ops import DENSE, Op


def report_kind(op: Op) -> str:
    """The runner's name for a priced op's kind."""
    return "dense" if op.phase == DENSE else op.kind


def priced_by_kind(ops: list[Op], expand) -> dict[tuple[str, str], float]:
    """Seconds per (kind, stream) of a program's ops (shared-resource loads left out: they are not time on a
    stream). ``expand(stream)``: the streams an op's stream stands for (ProgramBuilder.expand)."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for op in ops:
        for stream in expand(op.stream):
            out[(report_kind(op), stream)] += op.seconds
    return dict(out)


def compare(measured: dict[tuple[str, str], float], ops: list[Op], expand) -> list[dict]:
    """One row per (kind, stream) either side has: measured and priced seconds per step, and their ratio."""
    priced = priced_by_kind(ops, expand)
    rows = []
    for kind, stream in sorted(set(measured) | set(priced)):
        m, p = measured.get((kind, stream), 0.0), priced.get((kind, stream), 0.0)
        rows.append({"kind": kind, "stream": stream, "measured_s": m, "priced_s": p,
                     "measured_over_priced": (m / p) if p > 0 else None})
    return rows
