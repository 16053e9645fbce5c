"""The runner's groups of compressed tables (program/compressed_ops.py and tt_ops.py price them): QR, TT, int8.

All offer the FusedGroup interface the single-process trainer uses (make_input, lookup, member_output,
pack_grad, sort, segment_reduce, update, member_rows, slot_map, memory_bytes) and keep the program's fusion:

- ``QRGroup`` (form ``qr:mult`` / ``qr:add``): every QR table of a device, dtype and width in one tensor, each
  table's quotient rows then its remainder rows; its initial rows are those of ``QREmbeddingBag(rows, dim, k,
  combine, seed=qr_seed(seed, table index))`` (placer/runner/compressed.py), so a reference built from that
  module starts from the same weights. Forward: the quotient and remainder rows of every lookup gathered,
  combined, pooled into bags (as QREmbeddingBag). Backward: each lookup's pooled gradient (mult: times the other
  sub-table's row) for both sub-tables, one sort of the 2L ids, one segment reduce, one sparse update.
- ``TTGroup`` (form ``tt:<table>``): one tensor-train table's three cores (class docstring).
- ``Int8Group`` (form ``int8``, frozen tables): every int8 table of a device and width in one
  ``Int8EmbeddingBag`` over the rows the uncompressed table would start from (groups.init_rows), quantized. No
  backward: frozen groups are skipped by the trainer's backward.

``make_group`` picks the class by the key's form (plain and frozen groups are FusedGroups).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from placer.program.compressed_ops import qr_combine
from placer.program.ops import INT8, GroupKey
from placer.runner import kernels
from placer.program.tt_shape import TTShape, slice_ids
from placer.runner.compressed import Int8EmbeddingBag, QREmbeddingBag, TTEmbeddingBag
from placer.runner.groups import TORCH_DTYPE, BuildContext, FusedGroup, GroupInput, Slot, init_rows, offsets_from_bags
from placer.runner.optim import state_shapes


#: table rows built at a time by TTGroup.member_rows (inspection: a scaled 40M-row table, 1M rows, in 16 blocks)
ROWS_BLOCK = 65536


def qr_seed(seed: int, table_index: int) -> int:
    """The seed of a QR or TT table's initial rows (QREmbeddingBag's and TTEmbeddingBag's ``seed``)."""
    return int(seed) * 1_000_003 + table_index


@dataclass
class QRInput(GroupInput):
    """A QR group's lookups: ``ids`` the quotient rows, ``rids`` the remainder rows of every lookup (fused rows)."""

    rids: torch.Tensor = None

    def nbytes(self) -> int:
        return super().nbytes() + self.rids.numel() * self.rids.element_size()


def _to(device):
    return lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)


class _Compressed(FusedGroup):
    """What the compressed groups share with FusedGroup (member_output, pack_grad) without its construction."""

    def _common(self, key: GroupKey, slots: list[Slot], ctx: BuildContext) -> None:
        self.key, self.slots, self.ctx, self.width = key, slots, ctx, key.width
        self.bags = sum(s.member.bags for s in slots)
        self.host_rows = False
        self.op_device = ctx.device
        self.on_cpu = ctx.device.type == "cpu"
        self.grad = torch.empty((self.bags, self.width), dtype=torch.float32, device=ctx.device)
        self.grad_op, self.out_pinned, self.dense_grad = self.grad, None, None

    def slot_map(self, s: Slot):
        return None

    def _table(self, s: Slot):
        wl = self.ctx.workload
        return wl.tables[wl.table_index[s.member.table]]


