"""A tensor-train (TT-Rec, MLSys'21) table's member, ops and memory on a step program (build.py hands them here).

A placement with ``compression: {"tt": {"ranks": [r1, r2]}}`` is table_wise on one GPU with its three cores in
HBM (check_plan refuses other geometries); the cores' shape is program/tt_shape.py's (n_k core rows, d_k column
factors, slice widths w1 = d1 r1, w2 = r1 d2 r2, w3 = r2 d3). It is one member (part ``tt``) of its own group
(form ``tt:<table>``): the runner (runner/compressed_groups.py TTGroup) runs each TT table's ops on its own
cores, so every fixed cost is the table's. For L lookups a step (U distinct rows of N), B bags, dim c:

- forward (as TT-Rec computes it: on the batch's U distinct rows, deduplicated in the input step): ``lookup``:
  three gathers of U core slices (w_k fp32 values each, at the calibrated fp32 gather rates for that slice size;
  distinct slices from U, ``touched``); ``gemm``: two batched matrix products per distinct row, (d1 x r1)(r1 x d2
  r2) and (d1 d2 x r2)(r2 x d3), each priced as a roofline of the calibrated GEMM rate (by its shape, flattened as
  batch x m rows) and the calibrated stream rate over the bytes it reads and writes (tiny matrices are
  memory-bound); ``combine``: every lookup's row taken from the U rows and pooled into B bags;
- backward: ``pack_grad`` of the pooled gradient; ``elementwise``: the pooled gradient expanded to the L lookups
  and summed per distinct row (at the calibrated segment-reduce rate: the same gather-and-sum); ``gemm``: the
  four products' gradients on the U rows (dAB, dG3, dG1, dG2: twice the forward's FLOPs); then per core a
  ``sort`` of its U slice ids, a ``segment_reduce`` of the U slice gradients (w_k values each) and a sparse
  ``update`` of the touched slices with the workload's optimizer: the cores are dense parameters touched
  sparsely, trained as embedding rows are (runner/optim.py SparseRowOptimizer: sgd, adagrad per value,
  rowwise_adagrad one state per core slice, lazy adam on touched slices); optimizer state lives beside each core.

No op kind is new: every op is priced from calibrated kinds (gather, gemm, stream, sort, segment_reduce,
update) and their fixed costs (``FIXED``: how many of each kind's ops the runner issues). Memory on the GPU:
the cores and their state; pooled outputs and gradients; the workspace (per distinct row: the gathered slices and
the first product the forward saves, its gradient and the slice gradients, the sort keys; per lookup: its row and
its gradient row); the ids (a bag and a distinct row per lookup, three slice ids per distinct row). Sizes are per
step: counts, bytes, seconds.
"""
from __future__ import annotations

from placer.plan import Placement
from placer.program.ops import BWD, BX, FWD, INDEX_BYTES, POOLED_BYTES, STATE_BYTES, GroupKey, Member, Op
from placer.program.compressed_ops import touched_subrows
from placer.program.tt_shape import TTShape

#: the cores' dtype (fp32: the runner's TTEmbeddingBag), and the GEMM rates that price their products
TT_DTYPE = "fp32"
#: runner ops per op of the program (TTGroup): the fixed cost each pays ``count`` times, by fixed-cost kind
FIXED = {("lookup", FWD): (3, "elementwise"), ("gemm", FWD): (2, "gemm"), ("combine", FWD): (3, "elementwise"),
         ("pack_grad", BX): (1, "copy"), ("elementwise", BWD): (3, "elementwise"), ("gemm", BWD): (4, "gemm"),
         ("sort", BWD): (3, "sort"), ("segment_reduce", BWD): (3, "segment_reduce"), ("update", BWD): (3, None)}
#: optimizer state values per core slice of w values: (per value, per slice), as runner/optim.state_shapes
STATE_VALUES = {"sgd": (0, 0), "adagrad": (1, 0), "rowwise_adagrad": (0, 1), "adam": (2, 0)}


def table_shape(t) -> TTShape:
    """The TT shape of a workload table that allows tt (a plan's TT placement has the workload's ranks)."""
    return TTShape.of(t.rows, t.dim, t.compression.tt.ranks)


def touched(rows: int, unique: float, slices: int) -> float:
    """Distinct slices of a core of ``slices`` rows touched when ``unique`` of the table's ``rows`` rows are: each
    slice stands for rows / slices table rows (compressed_ops.touched_subrows)."""
    return touched_subrows(rows, unique, slices, rows / slices)


def tt_member(p: Placement, key: GroupKey, rows: int, bags: int, lookups: float, unique: float
              ) -> list[tuple[GroupKey, Member]]:
    """A TT placement's one member (part 'tt'): every lookup of the table; rows the table's logical rows."""
    s = p.shards[0]
    return [(key, Member(p.table, 0, "tt", rows, (s.cols[0], s.cols[1]), bags, lookups, unique,
                         (s.rows[0], s.rows[1])))]


