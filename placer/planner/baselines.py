"""Baseline planners, priced by the same cost model as the ILP (DESIGN.md 'Baselines').

- host_cpu:    every table in host DRAM, CPU lookups (DLRM's hybrid default), balanced over hosts
- uvm:         every table in host DRAM read by the GPUs across PCIe, balanced over GPUs by lookups
- greedy_size: largest table first onto the GPU where the predicted step time grows least and it fits
               in HBM (TorchRec-style), else host_cpu
- round_robin: table i onto GPU i mod W in HBM where it fits, else host_cpu
- random:      a seeded random GPU among those where the table fits in HBM, else host_cpu
- fae:         tables spread over GPUs by lookups, then each GPU's free HBM filled with the hottest rows
               across its tables (FAE-style static hot-row cache); cold rows stay in host DRAM
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from placer.cost import PHASES, Cost, CostModel, slot_map_bytes
from placer.errors import InfeasibleError
from placer.options import hot_rows_levels
from placer.plan import Placement, Shard
from placer.specs.workload import TableSpec

BASELINES = ("host_cpu", "uvm", "greedy_size", "round_robin", "random", "fae")


class Accumulator:
    """Loads and memory placed so far, with the step time and fit of one more placement, incrementally."""

    def __init__(self, model: CostModel):
        self.model = model
        self.loads: dict[tuple[int, str], float] = defaultdict(float, model.base_cost.loads)
        self.memory: dict[str, float] = defaultdict(float)
        self.phase_max = [0.0] * len(PHASES)
        for (p, _), v in self.loads.items():
            self.phase_max[p] = max(self.phase_max[p], v)

    def fits(self, cost: Cost) -> bool:
        usable = self.model.usable_memory
        return all(self.memory[m] + b <= usable[m] for m, b in cost.memory.items())

    def step_with(self, cost: Cost) -> float:
        new_max = list(self.phase_max)
        for key, v in cost.loads.items():
            new_max[key[0]] = max(new_max[key[0]], self.loads[key] + v)
        return sum(new_max)

    def add(self, cost: Cost) -> None:
        for key, v in cost.loads.items():
            self.loads[key] += v
            self.phase_max[key[0]] = max(self.phase_max[key[0]], self.loads[key])
        for m, b in cost.memory.items():
            self.memory[m] += b

    def remove(self, cost: Cost) -> None:
        """Take a placement's cost back out (phase maxima recomputed for the phases it touched)."""
        stale = set()
        for key, v in cost.loads.items():
            before = self.loads[key]
            self.loads[key] = before - v
            if before >= self.phase_max[key[0]] * (1 - 1e-12):  # it was (one of) the busiest: recompute
                stale.add(key[0])
        for m, b in cost.memory.items():
            self.memory[m] -= b
        for p in stale:
            self.phase_max[p] = max((v for (ph, _), v in self.loads.items() if ph == p), default=0.0)

    @property
    def step(self) -> float:
        """Step time so far without fixed latencies, seconds."""
        return sum(self.phase_max)

    def bottlenecks(self) -> list[str]:
        """The busiest resource of every phase."""
        best: dict[int, tuple[float, str]] = {}
        for (p, r), v in self.loads.items():
            if v > best.get(p, (-1.0, ""))[0]:
                best[p] = (v, r)
        return [r for _, r in best.values()]


def _table_wise(t: TableSpec, gpu: str, hbm_rows: int, precision: str = "fp32") -> Placement:
    return Placement(table=t.name, sharding="table_wise", precision=precision, shards=[
        Shard(device=gpu, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=hbm_rows, host_rows=t.rows - hbm_rows)])


def _host(t: TableSpec, host: str, precision: str = "fp32") -> Placement:
    return Placement(table=t.name, sharding="host", precision=precision, shards=[
        Shard(device=host, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)])


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
    raise InfeasibleError(f"baseline: table {t.name!r} fits nowhere")


