"""A portfolio: alternatives for one question, run one after another, each with the seconds the Schedule gives it.

Three places try several searches for one answer and keep the best, or report each: ``placer compare`` (its
methods within one budget: the ILP searches share what the others leave, SCHEDULE.compare_search_s), a two-stage
solve on several nodes (the stages with node-local replicas, then without them: SCHEDULE.two_stage_pass_s), and
``placer sweep`` (one solve per GPU count, each at the whole limit: SCHEDULE.sweep_count_s). Each is a list of
entries run by ``run``: an entry that ``searches`` is handed its share when it starts, from the rule given with the
number of searching entries still to run (itself included), so what an earlier entry left goes to the later ones;
an entry that does not search (a baseline, which has no limit) is handed None. The rules are schedule.py's; this
module only runs the entries in their order.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One alternative: ``run(seconds)`` answers it, ``seconds`` its share (None where it does not search)."""

    name: str
    run: Callable[[float | None], T]
    searches: bool = True


def run(entries: Sequence[Entry[T]], share: Callable[[int], float]) -> Iterator[tuple[Entry[T], float | None, T]]:
    """(entry, its seconds, its answer) of each entry in order; ``share(n)`` is the seconds of the next searching
    entry, ``n`` searching entries (it included) still to run. A caller may stop early (sweep's target reached)."""
    for i, entry in enumerate(entries):
        seconds = share(sum(e.searches for e in entries[i:])) if entry.searches else None
        yield entry, seconds, entry.run(seconds)
