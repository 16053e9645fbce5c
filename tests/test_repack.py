"""Pairwise repacking (planner/repack.py) scores every split of two GPUs' tables with the fixed costs of the fused
groups each split leaves open: the scores must be the loads the exact pricing then gives."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from placer.cost import CostModel
from placer.options import OptionConfig
from placer.planner.assign import Assigner
from placer.planner.budget import Budget
from placer.planner.context import Context
from placer.planner.kinds import KindFolder
from placer.planner.repack import MAX_POOLED, GpuFrame, split_loads
from placer.planner.symmetry import Symmetry
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def assigned():
    """The first 96 tables of production-856 (widths 4 to 256), each whole in one GPU's HBM, assigned onto the
    16 GPUs of two DGX H100s by stage 2's greedy assignment."""
    workload = load_workload(ROOT / "workloads" / "production-856.yaml")
    workload = workload.model_copy(update={"tables": workload.tables[:96]})
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), workload.dense.dtype)
    ctx = Context.of(CostModel(topo, workload), Symmetry.of(topo), OptionConfig())
    kinds = KindFolder(ctx).kinds()
    chosen = [min((k for k in ks if k.placement.sharding == "table_wise" and k.groups
                   and all(s.host_rows == 0 for s in k.placement.shards)), key=lambda k: k.weight)
              for ks in kinds]
    stage2 = Assigner(ctx)
    stage2.budget = Budget.unlimited()
    got = stage2.assign(chosen, kinds)
    placements, acc = got.placements, got.acc
    assert placements
    return stage2, placements, acc


def test_split_loads_are_the_exact_loads_with_group_openings_and_closings(assigned):
    stage2, placements, acc = assigned
    tables = stage2.single_gpu_tables()
    frame = GpuFrame(stage2, acc, tables)
    on = collections.defaultdict(list)
    for ti in tables:
        on[stage2.where[ti][1]].append(ti)
    keys = sorted(k for k in on if on[k])
    pairs = [(g, h) for i, g in enumerate(keys) for h in keys[i + 1:] if len(on[g]) + len(on[h]) <= MAX_POOLED]
    assert pairs
    rng = np.random.default_rng(0)
    checked = closed = opened = 0
    for g, h in pairs[:6]:
        split, load_g, load_h, fits = split_loads(frame, acc, on, g, h)
        pool = on[g] + on[h]
        groups_now = {k: set(map(int, np.flatnonzero(acc.users_of(frame.group_at[k]) > 0))) for k in (g, h)}
        for i in rng.choice(np.flatnonzero(fits), size=min(12, int(fits.sum())), replace=False):
            moves = [(t, g if split[i, j] else h) for j, t in enumerate(pool)]
            loads_after = {}

            def look() -> bool:
                loads_after[g] = acc.load_array[frame.load_at[g]].copy()
                loads_after[h] = acc.load_array[frame.load_at[h]].copy()
                for k in (g, h):
                    now = set(map(int, np.flatnonzero(acc.users_of(frame.group_at[k]) > 0)))
                    loads_after[k, "closed"] = len(groups_now[k] - now)
                    loads_after[k, "opened"] = len(now - groups_now[k])
                return False  # undo: every split is checked from the same assignment

            assert not stage2.move_exactly(placements, acc, moves, keep=look)
            assert np.allclose(loads_after[g], load_g[i], rtol=1e-9, atol=1e-15)
            assert np.allclose(loads_after[h], load_h[i], rtol=1e-9, atol=1e-15)
            closed += loads_after[g, "closed"] + loads_after[h, "closed"]
            opened += loads_after[g, "opened"] + loads_after[h, "opened"]
            checked += 1
    assert checked >= 24 and closed > 0 and opened > 0  # the splits checked did open and close groups

