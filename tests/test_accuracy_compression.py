"""The accuracy experiment of compressed and node-local tables (validation/accuracy_compression.py) at tiny sizes:
every variant trains and is scored, memory as each option says, the AUC as Mann-Whitney defines it."""
import argparse

import numpy as np
import pytest

from validation import accuracy_compression as ac


def test_auc_is_the_share_of_positive_negative_pairs_ranked_right():
    assert ac.auc(np.array([0, 0, 1, 1.0]), np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert ac.auc(np.array([1, 1, 0, 0.0]), np.array([0.1, 0.2, 0.3, 0.4])) == 0.0
    assert ac.auc(np.array([0, 1, 0, 1.0]), np.array([0.1, 0.2, 0.3, 0.4])) == pytest.approx(0.75)
    assert ac.auc(np.array([0, 1.0]), np.array([0.5, 0.5])) == 0.5  # ties count half


def test_every_variant_trains_and_is_scored(monkeypatch):
    monkeypatch.setattr(ac, "QUICK_TABLES", [(600, 1.05), (80, 1.1), (10, 1.2)])
    args = argparse.Namespace(quick=True, samples=0, epochs=2, batch=512, lr=0.05, compress=1, seed=0,
                              variants=ac.VARIANTS)
    monkeypatch.setattr(ac, "QUICK_SAMPLES", (4000, 1000))
    got = ac.run(args)
    rows = {r["variant"]: r for r in got["rows"]}
    assert list(rows) == ac.VARIANTS
    assert all(np.isfinite(r["logloss"]) and 0 <= r["auc"] <= 1 and 1 <= r["best_epoch"] <= 2
               for r in rows.values())
    assert got["teacher_logloss"] > 0
    full = rows["full"]["embedding_bytes"]
    assert full == (600 + 80 + 10) * ac.DIM * 4
    assert rows["qr-k2"]["embedding_bytes"] == (300 + 2 + 80 + 10) * ac.DIM * 4  # the largest table halved
    assert rows["int8-frozen"]["embedding_bytes"] == (600 + 80 + 10) * (ac.DIM + 8)
    assert rows["int8-frozen"]["logloss_vs_full"] == pytest.approx(0, abs=0.01)  # 8 bits lose little
    assert rows["node-local"]["embedding_bytes"] == full  # per node: a whole replica
