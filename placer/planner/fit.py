"""Hot-row levels that make big tables fit: the splits the default menu can miss.

The default hot-row levels (1, 0.5, 0.25, ...) split a table between HBM and host DRAM only at a few
fractions. A table bigger than one GPU's HBM may fit split at 0.42 and at none of those (HBM too small at 0.5,
host too small at 0.25). For each such table and each device group the menu uses (one GPU table-wise, one
node's GPUs row-wise, every GPU row-wise), this module finds the range of hot fractions whose shards fit the
empty machine's usable memory (bytes, from the cost model's buffers, so optimizer state, slot maps and
exchange buffers count) and offers its ends, plus one fraction shared by all big tables that keeps every
memory filled in proportion (several big tables fit together). Memory is linear in the fraction between 0 and
1 exclusive, so two priced probes give the range exactly; each level offered is checked by pricing it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from placer.cost import CostModel
from placer.forms import row_wise, table_wise
from placer.options import OptionConfig, precisions
from placer.plan import Placement
from placer.specs.workload import TableSpec

#: At most this many tables get their own levels (the largest; a bounded menu on workloads of 1000 tables).
MAX_TABLES = 64
#: A table gets levels when its footprint exceeds this share of the smallest GPU's usable memory, or when the
#: tables together exceed the GPUs' usable memory (then the largest tables holding 90% of the bytes do).
BIG_SHARE = 0.5
COVER = 0.9
#: Fractions are moved this far inside the range that fits (plus two rows per shard for rounding).
MARGIN = 1e-4


@dataclass(frozen=True)
class Split:
    """A hot-fraction range [lo, hi] that fits, for ``table`` at ``precision`` over ``gpus``."""

    table: str
    precision: str
    gpus: tuple[str, ...]
    lo: float
    hi: float

    def describe(self) -> str:
        where = "table-wise on " + self.gpus[0] if len(self.gpus) == 1 else f"row-wise over {len(self.gpus)} GPUs"
        return (f"{where} at {self.precision} with {self.hi:.1%} of its rows in HBM (the rest in host DRAM) "
                "would fit")


def _gpu_memories(model: CostModel) -> set[str]:
    return {model.topo.memory_of(g) for g in model.topo.gpus}


def footprint_bytes(model: CostModel, t: TableSpec) -> float:
    """Bytes of the table's rows and optimizer state at its smallest allowed precision."""
    prec = min(precisions(t, OptionConfig()), key=t.row_bytes)
    return t.size_bytes(prec) + model.state_factor[t.name] * t.rows * t.dim * 4


def groups(model: CostModel) -> list[tuple[str, ...]]:
    """Device groups the menu splits over: the GPU with the most usable memory, the node with the most GPUs
    (when it has several), every GPU (several nodes)."""
    topo, usable = model.topo, model.usable_memory
    out = [(max(topo.gpus, key=lambda g: usable[topo.memory_of(g)]),)]
    node = max(topo.nodes, key=lambda n: len(topo.gpus_of_node(n)))
    if len(topo.gpus_of_node(node)) > 1:
        out.append(tuple(topo.gpus_of_node(node)))
    if len(topo.nodes) > 1:
        out.append(tuple(topo.gpus))
    return out


def _probe(t: TableSpec, gpus: tuple[str, ...], prec: str, f: float) -> Placement | None:
    """The first shard of the split of ``t`` over ``gpus`` with fraction ``f`` of its rows in HBM."""
    if len(gpus) == 1:
        k = int(round(f * t.rows))
        return table_wise.placement(t, gpus[0], prec, k)
    return row_wise.placement(t, list(gpus), prec, f, first_only=True)


def _use(model: CostModel, t: TableSpec, gpus: tuple[str, ...], prec: str, f: float) -> tuple[float, float] | None:
    """(bytes in the first GPU's memory, bytes in its host's DRAM) of the split at fraction ``f``; the host
    carries the cold rows of every shard of the group on that host."""
    p = _probe(t, gpus, prec, f)
    if p is None:
        return None
    topo = model.topo
    hbm, host = topo.memory_of(gpus[0]), topo.memory_of(topo.host_of(gpus[0]))
    mem = model.placement_cost(p).memory
    on_host = sum(1 for g in gpus if topo.host_of(g) == topo.host_of(gpus[0]))
    return mem.get(hbm, 0.0), mem.get(host, 0.0) * on_host


def _capacity(model: CostModel, gpus: tuple[str, ...]) -> tuple[float, float]:
    topo, usable = model.topo, model.usable_memory
    return (min(usable[topo.memory_of(g)] for g in gpus),
            min(usable[topo.memory_of(topo.host_of(g))] for g in gpus))


