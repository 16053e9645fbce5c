"""Per-table access counts from a stream of chunks, and the measured access model and pooling they give.

Counting is exact. A table of at most ``DENSE_MAX_ROWS`` rows is counted in a rows-sized int64 array (bincount
per chunk, or ``np.add.at`` when a chunk is much smaller than the table); a larger table is counted sparsely:
the distinct ids seen and their counts (np.unique, merged every few million ids), so its memory grows with the
distinct rows the sample touches, never with the table. Untouched rows need no count: the coverage curve
only depends on the touched rows' counts and on the table's rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from placer.specs.access import cdf_from_counts

#: tables up to this many rows are counted in a dense array (128 MiB of int64 at most each)
DENSE_MAX_ROWS = 2**24
#: pending ids of a sparsely counted table merged into its counts once they exceed this many
SPARSE_MERGE_IDS = 1 << 22
#: points of the written coverage curve
MAX_POINTS = 64


class TableCounter:
    def __init__(self, rows: int):
        self.rows = int(rows)
        self.lookups = 0
        self.dense = np.zeros(self.rows, dtype=np.int64) if self.rows <= DENSE_MAX_ROWS else None
        self.keys = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.pending_ids = 0

    def add(self, ids: np.ndarray) -> None:
        if ids.size == 0:
            return
        self.lookups += int(ids.size)
        if self.dense is not None:
            if ids.size * 8 < self.rows:
                np.add.at(self.dense, ids, 1)
            else:
                self.dense += np.bincount(ids, minlength=self.rows)
            return
        self.pending.append(ids)
        self.pending_ids += ids.size
        if self.pending_ids >= SPARSE_MERGE_IDS:
            self._merge()

    def _merge(self) -> None:
        if not self.pending:
            return
        new_keys, new_counts = np.unique(np.concatenate(self.pending), return_counts=True)
        self.pending, self.pending_ids = [], 0
        keys = np.concatenate([self.keys, new_keys])
        counts = np.concatenate([self.counts, new_counts.astype(np.int64)])
        self.keys, inverse = np.unique(keys, return_inverse=True)
        self.counts = np.bincount(inverse, weights=counts, minlength=self.keys.size).astype(np.int64)

    def touched_counts(self) -> np.ndarray:
        """Counts of the rows touched at least once (any order)."""
        if self.dense is not None:
            return self.dense[self.dense > 0]
        self._merge()
        return self.counts

    def nbytes(self) -> int:
        return (self.dense.nbytes if self.dense is not None else 0) + self.keys.nbytes + self.counts.nbytes


def coverage_points(touched: np.ndarray, rows: int, max_points: int = MAX_POINTS) -> list[list[float]]:
    """The coverage curve [[row fraction, lookup fraction], ...] of a table of ``rows`` rows whose touched
    rows have ``touched`` counts: at most ``max_points`` points on a log grid of ranks (the hot head exact),
    reaching 1 at the last touched row; written with 6 significant digits."""
    x, y = cdf_from_counts(touched, max_points=max_points)
    x = x * (touched.size / rows)
    out: list[list[float]] = []
    for a, b in zip(x, y):
        p = [float(f"{a:.6g}"), float(f"{b:.6g}")]
        if p[0] <= 0:
            continue
        if out and p[0] <= out[-1][0]:
            out[-1] = [out[-1][0], max(out[-1][1], p[1])]
            continue
        if out and p[1] < out[-1][1]:
            p[1] = out[-1][1]
        out.append(p)
    out[-1][1] = 1.0
    return out


@dataclass
class Profile:
    """What a sample of ids says about each table and feature."""

    tables: dict[str, TableCounter]
    feature_table: dict[str, str]
    feature_ids: dict[str, int] = field(default_factory=dict)
    feature_samples: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    @classmethod
    def for_workload(cls, workload) -> "Profile":
        return cls({t.name: TableCounter(t.rows) for t in workload.tables},
                   {f.name: f.table for f in workload.resolved_features})

    def add(self, chunk) -> None:
        if chunk.file not in self.files:
            self.files.append(chunk.file)
        for name, (ids, lengths) in chunk.features.items():
            self.tables[self.feature_table[name]].add(ids)
            self.feature_ids[name] = self.feature_ids.get(name, 0) + int(ids.size)
            self.feature_samples[name] = self.feature_samples.get(name, 0) + int(lengths.size)

    @property
    def total_ids(self) -> int:
        return sum(self.feature_ids.values())

    def pooling(self, feature: str) -> float | None:
        """Mean lookups per sample of ``feature``, None when no sample of it was read."""
        n = self.feature_samples.get(feature, 0)
        return self.feature_ids.get(feature, 0) / n if n else None
