"""planner/types.py: the two-stage planner's typed results, row keys and the shapes of a stage and a move."""
from __future__ import annotations

import functools
import inspect

from placer.planner.rekind import rekind, rekind_pairs
from placer.planner.repack import repack
from placer.planner.swap import swap
from placer.planner.kinds import FAMILY
from placer.planner.types import NO_PLACEMENTS, Family, Move, RowKey, RowKind, Stage2Result, row_kind


def test_row_keys_sort_and_print_as_their_old_names():
    """lp.py sorts the stream rows: RowKeys keep the order their strings "stream:<i>" had (10 before 9)."""
    keys = [(0, RowKey(RowKind.STREAM, ti)) for ti in (9, 10, 2)] + [(1, RowKey(RowKind.STREAM, 1))]
    assert [str(k[1]) for k in sorted(keys)] == ["stream:10", "stream:2", "stream:9", "stream:1"]
    assert str(RowKey(RowKind.EXACT, "node0/nic0->fabric")) == "exact:node0/nic0->fabric"
    assert RowKey(RowKind.TABLE, 3) == RowKey(RowKind.TABLE, 3) != RowKey(RowKind.STREAM, 3)
    assert row_kind(RowKey(RowKind.TABLE, 3)) is RowKind.TABLE and row_kind("gpu.hbm") is None


def test_families_are_their_old_names():
    """A Family is its old string name: it compares, hashes, prints and serializes as that string."""
    assert [f.value for f in Family] == ["gpu", "node", "block", "all", "node_local"]
    assert Family.ALL == "all" and {"gpu": 1}[Family.GPU] == 1 and str(Family.BLOCK) == f"{Family.BLOCK}" == "block"
    assert set(FAMILY.values()) | {Family.LOCAL} == set(Family) and FAMILY["data_parallel"] is Family.ALL


def test_stage2_result_better_than():
    assert not NO_PLACEMENTS.better_than(NO_PLACEMENTS)
    placed = Stage2Result(["p"], 1.0)  # type: ignore[list-item]
    assert placed.better_than(NO_PLACEMENTS) and not placed.better_than(Stage2Result(["q"], 1.0))
    assert not Stage2Result([], 0.5).better_than(placed)  # nothing placed is never better


def _params(f) -> list[str]:
    return list(inspect.signature(f).parameters)


def test_the_moves_have_the_move_shape():
    """swap and repack are Moves; rekind and rekind_pairs are once their kinds are given (stage2.py)."""
    shape = _params(Move.__call__)[1:]  # less self
    for move in (swap, repack, functools.partial(rekind, kinds=[]), functools.partial(rekind_pairs, kinds=[])):
        assert _params(move)[:len(shape)] == ["stage2", "placements", "acc", "budget"] == shape
