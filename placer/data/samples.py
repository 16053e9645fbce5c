"""The real samples a validation run trains on (``placer run --ids``): the first N consecutive samples of a data
set, per feature as CSR (ids, offsets), read with the same readers as ``placer profile``."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.errors import SpecError


@dataclass
class SampleSet:
    """``features[name] = (ids int64, offsets int64 of samples+1)`` for every workload feature, all with the same
    number of samples; ids index the feature's table as the workload describes it (unscaled)."""

    features: dict[str, tuple[np.ndarray, np.ndarray]]
    samples: int
    source: str

    def window(self, feature: str, start: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths) of ``size`` consecutive samples of ``feature`` from ``start``, wrapping around."""
        ids, off = self.features[feature]
        idx = (start + np.arange(size, dtype=np.int64)) % self.samples
        lengths = off[idx + 1] - off[idx]
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(0, np.int64), lengths
        firsts = np.repeat(off[idx] - (np.cumsum(lengths) - lengths), lengths)
        return ids[firsts + np.arange(total, dtype=np.int64)], lengths


def load_samples(paths: list[str], fmt: str | None, workload, max_samples: int) -> SampleSet:
    """The first ``max_samples`` samples of every feature (fewer if the data has fewer: a run cycles through
    them). Every feature of the workload must have samples; each keeps the same count (the smallest)."""
    from placer.data.readers import FeatureMap, iter_chunks

    fmap = FeatureMap(workload)
    ids: dict[str, list] = {n: [] for n in fmap.names}
    lengths: dict[str, list] = {n: [] for n in fmap.names}
    for chunk in iter_chunks(list(paths), fmt, fmap, limit_samples=max_samples):
        for name, (i, ln) in chunk.features.items():
            ids[name].append(i)
            lengths[name].append(ln)
    where = ", ".join(paths)
    missing = [n for n in fmap.names if not lengths[n]]
    if missing:
        raise SpecError(f"--ids {where}: no samples of feature(s) {', '.join(missing[:8])}; a run needs every "
                        "feature of the workload", field="--ids")
    out = {}
    n = min(sum(x.size for x in lengths[name]) for name in fmap.names)
    for name in fmap.names:
        ln = np.concatenate(lengths[name])[:n]
        off = np.concatenate([[0], np.cumsum(ln)]).astype(np.int64)
        out[name] = (np.concatenate(ids[name])[:off[-1]].astype(np.int64), off)
    return SampleSet(out, n, where)
