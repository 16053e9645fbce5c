"""One placer Placement <-> one TorchRec ParameterSharding, both as plain JSON-able dicts.

Ranks: TorchRec's global rank of a GPU is its index in the hardware spec's GPU order (``Topology.gpus``): for
nodes of equal size, node<i>/gpu<j> -> rank i * gpus_per_node + j, on local device cuda:<j> (``device="cuda"``)
or ``cpu`` (``device="cpu"``: placements ``rank:R/cpu``, for DistributedModelParallel over gloo on CPU).

Kernels (placer's hot/cold split of a shard -> TorchRec compute kernel):
- every row in HBM -> ``fused`` (``dense`` for data_parallel, TorchRec's kernel for replicated tables);
- no row in HBM (UVM: the GPU reads host DRAM across PCIe) -> ``fused_uvm``;
- a split -> ``fused_uvm_caching`` with ``cache_params.load_factor`` = the hot fraction. TorchRec's cache is
  dynamic (LRU/LFU over the rows seen); placer prices it as the static split of the hottest rows.
- ``host`` (the host CPU does the lookups): TorchRec has no such kernel for a GPU-trained model; the nearest is
  ``fused_uvm`` table-wise on a GPU of the same node (the rows stay in that host's DRAM).

Sharding: table_wise, column_wise and data_parallel keep their names; row_wise over every GPU is ``row_wise``,
over one node's GPUs of a several-node machine it is TorchRec's ``table_row_wise``.

What TorchRec runs, checked by training exports under DistributedModelParallel (dmp_check.py):
- row-wise lookups are routed to shard i = id // ceil(rows / n) (n: the shards' ranks, the node's for
  table_row_wise), whatever shard sizes the plan writes; so row-wise shards are exported as those blocks, one per
  rank of the group in rank order (empty ones included, as TorchRec's planner writes them), not as placer's
  near-equal split (``row_blocks``);
- FBGEMM's kernels need column widths in multiples of 4: column pieces are re-split into multiples of 4 on the
  same GPUs (``column_blocks``), refused where the table's dim cannot be;
- on CPU (``device="cpu"``) fused_uvm and fused_uvm_caching run as the plain host kernel (every row in the
  rank's memory; TorchRec's planner refuses them on a CPU topology), so the export writes ``fused`` there (the
  placement and its price stay placer's); data_parallel is ``dense`` on both (``fused`` fails an assertion).
"""
from __future__ import annotations

import re

from placer.errors import SpecError
from placer.forms.shardings import FROM_TORCHREC, TABLE_WISE, sharding_of
from placer.plan import Placement, Shard
from placer.specs.workload import TableSpec
from placer.topology import Topology

#: TorchRec sharding type -> placer sharding (each sharding form's torchrec_types, placer/forms)
SHARDING_FROM_TORCHREC = {st: f.name for st, f in FROM_TORCHREC.items()}
#: TorchRec compute kernels placer can price
KERNELS = ("dense", "fused", "fused_uvm", "fused_uvm_caching")
_PLACEMENT = re.compile(r"^rank:(\d+)/(cuda|cpu|meta):?(\d*)$")


DEVICES = ("cuda", "cpu")


class Ranks:
    """Global rank <-> placer GPU name for one hardware spec (see the module docstring). ``device``: what the
    export's placements name, ``cuda`` (rank:R/cuda:D) or ``cpu`` (rank:R/cpu)."""

    def __init__(self, topo: Topology, device: str = "cuda"):
        if device not in DEVICES:
            raise SpecError(f"device {device!r}: expected one of {', '.join(DEVICES)}", field="--device")
        self.topo = topo
        self.device_type = device
        self.gpus = list(topo.gpus)
        self._rank = {g: i for i, g in enumerate(self.gpus)}

    @property
    def world_size(self) -> int:
        return len(self.gpus)

    def rank(self, device: str) -> int:
        return self._rank[device]

    def local(self, device: str) -> int:
        """The device's index within its node: TorchRec's cuda:<local>."""
        return self.topo.gpus_of_node(self.topo.node_of[device]).index(device)

    def placement(self, device: str) -> str:
        if self.device_type == "cpu":
            return f"rank:{self.rank(device)}/cpu"
        return f"rank:{self.rank(device)}/cuda:{self.local(device)}"

    def device(self, rank, *, file: str, field: str) -> str:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(self.gpus):
            raise SpecError(f"rank {rank!r} is not a rank of this machine (0..{len(self.gpus) - 1}, "
                            f"{len(self.gpus)} GPUs in the hardware spec)", file=file, field=field)
        return self.gpus[rank]

    def device_of_placement(self, text, *, file: str, field: str) -> str:
        """'rank:R/cuda:D' or 'rank:R/cpu' -> the device of rank R; D must be that GPU's index in its node."""
        m = _PLACEMENT.match(text) if isinstance(text, str) else None
        if not m:
            raise SpecError(f"placement {text!r}: expected 'rank:R/cuda:D' or 'rank:R/cpu'", file=file, field=field)
        device = self.device(int(m.group(1)), file=file, field=field)
        if m.group(2) == "meta":
            raise SpecError(f"placement {text!r}: a meta device holds no rows (expected cuda or cpu)",
                            file=file, field=field)
        if m.group(2) == "cpu" and m.group(3):
            raise SpecError(f"placement {text!r}: expected 'rank:R/cpu'", file=file, field=field)
        if m.group(2) == "cuda" and m.group(3) and int(m.group(3)) != self.local(device):
            raise SpecError(f"placement {text!r}: rank {m.group(1)} is {device}, local device "
                            f"cuda:{self.local(device)}", file=file, field=field)
        return device


