"""Synthetic training batches drawn from the workload's access model, with a learnable target.

Per table, a fixed seeded permutation maps popularity ranks to row ids (rank 0 = hottest; see plan.py): ids are
``perm[access.sample(...)]``, so the hottest rows are spread over the id space and a shard of n rows gets n/N of
the lookups. Bag sizes: a feature with pooling factor P gives each sample floor(P) lookups plus one more with
probability P - floor(P) (mean exactly P, the least spread); one-hot features always look up one row.

Layout per table (all features of the table together, like TorchRec's KeyedJaggedTensor): ``ids`` (L,) row
ids and ``bags`` (L,) bag index of each lookup, where bag f*B + s is feature f of sample s (features in
workload order), sorted by bag. The input step (runner/groups.py) turns them into each fused group's ids,
offsets and bags ahead of time (the input distribution, which TorchRec also runs outside the step).

Labels: ``y = [z > 0]`` with ``z = x . w / sqrt(n_dense) + sum_f mean_bag(score(table, id)) / sqrt(F)``, where
``score`` is a fixed pseudo-random value per (table, row) from a hash (no per-row storage) and ``w`` a fixed random
vector. Both parts are learnable by the model, so the loss falls.

Real ids (``placer run --ids``, a ``SampleSet`` from placer/data/samples.py): each batch takes the next B
consecutive samples of the data (wrapping around), every feature's ids and bag sizes as they are, reduced modulo
the table's rows when ``--scale`` made the table smaller; the rank permutation becomes the rows sorted by how
often the loaded samples touch them (hottest first), so a plan's hot rows are the data's hot rows. Dense
features and labels stay synthetic (the learnable target above).

Batches are generated with numpy before timing starts and kept in a pool on the device (and in RAM for the
CPU-side consumers: host tables and the gather+copy fallback); training cycles through the pool.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from placer.forms.shardings import sharding_of
from placer.plan import Plan
from placer.specs.workload import Workload

INDEX_DTYPE = torch.int64


def table_seed(seed: int, table_index: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(table_index), int(purpose)])


def rank_permutation(rows: int, seed: int, table_index: int) -> np.ndarray:
    """The fixed permutation rank -> row id of one table (int32 when it fits)."""
    perm = table_seed(seed, table_index, 0).permutation(rows)
    return perm.astype(np.int32) if rows < 2**31 else perm


def row_scores(ids: np.ndarray, table_index: int, seed: int) -> np.ndarray:
    """A fixed pseudo-random score in [-sqrt(3), sqrt(3)) (unit variance) per (table, row id), by hashing."""
    x = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64((table_index + 1) * 0x632BE59BD9B4E019
                                                                         + seed * 0xD6E8FEB86659FD93 & (2**64 - 1))
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    u = (x >> np.uint64(11)).astype(np.float64) / float(2**53)
    return (u - 0.5) * 2 * np.sqrt(3.0)


@dataclass
class Batch:
    dense: torch.Tensor  # (B, num_dense_features) fp32 on the device
    labels: torch.Tensor  # (B,) fp32 on the device
    groups: dict  # fused group key -> its GroupInput (runner/groups.py: the input step)
    table_ids: dict[str, np.ndarray]  # global row ids per table (numpy, for tests and accounting)

    def nbytes(self) -> int:
        return self.dense.numel() * 4 + self.labels.numel() * 4 + sum(g.nbytes() for g in self.groups.values())


class BatchGenerator:
    """Draws batches for one workload and one plan (the plan decides how lookups are split over shards)."""

    def __init__(self, workload: Workload, plan: Plan, seed: int = 0, samples=None):
        self.wl = workload
        self.samples = samples  # a placer.data.samples.SampleSet, or None: synthetic ids from the access models
        self.cursor = 0
        self.plan = plan
        self.seed = int(seed)
        self.B = workload.batch_size
        self.rng = np.random.default_rng([self.seed, 2**20])
        self.tables = {t.name: t for t in workload.tables}
        self.features_of = {t.name: [f for f in workload.resolved_features if f.table == t.name]
                            for t in workload.tables}
        if samples is None:
            self.perms = {t.name: rank_permutation(t.rows, self.seed, i) for i, t in enumerate(workload.tables)}
        else:
            self.perms = {t.name: self._data_permutation(t.name, t.rows) for t in workload.tables}
        nd = workload.dense.num_dense_features
        self.teacher = np.random.default_rng([self.seed, 2**21]).standard_normal(nd) / max(np.sqrt(nd), 1.0)

    def _data_permutation(self, name: str, rows: int) -> np.ndarray:
        """Rows by how often the loaded samples touch them, hottest first (ties and untouched rows by id)."""
        counts = np.zeros(rows, dtype=np.int64)
        for f in self.features_of[name]:
            ids = self.samples.features[f.name][0]
            counts += np.bincount(ids % rows, minlength=rows)
        perm = np.argsort(-counts, kind="stable")
        return perm.astype(np.int32) if rows < 2**31 else perm

    def _real_lookups(self, name: str) -> tuple[list, list]:
        """(ids parts, bags parts) of one table: the next B samples of each of its features."""
        rows = self.tables[name].rows
        ids_parts, bags_parts = [], []
        B = self.B
        for fi, f in enumerate(self.features_of[name]):
            ids, lengths = self.samples.window(f.name, self.cursor, B)
            ids_parts.append(ids % rows)
            bags_parts.append(np.repeat(np.arange(fi * B, (fi + 1) * B, dtype=np.int64), lengths))
        return ids_parts, bags_parts

    def release_permutations(self) -> None:
        self.perms = {}

    def _synthetic_lookups(self, name: str) -> tuple[list, list]:
        """(ids parts, bags parts) of one table drawn from its access model and pooling factors."""
        access = self.wl.access_models[name]
        ids_parts, bags_parts = [], []
        B = self.B
        for fi, f in enumerate(self.features_of[name]):
            p = float(f.pooling_factor)
            base = int(np.floor(p))
            sizes = np.full(B, base, dtype=np.int64)
            frac = p - base
            if frac > 1e-12:
                sizes += (self.rng.random(B) < frac).astype(np.int64)
            n = int(sizes.sum())
            ranks = access.sample(n, self.rng)
            ids_parts.append(self.perms[name][ranks].astype(np.int64))
            bags_parts.append(np.repeat(np.arange(fi * B, (fi + 1) * B, dtype=np.int64), sizes))
        return ids_parts, bags_parts

    def _table_lookups(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, bags, per-bag mean score) of one table for one batch."""
        t = self.tables[name]
        B = self.B
        if self.samples is None:
            ids_parts, bags_parts = self._synthetic_lookups(name)
        else:
            ids_parts, bags_parts = self._real_lookups(name)
        ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int64)
        bags = np.concatenate(bags_parts) if bags_parts else np.zeros(0, np.int64)
        nb = len(self.features_of[name]) * B
        index = self.wl.table_index[name]
        sums = np.bincount(bags, weights=row_scores(ids, index, self.seed), minlength=nb)
        counts = np.bincount(bags, minlength=nb)
        means = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        del t
        return ids, bags, means

    def make_numpy(self) -> dict:
        """One batch as numpy arrays: dense, labels, and per table (ids, bags)."""
        B = self.B
        nd = self.wl.dense.num_dense_features
        x = self.rng.standard_normal((B, nd)).astype(np.float32)
        z = x.astype(np.float64) @ self.teacher if nd else np.zeros(B)
        sparse = np.zeros(B)
        tables = {}
        for t in self.wl.tables:
            ids, bags, means = self._table_lookups(t.name)
            tables[t.name] = (ids, bags)
            sparse += means.reshape(-1, B).sum(axis=0)
        if self.samples is not None:
            self.cursor = (self.cursor + B) % self.samples.samples
        z = z + sparse / np.sqrt(max(self.wl.num_pooled_features, 1))
        y = (z > 0).astype(np.float32)
        return {"dense": x, "labels": y, "tables": tables}


def batch_bytes_estimate(workload: Workload, plan: Plan | None = None) -> float:
    """Bytes of one batch on the device (indices for every shard, bags, offsets, dense features, labels)."""
    B = workload.batch_size
    total = B * (workload.dense.num_dense_features + 1) * 4.0
    placements = {p.table: p for p in plan.placements} if plan else {}
    for t in workload.tables:
        L = B * workload.lookups_per_sample(t.name)
        F = workload.outputs_per_sample(t.name)
        p = placements.get(t.name)
        pieces = 1  # column pieces each look up every id; row pieces and split parts divide them
        if p is not None and not sharding_of(p).whole_copies:
            pieces = len({s.cols for s in p.shards})
        bags = len(p.shards) + sum(1 for s in p.shards if 0 < s.hbm_rows < s.num_rows) if p is not None else 1
        # ids + bags (8 B each) of every lookup in each group it enters, offsets (8 B) of every bag of every member
        total += 16.0 * L * pieces + 8.0 * F * B * bags
    return total