def fitting_split(model: CostModel, t: TableSpec, gpus: tuple[str, ...], prec: str) -> Split | None:
    """The range of hot fractions at which ``t`` split over ``gpus`` fits the empty machine, or None."""
    a, b = _use(model, t, gpus, prec, 0.25), _use(model, t, gpus, prec, 0.75)
    if a is None or b is None:
        return None
    cap = _capacity(model, gpus)
    lo, hi = 0.0, 1.0
    for (m1, m2, c) in zip(a, b, cap):
        slope = (m2 - m1) / 0.5
        at0 = m1 - 0.25 * slope
        if slope > 0:
            hi = min(hi, (c - at0) / slope)
        elif slope < 0:
            lo = max(lo, (c - at0) / slope)
        elif at0 > c:
            return None
    rows = t.rows / len(gpus)
    pad = MARGIN + 2.0 / max(rows, 1.0)
    lo = 0.0 if lo <= 0 else lo + pad  # the ends 0 and 1 are default levels: no margin needed there
    hi = 1.0 if hi >= 1 else hi - pad
    if lo > hi:
        return None
    return Split(t.name, prec, gpus, lo, hi)


def shortfall(model: CostModel, t: TableSpec, gpus: tuple[str, ...], prec: str) -> tuple[float, float] | None:
    """(bytes needed, bytes held) by the memories of ``gpus`` and their hosts for the split of ``t`` over
    ``gpus`` with HBM as full as it can be (the split that needs least host DRAM); None if it has no split."""
    a, b = _use(model, t, gpus, prec, 0.25), _use(model, t, gpus, prec, 0.75)
    if a is None or b is None:
        return None
    cap = _capacity(model, gpus)
    slope = (b[0] - a[0]) / 0.5
    f = 1.0 if slope <= 0 else min(1.0, max(0.0, (cap[0] - (a[0] - 0.25 * slope)) / slope))
    use = _use(model, t, gpus, prec, f)
    hosts = len({model.topo.host_of(g) for g in gpus})
    return use[0] * len(gpus) + use[1] * hosts, max(cap[0], 0.0) * len(gpus) + max(cap[1], 0.0) * hosts


def fits(model: CostModel, t: TableSpec, gpus: tuple[str, ...], prec: str, f: float) -> bool:
    """Whether the split at fraction ``f`` fits the empty machine (priced, not estimated)."""
    use = _use(model, t, gpus, prec, f)
    return use is not None and all(u <= c for u, c in zip(use, _capacity(model, gpus)))


def big_tables(model: CostModel) -> list[TableSpec]:
    """Tables that may need a split the default levels miss (module docstring), largest first."""
    if not model.topo.gpus:
        return []
    usable = model.usable_memory
    gpu_mem = _gpu_memories(model)
    hbm_total = sum(max(usable[m], 0.0) for m in gpu_mem)
    smallest = min(usable[m] for m in gpu_mem)
    sizes = sorted(((footprint_bytes(model, t), t) for t in model.wl.tables), key=lambda s: -s[0])
    total = sum(s for s, _ in sizes)
    out, covered = [], 0.0
    for size, t in sizes:
        if size > BIG_SHARE * smallest or (total > hbm_total and covered < COVER * total):
            out.append(t)
            covered += size
    return out[:MAX_TABLES]


def with_fit_levels(model: CostModel, cfg: OptionConfig) -> OptionConfig:
    """``cfg`` with extra hot-row levels for the big tables, where they add a split that fits."""
    topo = model.topo
    if not topo.gpus or any(topo.memory_of(g) == topo.memory_of(topo.host_of(g)) for g in topo.gpus):
        return cfg  # unified memory: HBM and host are one RAM, the split does not change the fit
    tables = big_tables(model)
    if not tables:
        return cfg
    spans: dict[str, list[Split]] = {}
    for t in tables:
        for prec in precisions(t, cfg):
            for g in groups(model):
                s = fitting_split(model, t, g, prec)
                if s is not None:
                    spans.setdefault(t.name, []).append(s)
    shared = _shared_fraction(model, tables)
    extra = []
    for t in tables:
        levels: list[float] = []
        for s in spans.get(t.name, []):
            wanted = [s.hi, s.lo] + ([shared] if shared is not None and s.lo <= shared <= s.hi else [])
            for f in wanted:
                f = round(f, 6)
                if f not in levels and f not in cfg.hot_levels and fits(model, t, s.gpus, s.precision, f):
                    levels.append(f)
        if levels:
            extra.append((t.name, tuple(sorted(levels, reverse=True))))
    if not extra:
        return cfg
    return dataclasses.replace(cfg, table_levels=tuple(cfg.table_levels) + tuple(extra))


def _shared_fraction(model: CostModel, tables: list[TableSpec]) -> float | None:
    """One hot fraction for every big table that fills the GPUs' usable memory in proportion: the rows the
    big tables hold in HBM at that fraction, all together, fit the GPUs (estimated at the tables' own
    precision over the largest group; the small tables go where room is left; None when no fraction in (0, 1)
    does)."""
    gpus = groups(model)[-1]
    hbm_cap = sum(max(model.usable_memory[m], 0.0) for m in _gpu_memories(model))
    fixed, per_fraction = 0.0, 0.0
    for t in tables:
        a, b = _use(model, t, gpus, t.dtype, 0.25), _use(model, t, gpus, t.dtype, 0.75)
        if a is None or b is None:
            continue
        slope = (b[0] - a[0]) / 0.5 * len(gpus)
        fixed += a[0] * len(gpus) - 0.25 * slope
        per_fraction += slope
    if per_fraction <= 0:
        return None
    f = (hbm_cap - fixed) / per_fraction * (1 - 10 * MARGIN)
    return f if 0 < f < 1 else None