def load_factor_for(shards: list[Shard]) -> float | None:
    """A cache load factor f with round(f * rows) == hbm_rows for every shard (so the import gets the same
    split back), or None when no single f gives every shard's split. Prefers the table's hot fraction."""
    lo = max((s.hbm_rows - 0.5) / s.num_rows for s in shards)
    hi = min((s.hbm_rows + 0.5) / s.num_rows for s in shards)
    if lo >= hi:
        return None
    total = sum(s.num_rows for s in shards)
    hot = sum(s.hbm_rows for s in shards) / total
    candidates = [hot, (lo + hi) / 2]
    for f in candidates:
        if lo < f < hi and 0 < f <= 1 and all(hbm_rows(f, s.num_rows) == s.hbm_rows for s in shards):
            return f
    return None


def hbm_rows(load_factor: float, rows: int) -> int:
    """Rows of a shard of ``rows`` rows in HBM at a cache load factor (placer's static split)."""
    return min(rows, max(0, int(round(load_factor * rows))))


def _with_hbm(p: Placement, fraction: float | None) -> Placement:
    """``p`` with every shard's split at ``fraction`` of its rows (None: unchanged)."""
    if fraction is None:
        return p
    shards = [s.model_copy(update={"hbm_rows": hbm_rows(fraction, s.num_rows),
                                   "host_rows": s.num_rows - hbm_rows(fraction, s.num_rows)}) for s in p.shards]
    return p.model_copy(update={"shards": shards})


