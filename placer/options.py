"""Candidate placements of every table: the menu the planner chooses from.

Per table (docs/design.md): table-wise on each GPU at each hot-row level (the hottest fraction f of rows in
that GPU's HBM, the rest in its host's DRAM read by the GPU; f = 0 is UVM); row-wise over each node's GPUs
and over all GPUs; column-wise into 2/4/8 pieces on aligned GPU blocks of a node; data-parallel (small
tables); host with CPU lookup on each node's host; at fp16 too where the workload allows it. Compressed forms
only where the table's workload entry allows them (``compression``): QR at k = the allowed max_collisions and 2 and
4 below it, TT (three fp32 cores) at the allowed ranks for a trained table, and int8 rows of a frozen table, each
table-wise on each GPU with every row in HBM (the geometry the
cost model prices and the runner runs compressed: row-wise, data-parallel, split and host forms of a compressed
table are not offered). A frozen table's options are the usual ones, priced without a backward (program/build.py).
A table that allows ``node_local`` on a machine of several nodes gets the node-local variants of the first node's
table-wise, row-wise and column-wise options (a replica on every node, placer/node_local.py; the two-stage
planner's canonical options get them too, planner/kinds.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from placer.errors import SpecError
from placer.forms import FORCED_FORMS, force
from placer.node_local import node_local_options
from placer.plan import Compression, Placement, QRForm, Shard, TTForm
from placer.specs.workload import TableSpec, Workload
from placer.topology import Topology

DEFAULT_HOT_LEVELS = (1.0, 0.5, 0.25, 0.1, 0.05, 0.01, 0.0)
COLUMN_PIECES = (2, 4, 8)
MIN_COLUMN_PIECE = 4  # narrowest column piece offered, elements
DATA_PARALLEL_MAX_BYTES = 64 * 2**20  # replicate only tables up to 64 MiB (their all-reduce is whole-table)
QR_SMALL_COLLISIONS = (2, 4)  # QR collisions offered below the allowed maximum (the maximum is always offered)


@dataclass(frozen=True)
class OptionConfig:
    """Which kinds of placement to offer. Defaults follow the planner issue."""

    hot_levels: tuple[float, ...] = DEFAULT_HOT_LEVELS
    row_wise: bool = True
    column_wise: bool = True
    data_parallel: bool = True
    host: bool = True
    fp16: bool = True
    canonical: bool = False  # one representative per symmetry class: node0/gpu0, node0, node0's first block
    all_gpu_kinds: bool = True  # row-wise over all GPUs (several nodes) and data-parallel
    compressed: bool = True  # the compressed forms the workload allows (QR, int8 of frozen tables)
    # a form (forms.FORCED_FORMS) every table that allows it is held to: the forced methods (solve --method qr)
    forced_form: str | None = None
    node_local: bool = True  # node-local replicas for the tables that allow them (several nodes)
    # extra hot-row fractions for some tables: ((table name, (fraction, ...)), ...), set by the planner where the
    # default levels leave a big table no split that fits (planner/fit.py)
    table_levels: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self):
        levels = list(self.hot_levels) + [f for _, fs in self.table_levels for f in fs]
        if not self.hot_levels or any(not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f <= 1
                                      for f in levels):
            raise SpecError(f"hot-row levels must be fractions in [0, 1], got {self.hot_levels!r}",
                            field="hot_levels")
        if self.forced_form is not None and self.forced_form not in FORCED_FORMS:
            raise SpecError(f"unknown form {self.forced_form!r}; choose from {', '.join(FORCED_FORMS)}",
                            field="forced_form")

    def levels_for(self, table: str) -> tuple[float, ...]:
        """Hot-row fractions offered for ``table``: the default levels, then its extra ones."""
        extra = next((fs for name, fs in self.table_levels if name == table), ())
        return tuple(self.hot_levels) + tuple(f for f in extra if f not in self.hot_levels)


def _first(items: list, canonical: bool) -> list:
    return items[:1] if canonical else items


def _shard(**kw) -> Shard:
    """A Shard built without validation: options are correct by construction and there are many."""
    return Shard.model_construct(**kw)


def _placement(**kw) -> Placement:
    return Placement.model_construct(**kw)


def precisions(t: TableSpec, cfg: OptionConfig) -> list[str]:
    """Storage precisions allowed for a table: its own, plus fp16 when the workload allows it."""
    if t.dtype == "fp16":
        return ["fp16"]
    return ["fp32", "fp16"] if (cfg.fp16 and t.allow_fp16) else ["fp32"]


def hot_rows_levels(rows: int, levels) -> list[int]:
    """Distinct HBM row counts for a shard of ``rows`` rows, hottest levels first."""
    out = []
    for f in levels:
        k = int(round(f * rows))
        if k not in out:
            out.append(k)
    return out


def row_split(rows: int, pieces: int) -> list[tuple[int, int]]:
    """Contiguous id ranges of near-equal size (the first ``rows % pieces`` one row longer)."""
    base, extra = divmod(rows, pieces)
    out, start = [], 0
    for i in range(pieces):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return [r for r in out if r[1] > r[0]]


def data_parallel_allowed(t: TableSpec, precision: str, topo: Topology, cfg: OptionConfig) -> bool:
    return cfg.data_parallel and len(topo.gpus) > 1 and t.size_bytes(precision) <= DATA_PARALLEL_MAX_BYTES


def row_wise_placement(t: TableSpec, gpus: list[str], precision: str, hot_fraction: float,
                       first_only: bool = False, smallest_only: bool = False) -> Placement | None:
    """Row-wise over ``gpus`` (near-equal id ranges), each shard's hottest ``hot_fraction`` in HBM.
    ``first_only``: just the first shard, the largest (a probe for the memory a split needs);
    ``smallest_only``: just the last range, the smallest, on the first GPU (a probe that prices every shard
    at most at what it costs: planner/kinds.py repeats it for a lower bound)."""
    if t.rows < len(gpus):
        return None
    ranges = row_split(t.rows, len(gpus))
    pairs = list(zip(gpus, ranges))
    if first_only:
        pairs = pairs[:1]
    elif smallest_only:
        pairs = [(gpus[0], ranges[-1])]
    shards = []
    for g, (a, b) in pairs:
        k = int(round(hot_fraction * (b - a)))
        shards.append(_shard(device=g, rows=(a, b), cols=(0, t.dim), hbm_rows=k, host_rows=b - a - k))
    return _placement(table=t.name, sharding="row_wise", precision=precision, shards=shards)


def data_parallel_placement(t: TableSpec, gpus: list[str], precision: str) -> Placement:
    return _placement(table=t.name, sharding="data_parallel", precision=precision, shards=[
        _shard(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows, host_rows=0) for g in gpus])


def table_options(t: TableSpec, topo: Topology, wl: Workload, cfg: OptionConfig = OptionConfig()) -> list[Placement]:
    """Every candidate placement of one table."""
    out: list[Placement] = []
    seen_row_wise: set = set()
    full_rows, full_cols = (0, t.rows), (0, t.dim)
    for prec in precisions(t, cfg):
        for g in _first(topo.gpus, cfg.canonical):
            for k in hot_rows_levels(t.rows, cfg.levels_for(t.name)):
                out.append(_placement(table=t.name, sharding="table_wise", precision=prec, shards=[
                    _shard(device=g, rows=full_rows, cols=full_cols, hbm_rows=k, host_rows=t.rows - k)]))
        if cfg.row_wise:
            groups = [topo.gpus_of_node(n) for n in _first(topo.nodes, cfg.canonical) if len(topo.gpus_of_node(n)) > 1]
            if len(topo.nodes) > 1 and cfg.all_gpu_kinds:
                groups.append(list(topo.gpus))
            for group in groups:
                for f in cfg.levels_for(t.name):
                    p = row_wise_placement(t, group, prec, f)
                    key = p and (len(group), group[0], tuple(s.hbm_rows for s in p.shards))
                    if p is not None and key not in seen_row_wise:
                        seen_row_wise.add(key)
                        out.append(p)
        if cfg.column_wise:
            for pieces in COLUMN_PIECES:
                if t.dim % pieces or t.dim // pieces < MIN_COLUMN_PIECE:
                    continue
                width = t.dim // pieces
                for node in _first(topo.nodes, cfg.canonical):
                    gpus = topo.gpus_of_node(node)
                    for start in _first(list(range(0, len(gpus) - pieces + 1, pieces)), cfg.canonical):
                        block = gpus[start:start + pieces]
                        out.append(_placement(table=t.name, sharding="column_wise", precision=prec, shards=[
                            _shard(device=g, rows=full_rows, cols=(i * width, (i + 1) * width), hbm_rows=t.rows,
                                  host_rows=0) for i, g in enumerate(block)]))
        if cfg.all_gpu_kinds and data_parallel_allowed(t, prec, topo, cfg):
            out.append(data_parallel_placement(t, topo.gpus, prec))
        if cfg.host:
            for host in _first(topo.hosts, cfg.canonical):
                out.append(_placement(table=t.name, sharding="host", precision=prec, shards=[
                    _shard(device=host, rows=full_rows, cols=full_cols, hbm_rows=0, host_rows=t.rows)]))
        if cfg.compressed:
            out += compressed_options(t, topo, prec, cfg)
    if t.node_local and cfg.node_local:  # replicas of node0's intra-node options (placer/node_local.py)
        out += node_local_options(out, topo.nodes)
    return force(out, t, cfg.forced_form) if cfg.forced_form else out


def qr_collisions(t: TableSpec) -> list[int]:
    """The QR collisions k offered for a table: its allowed max_collisions, then QR_SMALL_COLLISIONS below it
    (none if the workload does not allow QR)."""
    qr = t.compression.qr if t.compression is not None else None
    if qr is None:
        return []
    return [qr.max_collisions] + [k for k in QR_SMALL_COLLISIONS if k < qr.max_collisions]


def compressed_options(t: TableSpec, topo: Topology, precision: str, cfg: OptionConfig) -> list[Placement]:
    """The compressed forms the workload allows for ``t`` at ``precision``, table-wise on each GPU in HBM: QR at
    each of qr_collisions, TT at the allowed ranks (trained tables, fp32 cores: offered at fp32 only), and (frozen
    tables, fp32 source only) int8 rows."""
    forms = [Compression.model_construct(qr=QRForm.model_construct(collisions=k, combine=t.compression.qr.combine),
                                         int8=False) for k in qr_collisions(t)]
    if t.compression is not None and t.compression.int8 and t.frozen and precision == t.dtype:
        forms.append(Compression.model_construct(qr=None, int8=True))
    if t.compression is not None and t.compression.tt is not None and not t.frozen and precision == "fp32":
        tt = TTForm.model_construct(ranks=tuple(t.compression.tt.ranks))
        forms.append(Compression.model_construct(qr=None, tt=tt, int8=False))
    return [_placement(table=t.name, sharding="table_wise", precision=precision, compression=form, shards=[
        _shard(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows, host_rows=0)])
        for form in forms for g in _first(topo.gpus, cfg.canonical)]


def all_options(topo: Topology, wl: Workload, cfg: OptionConfig = OptionConfig()) -> dict[str, list[Placement]]:
    """Candidate placements per table name."""
    return {t.name: table_options(t, topo, wl, cfg) for t in wl.tables}
