"""Baseline planners, priced by the same cost model as the ILP (docs/design.md 'Baselines').

- host_cpu:    every table in host DRAM, CPU lookups (DLRM's hybrid default), balanced over hosts
- uvm:         every table in host DRAM read by the GPUs across PCIe, balanced over GPUs by lookups
- greedy_size: largest table first (by bytes), whole, into HBM on the GPU where the predicted step time
               grows least and it fits, else host_cpu (a size-ordered greedy; not TorchRec's planner, which
               is the separate ``torchrec`` method)
- round_robin: table i onto GPU i mod W in HBM where it fits, else host_cpu
- random:      a seeded random GPU among those where the table fits in HBM, else host_cpu
- fae:         tables spread over GPUs by lookups, then each GPU's free HBM filled with the hottest rows
               across its tables (FAE-style static hot-row cache); cold rows stay in host DRAM
- torchrec:    (EXTERNAL, when torchrec is installed) TorchRec's own EmbeddingShardingPlanner on the same
               machine and workload, its plan imported (placer/torchrec_io/planner.py)
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from placer.cost import CostModel
from placer.errors import InfeasibleError
from placer.forms import host, table_wise
from placer.forms.tiers import hot_rows_levels
from placer.options import OptionConfig
from placer.plan import Placement
from placer.planner.accumulator import Accumulator
from placer.planner.assign import Assigner
from placer.planner.constrained import honour
from placer.planner.context import Context
from placer.planner.symmetry import Symmetry
from placer.specs.workload import TableSpec
from placer.units import GiB, fmt_bytes

BASELINES = ("host_cpu", "uvm", "greedy_size", "round_robin", "random", "fae")
#: Planners outside placer, run when installed (placer/torchrec_io/planner.py): not in BASELINES, so the ILP
#: does not run them for its warm start (importing TorchRec alone takes ~2 s)
EXTERNAL = ("torchrec",)


def _precision(t: TableSpec) -> str:
    return t.dtype


def _by_size(model: CostModel) -> list[TableSpec]:
    return sorted(model.wl.tables, key=lambda t: (-t.size_bytes(), t.name))


def _place_first_fit(model: CostModel, acc: Accumulator, candidates: list[Placement], t: TableSpec) -> Placement:
    for p in candidates:
        c = model.placement_cost(p)
        if acc.fits(c):
            acc.add(c)
            return p
    raise nowhere(model, acc, t, candidates)


def nowhere(model: CostModel, acc: Accumulator, t: TableSpec, candidates: list[Placement],
            method: str | None = None) -> InfeasibleError:
    """Why a baseline cannot place ``t``: how big it is (bytes with optimizer state, in GiB), the largest
    free memory left, and that the baseline places whole tables where the ILP would split them."""
    free = {m: acc.index.usable[i] - acc.memory_array[i] for m, i in acc.index.mem_of.items()}
    m = max(free, key=free.get)
    size = t.size_bytes() + model.state_factor[t.name] * t.rows * t.dim * 4
    need = min((sum(model.placement_cost(p).memory.values()) for p in candidates), default=size)
    kinds = sorted({p.sharding.replace("_", "-") for p in candidates}) or ["whole-table"]
    return InfeasibleError(
        f"{method or 'baseline'}: table {t.name!r} ({t.rows:,} rows x {t.dim}, {size / GiB:,.1f} GiB with "
        f"optimizer state; {need / GiB:,.1f} GiB with its buffers as {'/'.join(kinds)}) fits in no memory "
        f"left: the largest free memory is {m} with {max(free[m], 0.0) / GiB:,.1f} GiB{_short(model, free, candidates)}"
        ". This baseline places whole tables; the ilp method also splits them over GPUs and host DRAM.")


def _short(model: CostModel, free: dict[str, float], candidates: list[Placement]) -> str:
    """'; as host on node0/host it needs 16.0 MiB more in node0/gpu0 (0 B free)': the memory the candidate
    closest to fitting lacks (a table's buffers may need room on a GPU that whole tables filled)."""
    best = None
    for p in candidates:
        over = {m: b - max(free.get(m, 0.0), 0.0) for m, b in model.placement_cost(p).memory.items()
                if b > free.get(m, 0.0)}
        if over and (best is None or sum(over.values()) < sum(best[1].values())):
            best = (p, over)
    if best is None:
        return ""
    p, over = best
    m = max(over, key=over.get)
    return (f"; as {p.label()} it needs {fmt_bytes(over[m])} more in {m} "
            f"({fmt_bytes(max(free.get(m, 0.0), 0.0))} free)")


def host_cpu(model: CostModel, seed: int = 0) -> list[Placement]:
    acc = Accumulator(model)
    out = {}
    for t in _by_size(model):
        hosts = sorted(model.topo.hosts, key=lambda h: acc.memory[h])
        out[t.name] = _place_first_fit(model, acc, [host.placement(t, h, _precision(t)) for h in hosts], t)
    return [out[t.name] for t in model.wl.tables]


#: With more GPUs than this, the "GPU where the step time grows least" is found through the cluster's
#: symmetry (comparing the loads on each GPU's own resources, as stage 2 of the two-stage planner does:
#: planner/assign.py) instead of pricing the table on every GPU.
SYMMETRIC_PICK_MIN_GPUS = 9


def _symmetric_picker(model: CostModel) -> Assigner | None:
    if len(model.topo.gpus) < SYMMETRIC_PICK_MIN_GPUS:
        return None
    sym = Symmetry.of(model.topo)
    return Assigner(Context.of(model, sym, OptionConfig())) if sym else None


def _least_step_gpu(model: CostModel, acc: Accumulator, t: TableSpec, hbm_rows: int, picker) -> Placement | None:
    """Table-wise with ``hbm_rows`` in HBM on the GPU where the step time grows least and it fits."""
    if picker is not None:
        return picker.place(acc, table_wise.placement(t, model.topo.gpus[0], _precision(t), hbm_rows))
    cands = sorted((table_wise.placement(t, g, _precision(t), hbm_rows) for g in model.topo.gpus),
                   key=lambda p: acc.step_with(model.placement_cost(p)))
    for p in cands:
        c = model.placement_cost(p)
        if acc.fits(c):
            acc.add(c)
            return p
    return None


def uvm(model: CostModel, seed: int = 0) -> list[Placement]:
    acc = Accumulator(model)
    picker = _symmetric_picker(model)
    out = {}
    for t in _by_size(model):
        p = _least_step_gpu(model, acc, t, 0, picker)
        if p is None:
            raise nowhere(model, acc, t, [table_wise.placement(t, model.topo.gpus[0], _precision(t), 0)], "uvm")
        out[t.name] = p
    return [out[t.name] for t in model.wl.tables]


def _gpu_or_host(model: CostModel, acc: Accumulator, t: TableSpec, gpus: list[str]) -> Placement:
    cands = [table_wise.placement(t, g, _precision(t), t.rows) for g in gpus]
    cands += [host.placement(t, h, _precision(t)) for h in sorted(model.topo.hosts, key=lambda h: acc.memory[h])]
    return _place_first_fit(model, acc, cands, t)


def greedy_size(model: CostModel, seed: int = 0) -> list[Placement]:
    acc = Accumulator(model)
    picker = _symmetric_picker(model)
    out = {}
    for t in _by_size(model):
        p = _least_step_gpu(model, acc, t, t.rows, picker)
        out[t.name] = p if p is not None else _gpu_or_host(model, acc, t, [])
    return [out[t.name] for t in model.wl.tables]


def round_robin(model: CostModel, seed: int = 0) -> list[Placement]:
    acc = Accumulator(model)
    gpus = model.topo.gpus
    out = []
    for i, t in enumerate(model.wl.tables):
        order = gpus[i % len(gpus):] + gpus[:i % len(gpus)]
        out.append(_gpu_or_host(model, acc, t, order))
    return out


def random(model: CostModel, seed: int = 0) -> list[Placement]:
    rng = np.random.default_rng(seed)
    acc = Accumulator(model)
    out = []
    for t in model.wl.tables:
        order = list(rng.permutation(model.topo.gpus))
        out.append(_gpu_or_host(model, acc, t, [str(g) for g in order]))
    return out


def fae(model: CostModel, seed: int = 0, levels=(1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01, 0.005, 0.001, 0.0)):
    """Spread tables over GPUs by lookup bytes; fill each GPU's HBM with the rows of highest hit-per-byte."""
    gpus = model.topo.gpus
    load = {g: 0.0 for g in gpus}
    owner = {}
    for t in sorted(model.wl.tables, key=lambda t: -model.lookups_per_step(t.name) * t.dim):
        g = min(gpus, key=lambda g: (load[g], gpus.index(g)))
        owner[t.name] = g
        load[g] += model.lookups_per_step(t.name) * t.dim
    usable = model.usable_memory
    hot = {t.name: 0 for t in model.wl.tables}
    held_at_zero: dict[str, float] = defaultdict(float)  # every table with no row in HBM: outputs, workspace...
    for t in model.wl.tables:
        for b in model.builder.placement_buffers(table_wise.placement(t, owner[t.name], _precision(t), 0)):
            held_at_zero[b.memory] += b.bytes
    free = {m: usable[m] - held_at_zero[m] for m in usable}  # GPUs of a unified-memory node share one
    for g in gpus:
        mine = [t for t in model.wl.tables if owner[t.name] == g]
        mem = model.topo.memory_of(g)

        def held(t, k, g=g, mem=mem) -> float:  # bytes the table holds in this GPU's memory with k rows in HBM
            return sum(b.bytes for b in model.builder.placement_buffers(table_wise.placement(t, g, _precision(t), k))
                       if b.memory == mem)
        steps = []  # (hits per byte, table, from_rows, to_rows)
        for t in mine:
            access = model.wl.access_models[t.name]
            rmw = t.row_bytes() + model.state_factor[t.name] * t.dim * 4
            ks = sorted(hot_rows_levels(t.rows, levels))
            for a, b in zip(ks, ks[1:]):
                hits = model.lookups_per_step(t.name) * (access.coverage(b / t.rows) - access.coverage(a / t.rows))
                steps.append((hits / ((b - a) * rmw), t, a, b))
        steps.sort(key=lambda s: -s[0])
        for _, t, a, b in steps:  # concave coverage: a table's steps come in order
            if hot[t.name] == a:
                need = held(t, b) - held(t, a)  # rows, and a split's second member's buffers
                if need <= free[mem]:
                    hot[t.name] = b
                    free[mem] -= need
    out = [table_wise.placement(t, owner[t.name], _precision(t), hot[t.name]) for t in model.wl.tables]
    acc = Accumulator(model)
    for p, t in zip(out, model.wl.tables):
        c = model.placement_cost(p)
        if not acc.fits(c):
            full = [m for m, b in c.memory.items() if acc.memory[m] + b > usable[m]]
            raise InfeasibleError(
                f"fae: table {t.name!r} ({t.size_bytes() / GiB:,.1f} GiB) does not fit in "
                + ", ".join(f"{m} (needs {c.memory[m] / GiB:,.1f} GiB, {max(usable[m] - acc.memory[m], 0.0) / GiB:,.1f}"
                            " GiB free)" for m in full)
                + ". FAE keeps each table's cold rows in its GPU's host DRAM; the ilp method also splits tables.")
        acc.add(c)
    return out


def run_baseline(name: str, model: CostModel, seed: int = 0) -> list[Placement]:
    """Placements (one per table, workload order) of baseline ``name``; InfeasibleError if it cannot fit."""
    if name == "torchrec":  # TorchRec's EmbeddingShardingPlanner (TorchRecUnavailable / TorchRecPlannerError)
        from placer.torchrec_io.planner import torchrec_plan

        return torchrec_plan(model).placements
    fn = {"host_cpu": host_cpu, "uvm": uvm, "greedy_size": greedy_size, "round_robin": round_robin,
          "random": random, "fae": fae}.get(name)
    if fn is None:
        raise ValueError(f"unknown baseline {name!r}")
    try:
        return honour(model, name, fn(model, seed=seed))  # repaired where it breaks a constraint (constrained.py)
    except InfeasibleError as exc:
        text = str(exc)
        if text.startswith("baseline:"):
            raise InfeasibleError(name + text[len("baseline"):]) from None
        raise