def row_blocks(rows: int, n: int) -> list[tuple[int, int]]:
    """The row ranges TorchRec's row-wise routing gives n ranks: blocks of ceil(rows / n), the last ones short
    or empty (start == stop)."""
    block = -(-rows // n)
    return [(min(i * block, rows), min((i + 1) * block, rows)) for i in range(n)]


def column_blocks(dim: int, pieces: int) -> list[tuple[int, int]] | None:
    """Column ranges of near-equal widths in multiples of 4 (FBGEMM's requirement), the wider first; None when
    ``dim`` cannot be cut so (not a multiple of 4, or fewer than 4 columns a piece)."""
    if dim % 4 or dim // 4 < pieces:
        return None
    base, extra = divmod(dim // 4, pieces)
    out, start = [], 0
    for i in range(pieces):
        stop = start + 4 * (base + (1 if i < extra else 0))
        out.append((start, stop))
        start = stop
    return out


def row_wise_group(p: Placement, topo: Topology) -> list[str]:
    """The ranks' devices TorchRec splits a row-wise placement over, in rank order: every GPU (row_wise), or
    the node's GPUs when the shards lie on one node of several (table_row_wise)."""
    if _within_one_node(p, topo):
        return list(topo.gpus_of_node(topo.node_of[p.shards[0].device]))
    return list(topo.gpus)


def _as_row_blocks(p: Placement, t: TableSpec, topo: Topology) -> tuple[Placement, list[str]]:
    """A row-wise placement as TorchRec routes it (``row_blocks`` over ``row_wise_group``), at the placement's
    hot fraction, and the note when that changes the shards."""
    group = row_wise_group(p, topo)
    blocks = row_blocks(t.rows, len(group))
    if len(topo.nodes) > 1 and not _within_one_node(p, topo):
        # the non-empty blocks must not all fall on one node: TorchRec would read that as table_row_wise
        used = {topo.node_of[g] for g, (a, b) in zip(group, blocks) if b > a}
        if len(used) == 1:
            group = list(topo.gpus_of_node(used.pop()))
            blocks = row_blocks(t.rows, len(group))
    fractions = {s.hbm_rows / s.num_rows for s in p.shards}
    hot = fractions.pop() if len(fractions) == 1 else p.hot_fraction
    shards = []
    for g, (a, b) in zip(group, blocks):
        if b > a:
            k = hbm_rows(hot, b - a)
            shards.append(Shard(device=g, rows=(a, b), cols=(0, t.dim), hbm_rows=k, host_rows=b - a - k))
    q = p.model_copy(update={"shards": shards})
    if [(s.device, s.rows) for s in q.shards] == [(s.device, s.rows) for s in p.shards]:
        return p, []
    block = -(-t.rows // len(group))
    return q, [f"TorchRec routes row-wise ids to its {len(group)} ranks in blocks of ceil({t.rows} / {len(group)}) = "
               f"{block} rows, whatever the plan's shard sizes: shards written as those blocks (placer's split: "
               f"{', '.join(str(s.num_rows) for s in p.shards)} rows on {', '.join(s.device for s in p.shards)})"]


def _as_column_blocks(p: Placement, t: TableSpec) -> tuple[Placement, list[str]]:
    """Column pieces in widths of multiples of 4 on the same devices (SpecError where the dim cannot be)."""
    widths = [s.num_cols for s in p.shards]
    if all(w % 4 == 0 for w in widths):
        return p, []
    blocks = column_blocks(t.dim, len(p.shards))
    if blocks is None:
        raise SpecError(f"table {t.name!r}: column_wise pieces {widths} wide; TorchRec's FBGEMM kernels need "
                        f"widths in multiples of 4, and {t.dim} columns cannot be cut into {len(p.shards)} such "
                        "pieces (plan this table without column_wise for TorchRec)", field=f"table {t.name}")
    ordered = sorted(p.shards, key=lambda s: s.cols[0])
    shards = [s.model_copy(update={"cols": c}) for s, c in zip(ordered, blocks)]
    return p.model_copy(update={"shards": shards}), [
        f"column pieces {widths} wide: FBGEMM needs widths in multiples of 4, so the pieces are "
        f"{[b - a for a, b in blocks]} wide on the same GPUs"]


def nearest_mappable(p: Placement, t: TableSpec, topo: Topology, host_gpu: str | None) -> tuple[Placement, list[str]]:
    """The placement TorchRec will run for ``p`` (``p`` itself when TorchRec expresses it) and the notes saying
    what changed. ``host_gpu``: the GPU a ``host`` table goes to (the caller spreads them over the node).
    SpecError for a placement TorchRec cannot run at all (column pieces that cannot be made multiples of 4)."""
    notes = []
    if not sharding_of(p).on_gpus:
        notes.append(f"host CPU lookup on {p.shards[0].device} has no TorchRec kernel; nearest: fused_uvm "
                     f"table_wise on {host_gpu} (rows stay in that host's DRAM, the GPU reads them over PCIe)")
        shard = Shard(device=host_gpu, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)
        return p.model_copy(update={"sharding": TABLE_WISE.name, "shards": [shard]}), notes
    split = sharding_of(p).split
    if split == "rows":
        p, why = _as_row_blocks(p, t, topo)
        notes += why
    elif split == "cols":
        p, why = _as_column_blocks(p, t)
        notes += why
    if sharding_of(p).whole_copies:
        if any(s.host_rows for s in p.shards):
            notes.append("data_parallel replicas with rows in host DRAM: TorchRec replicates in HBM (dense)")
            p = _with_hbm(p, 1.0)
        if sorted(s.device for s in p.shards) != sorted(topo.gpus):
            notes.append("TorchRec's data_parallel replicates on every rank: replicas added on every GPU")
            p = p.model_copy(update={"shards": [Shard(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows,
                                                      host_rows=0) for g in topo.gpus]})
        return p, notes
    split = [s for s in p.shards if 0 < s.hbm_rows < s.num_rows]
    fractions = {s.hbm_rows / s.num_rows for s in p.shards}
    if split or len(fractions) > 1:
        f = load_factor_for(p.shards)
        if f is None:
            hot = p.hot_fraction
            notes.append(f"shards with different hot fractions: TorchRec has one cache load factor per table; "
                         f"mapped to the table's hot fraction {hot:.4g}")
            p = _with_hbm(p, hot)
            if all(s.hbm_rows == s.num_rows for s in p.shards) or all(s.hbm_rows == 0 for s in p.shards):
                return p, notes
        notes.append("static hot/cold split (hottest rows in HBM) -> fused_uvm_caching with load factor = hot "
                     "fraction; TorchRec's cache is dynamic (LRU/LFU), placer prices it as the static split")
    return p, notes


def kernel_of(p: Placement, device: str = "cuda") -> tuple[str, float | None]:
    """(compute kernel, cache load factor or None) of a placement TorchRec expresses, on ``device`` (cuda or
    cpu: there every non-replicated table is ``fused``, the kernel TorchRec runs fused_uvm and
    fused_uvm_caching as)."""
    if sharding_of(p).whole_copies:
        return "dense", None
    if device == "cpu" or all(s.hbm_rows == s.num_rows for s in p.shards):
        return "fused", None
    if all(s.hbm_rows == 0 for s in p.shards):
        return "fused_uvm", None
    return "fused_uvm_caching", load_factor_for(p.shards)


def _within_one_node(p: Placement, topo: Topology) -> bool:
    """Whether ``p`` is row-wise over the GPUs of one node of several (TorchRec's table_row_wise)."""
    return (sharding_of(p).split == "rows" and len(topo.nodes) > 1
            and len({topo.node_of[s.device] for s in p.shards}) == 1)


def sharding_type_of(p: Placement, topo: Topology) -> str:
    """TorchRec sharding type of a placement TorchRec expresses (see the module docstring): its form's first
    TorchRec type, the second (table_row_wise) for row-wise within one node of several."""
    types = sharding_of(p).torchrec_types
    return types[1] if _within_one_node(p, topo) else types[0]


def parameter_sharding(p: Placement, ranks: Ranks) -> dict:
    """The ParameterSharding fields of a placement TorchRec expresses, as a JSON-able dict: sharding_type,
    compute_kernel, ranks (one per shard), sharding_spec.shards (shard_offsets [row, col], shard_sizes
    [rows, cols], placement 'rank:R/cuda:D'; None for data_parallel), cache_params.load_factor."""
    kernel, load_factor = kernel_of(p, ranks.device_type)
    st = sharding_type_of(p, ranks.topo)
    out = {"sharding_type": st, "compute_kernel": kernel,
           "ranks": [ranks.rank(s.device) for s in p.shards], "sharding_spec": None, "cache_params": None}
    if sharding_of(p).split == "rows":
        # one shard per rank of the group in rank order, as TorchRec routes them (nearest_mappable made the
        # placement its blocks; the empty ones past the table's end are written too)
        group = row_wise_group(p, ranks.topo)
        on = {s.device: s for s in p.shards}
        rows = max(s.rows[1] for s in p.shards)
        blocks = row_blocks(rows, len(group))
        if [(on[g].rows if g in on else None) for g in group] != [b if b[1] > b[0] else None for b in blocks]:
            raise ValueError(f"table {p.table}: row-wise shards are not TorchRec's blocks (nearest_mappable first)")
        out["ranks"] = [ranks.rank(g) for g in group]
        out["sharding_spec"] = {"shards": [
            {"shard_offsets": [a, 0], "shard_sizes": [b - a, p.shards[0].num_cols], "placement": ranks.placement(g)}
            for g, (a, b) in zip(group, blocks)]}
    elif not sharding_of(p).whole_copies:
        out["sharding_spec"] = {"shards": [
            {"shard_offsets": [s.rows[0], s.cols[0]], "shard_sizes": [s.num_rows, s.num_cols],
             "placement": ranks.placement(s.device)} for s in p.shards]}
    if load_factor is not None:
        out["cache_params"] = {"load_factor": load_factor}
    return out


def parameter_constraints(p: Placement, sharding: dict, t: TableSpec, pooling_factors: list[float]) -> dict:
    """ParameterConstraints fields that pin TorchRec's planner to this placement's choice (sharding type,
    kernel, cache load factor) and tell it the table's pooling (lookups per sample, per feature)."""
    out = {"sharding_types": [sharding["sharding_type"]], "compute_kernels": [sharding["compute_kernel"]],
           "pooling_factors": pooling_factors or [t.pooling_factor]}
    if sharding.get("cache_params"):
        out["cache_params"] = dict(sharding["cache_params"])
    return out


# ---- TorchRec -> placer ---------------------------------------------------------------------------------


def _int_pair(value, file: str, field: str) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)):
        raise SpecError(f"expected two non-negative integers [rows, cols], got {value!r}", file=file, field=field)
    return int(value[0]), int(value[1])


def placement_from_sharding(table: str, ps: dict, t: TableSpec, ranks: Ranks, precision: str, *,
                            file: str, field: str) -> Placement:
    """A placer Placement from one ParameterSharding dict (the export's fields). SpecError names ``field``."""
    if not isinstance(ps, dict):
        raise SpecError(f"expected an object with sharding_type and compute_kernel, got {type(ps).__name__}",
                        file=file, field=field)
    st, kernel = ps.get("sharding_type"), ps.get("compute_kernel")
    if st not in SHARDING_FROM_TORCHREC:
        raise SpecError(f"sharding_type {st!r}: placer reads {', '.join(SHARDING_FROM_TORCHREC)}",
                        file=file, field=f"{field}.sharding_type")
    if kernel not in KERNELS:
        raise SpecError(f"compute_kernel {kernel!r}: placer prices {', '.join(KERNELS)} (not quant, key_value "
                        "or customized kernels)", file=file, field=f"{field}.compute_kernel")
    load_factor = 1.0 if kernel in ("dense", "fused") else 0.0
    if kernel == "fused_uvm_caching":
        lf = (ps.get("cache_params") or {}).get("load_factor")
        if isinstance(lf, bool) or not isinstance(lf, (int, float)) or not 0 < lf <= 1:
            raise SpecError(f"fused_uvm_caching needs cache_params.load_factor in (0, 1], got {lf!r}",
                            file=file, field=f"{field}.cache_params.load_factor")
        load_factor = float(lf)
    sharding = SHARDING_FROM_TORCHREC[st]
    spec = ps.get("sharding_spec")
    if sharding_of(sharding).whole_copies:
        rank_list = ps.get("ranks") or list(range(ranks.world_size))
        devices = [ranks.device(r, file=file, field=f"{field}.ranks") for r in rank_list]
        blocks = [(d, (0, t.rows), (0, t.dim)) for d in devices]
    elif spec is None and sharding == TABLE_WISE.name and ps.get("ranks"):
        blocks = [(ranks.device(ps["ranks"][0], file=file, field=f"{field}.ranks"), (0, t.rows), (0, t.dim))]
    else:
        shards = spec.get("shards") if isinstance(spec, dict) else None
        if not isinstance(shards, list) or not shards:
            raise SpecError(f"{st} needs sharding_spec.shards (shard_offsets, shard_sizes, placement)",
                            file=file, field=f"{field}.sharding_spec")
        blocks = []
        for i, sh in enumerate(shards):
            f = f"{field}.sharding_spec.shards[{i}]"
            if not isinstance(sh, dict):
                raise SpecError("expected an object", file=file, field=f)
            (r0, c0), (nr, nc) = (_int_pair(sh.get(k), file, f"{f}.{k}") for k in ("shard_offsets", "shard_sizes"))
            if nr == 0 or nc == 0:
                continue  # TorchRec's planner writes empty row-wise shards on ranks past the table's end
            if r0 + nr > t.rows or c0 + nc > t.dim:
                raise SpecError(f"shard rows [{r0}, {r0 + nr}) x cols [{c0}, {c0 + nc}) exceed table {table!r}'s "
                                f"{t.rows} rows x {t.dim} dims", file=file, field=f)
            device = ranks.device_of_placement(sh.get("placement"), file=file, field=f"{f}.placement")
            blocks.append((device, (r0, r0 + nr), (c0, c0 + nc)))
        if sharding_of(sharding).split == "cols" and any(rows != (0, t.rows) for _, rows, _ in blocks):
            raise SpecError(f"{st} shards that split rows too: placer's column_wise keeps whole columns",
                            file=file, field=f"{field}.sharding_spec")
    out = []
    for d, rows, cols in blocks:
        k = hbm_rows(load_factor, rows[1] - rows[0])
        out.append(Shard(device=d, rows=rows, cols=cols, hbm_rows=k, host_rows=rows[1] - rows[0] - k))
    return Placement(table=table, sharding=sharding, precision=precision, shards=out)