def host_cpu(model: CostModel, seed: int = 0) -> list[Placement]:
    acc = Accumulator(model)
    out = {}
    for t in _by_size(model):
        hosts = sorted(model.topo.hosts, key=lambda h: acc.memory[h])
        out[t.name] = _place_first_fit(model, acc, [_host(t, h, _precision(t)) for h in hosts], t)
    return [out[t.name] for t in model.wl.tables]


#: With more GPUs than this, the "GPU where the step time grows least" is found through the cluster's
#: symmetry (comparing the loads on each GPU's own resources; see planner/scale.py) instead of pricing
#: the table on every GPU.
SYMMETRIC_PICK_MIN_GPUS = 9


def _symmetric_picker(model: CostModel):
    if len(model.topo.gpus) < SYMMETRIC_PICK_MIN_GPUS:
        return None
    from placer.options import OptionConfig
    from placer.planner.scale import TwoStagePlanner
    from placer.planner.symmetry import Symmetry

    sym = Symmetry.of(model.topo)
    return TwoStagePlanner(model, sym, OptionConfig()) if sym else None


def _least_step_gpu(model: CostModel, acc: Accumulator, t: TableSpec, hbm_rows: int, picker) -> Placement | None:
    """Table-wise with ``hbm_rows`` in HBM on the GPU where the step time grows least and it fits."""
    if picker is not None:
        return picker.place(acc, _table_wise(t, model.topo.gpus[0], hbm_rows, _precision(t)))
    cands = sorted((_table_wise(t, g, hbm_rows, _precision(t)) for g in model.topo.gpus),
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
            raise InfeasibleError(f"baseline: table {t.name!r} fits nowhere")
        out[t.name] = p
    return [out[t.name] for t in model.wl.tables]


def _gpu_or_host(model: CostModel, acc: Accumulator, t: TableSpec, gpus: list[str]) -> Placement:
    cands = [_table_wise(t, g, t.rows, _precision(t)) for g in gpus]
    cands += [_host(t, h, _precision(t)) for h in sorted(model.topo.hosts, key=lambda h: acc.memory[h])]
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
    for g in gpus:
        mine = [t for t in model.wl.tables if owner[t.name] == g]
        steps = []  # (hits per byte, table, from_rows, to_rows, bytes)
        for t in mine:
            access = model.wl.access_models[t.name]
            rmw = t.row_bytes() + model.state_factor[t.name] * t.dim * 4
            ks = sorted(hot_rows_levels(t.rows, levels))
            for a, b in zip(ks, ks[1:]):
                hits = model.lookups_per_step(t.name) * (access.coverage(b / t.rows) - access.coverage(a / t.rows))
                steps.append((hits / ((b - a) * rmw), t, a, b, (b - a) * rmw))
        steps.sort(key=lambda s: -s[0])
        free = usable[g]
        for _, t, a, b, nbytes in steps:  # concave coverage: a table's steps come in order
            need = nbytes + slot_map_bytes(t.rows, b) - slot_map_bytes(t.rows, a)
            if hot[t.name] == a and need <= free:
                hot[t.name] = b
                free -= need
    out = [_table_wise(t, owner[t.name], hot[t.name], _precision(t)) for t in model.wl.tables]
    acc = Accumulator(model)
    for p, t in zip(out, model.wl.tables):
        c = model.placement_cost(p)
        if not acc.fits(c):
            full = [m for m, b in c.memory.items() if acc.memory[m] + b > usable[m]]
            raise InfeasibleError(f"fae: table {t.name!r} does not fit in {', '.join(full)}")
        acc.add(c)
    return out


def run_baseline(name: str, model: CostModel, seed: int = 0) -> list[Placement]:
    """Placements (one per table, workload order) of baseline ``name``; InfeasibleError if it cannot fit."""
    fn = {"host_cpu": host_cpu, "uvm": uvm, "greedy_size": greedy_size, "round_robin": round_robin,
          "random": random, "fae": fae}.get(name)
    if fn is None:
        raise ValueError(f"unknown baseline {name!r}")
    return fn(model, seed=seed)