class QRGroup(_Compressed):
    """QR tables fused (module docstring). ``slots``: build_groups' members, each table's quotient then remainder;
    kept as one slot per table (its quotient member's, bags renumbered), the remainder's rows in ``rbase``."""

    def __init__(self, key: GroupKey, slots: list[Slot], ctx: BuildContext):
        pairs = list(zip(slots[0::2], slots[1::2]))
        if any(q.member.part != "quotient" or r.member.part != "remainder" for q, r in pairs):
            raise ValueError(f"{key.label}: a QR group's members come in quotient/remainder pairs")
        table_slots, bag = [], 0
        for q, _ in pairs:
            table_slots.append(Slot(q.placement, q.member, q.row_base, bag, q.samples, q.features, q.table_dim))
            bag += q.member.bags
        self._common(key, table_slots, ctx)
        self.mult = qr_combine(key) == "mult"
        self.k = {q.member.table: r.member.rows for q, r in pairs}
        self.rbase = {q.member.table: r.row_base for q, r in pairs}
        self.rows = sum(q.member.rows + r.member.rows for q, r in pairs)
        self.weight = self.weight_cpu = torch.zeros((self.rows, self.width), dtype=TORCH_DTYPE[key.dtype],
                                                    device=ctx.device)
        self.states = [torch.zeros(s, dtype=torch.float32, device=ctx.device)
                       for s in state_shapes(ctx.optimizer.name, self.rows, self.width)]
        for s in self.slots:
            t = self._table(s)
            ref = QREmbeddingBag(t.rows, t.dim, self.k[t.name], qr_combine(key),
                                 seed=qr_seed(ctx.seed, self.ctx.workload.table_index[t.name]))
            with torch.no_grad():
                self.weight[s.row_base:s.row_base + s.member.rows] = ref.quotient.to(self.weight.dtype)
                rb = self.rbase[t.name]
                self.weight[rb:rb + self.k[t.name]] = ref.remainder.to(self.weight.dtype)
        self._saved = None

    def make_input(self, tables: dict[str, tuple[np.ndarray, np.ndarray]]) -> QRInput:
        q_parts, r_parts, bag_parts = [], [], []
        for s in self.slots:
            ids, bags = tables[s.member.table]
            k = self.k[s.member.table]
            q_parts.append(ids // k + s.row_base)
            r_parts.append(ids % k + self.rbase[s.member.table])
            bag_parts.append(bags + s.bag_base)
        cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)
        bags = cat(bag_parts)
        to = _to(self.op_device)
        return QRInput(ids=to(cat(q_parts)), offsets=to(offsets_from_bags(bags, self.bags)), bags=to(bags),
                       rids=to(cat(r_parts)))

    def lookup(self, inp: QRInput) -> torch.Tensor:
        """(bags, width) fp32: every lookup's quotient and remainder rows combined, summed into its bag."""
        a = self.weight.index_select(0, inp.ids).float()
        b = self.weight.index_select(0, inp.rids).float()
        self._saved = (a, b)
        rows = a * b if self.mult else a + b
        return torch.zeros((self.bags, self.width), dtype=torch.float32, device=rows.device).index_add_(0, inp.bags,
                                                                                                       rows)

    def sort(self, inp: QRInput):
        """Both sub-tables' ids of every lookup sorted (positions 0..L-1 quotient, L..2L-1 remainder)."""
        ids = torch.cat([inp.ids, inp.rids])
        return kernels.sort(ids, torch.arange(ids.numel(), device=ids.device)) + (inp.bags,)

    def segment_reduce(self, runs) -> torch.Tensor:
        """Each distinct row's summed gradient: a lookup's pooled gradient (mult: times the other row) per
        sub-table."""
        _uniq, counts, positions, bags = runs
        g = self.grad.index_select(0, bags)
        a, b = self._saved
        per_lookup = torch.cat([g * b, g * a]) if self.mult else torch.cat([g, g])
        return kernels.segment_reduce(per_lookup, positions, counts)

    def update(self, runs, summed: torch.Tensor) -> None:
        self.ctx.optimizer.update(self.weight, self.states, runs[0], summed)

    def member_rows(self, s: Slot) -> torch.Tensor:
        """The table's logical rows (rows, dim) fp32 on the CPU: combine(Q[i // k], R[i % k])."""
        t, k = self._table(s), self.k[s.member.table]
        ids = torch.arange(t.rows, device=self.weight.device)
        q = self.weight[ids // k + s.row_base].float()
        r = self.weight[ids % k + self.rbase[t.name]].float()
        return (q * r if self.mult else q + r).cpu()

    def memory_bytes(self) -> dict[str, int]:
        nb = lambda t: t.numel() * t.element_size()
        return {"device": nb(self.weight) + sum(nb(t) for t in self.states), "host": 0}


class Int8Group(_Compressed):
    """Frozen int8 tables fused in one Int8EmbeddingBag (module docstring)."""

    def __init__(self, key: GroupKey, slots: list[Slot], ctx: BuildContext):
        self._common(key, slots, ctx)
        self.rows = sum(s.member.rows for s in slots)
        w = torch.zeros((self.rows, self.width), dtype=torch.float32)
        wl, chunks = ctx.workload, {}
        for s in slots:
            t = self._table(s)
            for j0, block in init_rows(ctx.seed, wl.table_index[t.name], t.rows, t.dim, s.member.local_ids,
                                       s.member.cols, torch.device("cpu"), chunks):
                w[s.row_base + j0:s.row_base + j0 + block.shape[0]] = block
        self.module = Int8EmbeddingBag(w).to(ctx.device)
        self.states = []

    def lookup(self, inp: GroupInput) -> torch.Tensor:
        return self.module(inp.ids, inp.offsets)

    def member_rows(self, s: Slot) -> torch.Tensor:
        ids = torch.arange(s.row_base, s.row_base + s.member.rows, device=self.module.q.device)
        return self.module.dequantized(ids).cpu()

    def memory_bytes(self) -> dict[str, int]:
        return {"device": self.module.weight_bytes(), "host": 0}


@dataclass
class TTInput(GroupInput):
    """A TT group's lookups, deduplicated in the input step: ``ids`` the G1 slice, ``i2`` and ``i3`` the G2 and G3
    slices of every distinct row the batch looks up; ``inverse`` the distinct row of every lookup."""

    i2: torch.Tensor = None
    i3: torch.Tensor = None
    inverse: torch.Tensor = None

    def nbytes(self) -> int:
        return super().nbytes() + sum(t.numel() * t.element_size() for t in (self.i2, self.i3, self.inverse))


class TTGroup(_Compressed):
    """One TT table (form ``tt:<table>``): its three cores, initial values those of ``TTEmbeddingBag(rows, dim,
    ranks, seed=qr_seed(seed, table index))`` (same shape: program/tt_shape.py). Forward as TT-Rec computes it: the
    rows of the batch's U distinct ids only (three slice gathers, two batched products, as TTEmbeddingBag.row),
    each lookup's row taken from them and pooled into its bag. Backward: the pooled gradient expanded to the
    lookups and summed per distinct row, the four products' gradients on the U rows, then per core one sort of
    its slice ids, one segment reduce and one sparse update of the touched slices with the run's
    SparseRowOptimizer (state per core, runner/optim.py: the cores trained as embedding rows are)."""

    def __init__(self, key: GroupKey, slots: list[Slot], ctx: BuildContext):
        if len(slots) != 1:
            raise ValueError(f"{key.label}: a TT group holds one table")
        self._common(key, slots, ctx)
        t = self._table(slots[0])
        ranks = slots[0].placement.compression.tt.ranks
        ref = TTEmbeddingBag(t.rows, t.dim, ranks, seed=qr_seed(ctx.seed, ctx.workload.table_index[t.name]))
        self.shape = TTShape.of(t.rows, t.dim, ranks)
        self.cores = [c.detach().clone().to(ctx.device) for c in (ref.core1, ref.core2, ref.core3)]
        self.core_states = [[torch.zeros(s, dtype=torch.float32, device=ctx.device)
                             for s in state_shapes(ctx.optimizer.name, c.shape[0], c.shape[1])] for c in self.cores]
        self.states = [s for ss in self.core_states for s in ss]
        self._saved = None

    def make_input(self, tables: dict[str, tuple[np.ndarray, np.ndarray]]) -> TTInput:
        s = self.slots[0]
        ids, bags = tables[s.member.table]
        uniq, inverse = np.unique(ids, return_inverse=True)
        i1, i2, i3 = slice_ids(uniq, self.shape.n)
        to = _to(self.op_device)
        bags = bags + s.bag_base
        return TTInput(ids=to(i1), offsets=to(offsets_from_bags(bags, self.bags)), bags=to(bags), i2=to(i2),
                       i3=to(i3), inverse=to(inverse.reshape(-1)))

    def rows_of(self, i1: torch.Tensor, i2: torch.Tensor, i3: torch.Tensor, keep: bool = False) -> torch.Tensor:
        """(U, dim): the rows G1[i1] . G2[i2] . G3[i3]; ``keep``: the operands saved for the backward."""
        (d1, d2, d3), (r1, r2) = self.shape.d, self.shape.ranks
        U = i1.numel()
        a = self.cores[0].index_select(0, i1).view(U, d1, r1)
        b = self.cores[1].index_select(0, i2).view(U, r1, d2 * r2)
        c = self.cores[2].index_select(0, i3).view(U, r2, d3)
        ab = torch.bmm(a, b).view(U, d1 * d2, r2)
        if keep:
            self._saved = (a, b, c, ab)
        return torch.bmm(ab, c).reshape(U, self.width)

    def lookup(self, inp: TTInput) -> torch.Tensor:
        """(bags, dim) fp32: every lookup's row (of the distinct rows computed once), summed into its bag."""
        rows = self.rows_of(inp.ids, inp.i2, inp.i3, keep=True).index_select(0, inp.inverse)
        return torch.zeros((self.bags, self.width), dtype=torch.float32, device=rows.device).index_add_(0, inp.bags,
                                                                                                       rows)

    def sort(self, inp: TTInput):
        """Each core's slice ids of the distinct rows sorted: three (distinct slices, rows per slice, row
        positions), and the lookups' bags and distinct rows."""
        pos = torch.arange(inp.ids.numel(), device=inp.ids.device)
        return [kernels.sort(ix, pos) for ix in (inp.ids, inp.i2, inp.i3)], inp.bags, inp.inverse

    def segment_reduce(self, runs) -> list[torch.Tensor]:
        """Each touched slice's summed gradient, per core: the lookups' gradients summed per distinct row, the
        products' gradients per distinct row, then reduced per slice."""
        (d1, d2, d3), (_, r2) = self.shape.d, self.shape.ranks
        per_core, bags, inverse = runs
        a, b, c, ab = self._saved
        U = a.shape[0]
        g = torch.zeros((U, self.width), dtype=torch.float32, device=a.device).index_add_(
            0, inverse, self.grad.index_select(0, bags)).view(U, d1 * d2, d3)
        d_ab = torch.bmm(g, c.transpose(1, 2)).view(U, d1, d2 * r2)
        d_c = torch.bmm(ab.transpose(1, 2), g)
        d_a = torch.bmm(d_ab, b.transpose(1, 2))
        d_b = torch.bmm(a.transpose(1, 2), d_ab)
        return [kernels.segment_reduce(d.reshape(U, -1), positions, counts)
                for d, (_u, counts, positions) in zip((d_a, d_b, d_c), per_core)]

    def update(self, runs, summed: list[torch.Tensor]) -> None:
        for core, states, (uniq, _c, _p), grad in zip(self.cores, self.core_states, runs[0], summed):
            self.ctx.optimizer.update(core, states, uniq, grad)

    def member_rows(self, s: Slot) -> torch.Tensor:
        """The table's logical rows (rows, dim) fp32 on the CPU, built from the cores a block at a time."""
        t = self._table(s)
        out = []
        for start in range(0, t.rows, ROWS_BLOCK):
            ids = torch.arange(start, min(t.rows, start + ROWS_BLOCK), device=self.cores[0].device)
            out.append(self.rows_of(*slice_ids(ids, self.shape.n)).cpu())
        return torch.cat(out)

    def memory_bytes(self) -> dict[str, int]:
        nb = lambda t: t.numel() * t.element_size()
        return {"device": sum(nb(t) for t in self.cores + self.states), "host": 0}


def make_group(key: GroupKey, slots: list[Slot], ctx: BuildContext) -> FusedGroup:
    """The group of ``key``: a QRGroup, a TTGroup, an Int8Group, or a FusedGroup (plain and frozen rows)."""
    if key.qr:
        return QRGroup(key, slots, ctx)
    if key.tt:
        return TTGroup(key, slots, ctx)
    if key.form == INT8:
        return Int8Group(key, slots, ctx)
    return FusedGroup(key, slots, ctx)
