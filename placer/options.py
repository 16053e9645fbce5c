"""Candidate placements of every table: the menu the planner chooses from, each form's own options in the
registry's order (placer/forms: each sharding's ``options``, each compressed form's ``compressions``).

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

from placer.constraints import Rules
from placer.errors import SpecError
from placer.forms import table_wise
from placer.forms.base import first
from placer.forms.shardings import SHARDINGS
from placer.forms.storage import FORCED_FORMS, MENU_ORDER, force
from placer.node_local import node_local_options
from placer.plan import Placement
from placer.specs.workload import TableSpec, Workload
from placer.topology import Topology

DEFAULT_HOT_LEVELS = (1.0, 0.5, 0.25, 0.1, 0.05, 0.01, 0.0)


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


def precisions(t: TableSpec, cfg: OptionConfig) -> list[str]:
    """Storage precisions offered for a table: its own, plus fp16 and bf16 where the workload allows them
    (TableSpec.storage_precisions) and ``cfg.fp16`` (--no-fp16: no 16-bit storage the table does not have)."""
    return [p for p in t.storage_precisions() if cfg.fp16 or p == t.dtype]


def table_options(t: TableSpec, topo: Topology, wl: Workload, cfg: OptionConfig = OptionConfig(),
                  rules: Rules | None = None) -> list[Placement]:
    """Every candidate placement of one table: per precision, each sharding's options in the registry's order
    (placer/forms/shardings.py), then the compressed forms it allows; then the node-local variants; held to
    ``cfg.forced_form`` when one is forced; then only those the workload's constraints allow (``rules``: them
    compiled for ``topo``, placer/constraints.py; compiled here where not given)."""
    out: list[Placement] = []
    seen: dict[str, set] = {name: set() for name in SHARDINGS}  # per form, shared across precisions
    for prec in precisions(t, cfg):
        for name, form in SHARDINGS.items():
            out += form.options(t, topo, prec, cfg, seen[name])
        if cfg.compressed:
            out += compressed_options(t, topo, prec, cfg)
    if t.node_local and cfg.node_local:  # replicas of node0's intra-node options (placer/node_local.py)
        out += node_local_options(out, topo.nodes)
    out = force(out, t, cfg.forced_form) if cfg.forced_form else out
    if not wl.constraints.tables:
        return out
    return (rules if rules is not None else Rules.of(wl, topo)).allowed(out)


def compressed_options(t: TableSpec, topo: Topology, precision: str, cfg: OptionConfig) -> list[Placement]:
    """The compressed forms the workload allows for ``t`` at ``precision`` (each form's ``compressions``: QR at
    each of its collisions, int8 rows of a frozen table, TT at the allowed ranks of a trained fp32 table),
    table-wise on each GPU with every row in HBM."""
    forms = [c for f in MENU_ORDER for c in f.compressions(t, precision)]
    return [table_wise.placement(t, g, precision, t.rows, compression=c) for c in forms
            for g in first(topo.gpus, cfg.canonical)]


def all_options(topo: Topology, wl: Workload, cfg: OptionConfig = OptionConfig()) -> dict[str, list[Placement]]:
    """Candidate placements per table name (the constraints compiled once for all)."""
    rules = Rules.of(wl, topo) if wl.constraints.tables else None
    return {t.name: table_options(t, topo, wl, cfg, rules) for t in wl.tables}