def fixed_ops(key: GroupKey, costs, stream: str, optimizer: str) -> list[Op]:
    """A TT group's fixed costs (once per table): FIXED's count of each op kind's fixed cost."""
    return [Op(kind, phase, stream, n * costs.fixed(cost or f"update_{optimizer}"), group=key, once=True)
            for (kind, phase), (n, cost) in FIXED.items()]


def bmm_s(costs, L: float, m: int, k: int, n: int, layout: str = "nn") -> float:
    """One batched product of L (m x k)(k x n) fp32 matrices: the slower of its FLOPs at the calibrated GEMM rate
    and its bytes (read both operands, write the product) at the calibrated stream rate."""
    moved = L * (m * k + k * n + m * n) * POOLED_BYTES
    return max(costs.gemm_s(TT_DTYPE, m, k, n, batch=L, layout=layout), costs.stream_s(moved))


def member_ops(key: GroupKey, m: Member, shape: TTShape, costs, stream: str, optimizer: str) -> list[Op]:
    """A TT table's work (module docstring): L lookups, U = m.unique_rows distinct rows."""
    (d1, d2, d3), (r1, r2), L, c = shape.d, shape.ranks, m.lookups, m.cols[1] - m.cols[0]
    U = m.unique_rows
    rows, grad_row, pooled = m.local_ids[1] - m.local_ids[0], c * POOLED_BYTES, m.bags * c * POOLED_BYTES
    slices = [(w * POOLED_BYTES, touched(rows, U, n)) for n, w in zip(shape.n, shape.widths)]
    op = lambda kind, phase, s, **sizes: Op(kind, phase, stream, s, key, m.table, sizes=sizes)
    gather = sum(costs.lookup_s(TT_DTYPE, wb, U, u, U * wb, False) for wb, u in slices)
    fwd = bmm_s(costs, U, d1, r1, d2 * r2) + bmm_s(costs, U, d1 * d2, r2, d3)
    bwd = (bmm_s(costs, U, d1 * d2, d3, r2, "nt") + bmm_s(costs, U, r2, d1 * d2, d3, "tn")
           + bmm_s(costs, U, d1, d2 * r2, r1, "nt") + bmm_s(costs, U, r1, d1, d2 * r2, "tn"))
    s1, s2 = STATE_VALUES[optimizer]
    update = sum(costs.update_s(optimizer, TT_DTYPE, wb * (1 + s1) + s2 * STATE_BYTES, u, False) for wb, u in slices)
    flops = U * sum(shape.forward_flops)
    pool = 3 * L * grad_row + pooled  # every lookup's row selected (read, write), then pooled (read, write bags)
    return [op("lookup", FWD, gather, lookups=U, slices=[u for _, u in slices], row_bytes=[wb for wb, _ in slices]),
            op("gemm", FWD, fwd, flops=flops, what="TT products"),
            op("combine", FWD, costs.stream_s(pool), bytes=pool, what="TT rows pooled"),
            op("pack_grad", BX, costs.stream_s(2 * pooled), bytes=pooled),
            op("elementwise", BWD, costs.segment_reduce_s(grad_row, L), lookups=L, what="TT gradient per distinct row"),
            op("gemm", BWD, bwd, flops=2 * flops, what="TT product gradients"),
            op("sort", BWD, costs.sort_s(3 * U), ids=3 * U),
            op("segment_reduce", BWD, sum(costs.segment_reduce_s(wb, U) for wb, _ in slices), lookups=3 * U),
            op("update", BWD, update, rows=sum(u for _, u in slices))]


def core_bytes(shape: TTShape, optimizer: str) -> float:
    """The cores and their optimizer state (fp32), bytes."""
    s1, s2 = STATE_VALUES[optimizer]
    return sum(n * (w * (1 + s1) + s2) for n, w in zip(shape.n, shape.widths)) * POOLED_BYTES


def buffers(m: Member, shape: TTShape, optimizer: str, memory: str, buffer) -> list:
    """What a TT table keeps in its GPU's memory during a step (module docstring); ``buffer(memory, purpose,
    bytes)`` makes each (build.Buffer)."""
    (d1, d2, _), (_, r2), L, c = shape.d, shape.ranks, m.lookups, m.cols[1] - m.cols[0]
    U = m.unique_rows
    per_row = (2 * sum(shape.widths) + 2 * d1 * d2 * r2 + c) * POOLED_BYTES + 3 * 2 * INDEX_BYTES
    work = U * per_row + 2 * L * c * POOLED_BYTES
    return [buffer(memory, "rows and optimizer state", core_bytes(shape, optimizer)),
            buffer(memory, "pooled outputs and gradients", 2 * m.bags * c * POOLED_BYTES),
            buffer(memory, "backward workspace", work),
            buffer(memory, "input ids", L * 2 * INDEX_BYTES + U * 3 * INDEX_BYTES)]
