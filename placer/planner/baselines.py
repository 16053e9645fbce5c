"""Baseline planners, priced by the same cost model as the ILP (DESIGN.md 'Baselines').

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

import weakref
from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from placer.cost import PHASES, Cost, CostModel
from placer.errors import InfeasibleError
from placer.options import hot_rows_levels
from placer.plan import Placement, Shard
from placer.specs.workload import TableSpec
from placer.units import GiB

BASELINES = ("host_cpu", "uvm", "greedy_size", "round_robin", "random", "fae")
#: Planners outside placer, run when installed (placer/torchrec_io/planner.py): not in BASELINES, so the ILP
#: does not run them for its warm start (importing TorchRec alone takes ~2 s)
EXTERNAL = ("torchrec",)


class LoadIndex:
    """Every (phase, resource) load of a model numbered densely, phase by phase (phase p holds
    ``p * width ... (p + 1) * width - 1``), and every memory; with the memories' usable bytes."""

    def __init__(self, model: CostModel):
        names = list(model.topo.resources)
        self.width = len(names)
        self.keys = [(p, r) for p in range(len(PHASES)) for r in names]
        self.of = {key: i for i, key in enumerate(self.keys)}
        self.mem_names = list(model.usable_memory)
        self.mem_of = {m: i for i, m in enumerate(self.mem_names)}
        self.usable = np.array([model.usable_memory[m] for m in self.mem_names], dtype=np.float64)

    def phase(self, p: int) -> slice:
        return slice(p * self.width, (p + 1) * self.width)


_INDEXES: "weakref.WeakKeyDictionary[CostModel, LoadIndex]" = weakref.WeakKeyDictionary()


def load_index(model: CostModel) -> LoadIndex:
    """The model's LoadIndex (built once per model)."""
    if model not in _INDEXES:
        _INDEXES[model] = LoadIndex(model)
    return _INDEXES[model]


class _ArrayView(Mapping):
    """Read-only dict view of an Accumulator array: name -> value (0 for a name never loaded)."""

    def __init__(self, values: np.ndarray, of: dict, names: list):
        self._values, self._of, self._names = values, of, names

    def __getitem__(self, key) -> float:
        return float(self._values[self._of[key]])

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class Accumulator:
    """Loads (s) and memory (bytes) placed so far, with the step time and fit of one more placement,
    incrementally. Kept as arrays numbered by ``index`` (``load_array``, ``memory_array``: callers may score
    many devices at once); ``loads`` and ``memory`` read them by name. A fused group's fixed costs
    (``Cost.once``) are in the loads while at least one placement added uses the group."""

    def __init__(self, model: CostModel):
        self.model = model
        self.index = index = load_index(model)
        self.load_array = np.zeros(len(index.keys))
        self.memory_array = np.zeros(len(index.mem_names))
        self.loads = _ArrayView(self.load_array, index.of, index.keys)
        self.memory = _ArrayView(self.memory_array, index.mem_of, index.mem_names)
        self.group_users: dict = {}  # fused group -> placements added that use it
        for key, v in model.base_cost.total_loads().items():
            self.load_array[index.of[key]] += v
        self.phase_max = [float(self.load_array[index.phase(p)].max()) for p in range(len(PHASES))]

    def fits(self, cost: Cost) -> bool:
        at, mem, usable = self.index.mem_of, self.memory_array, self.index.usable
        return all(mem[at[m]] + b <= usable[at[m]] for m, b in cost.memory.items())

    def _effective(self, cost: Cost, adding: bool) -> Cost:
        """``cost`` with the fixed costs of the groups it opens (adding) or closes (removing) as loads."""
        flips = [g for g in cost.once if self.group_users.get(g, 0) == (0 if adding else 1)]
        if not flips:
            return cost
        loads = dict(cost.loads)
        for g in flips:
            for key, v in cost.once[g].items():
                loads[key] = loads.get(key, 0.0) + v
        return Cost(loads=loads, memory=cost.memory)

    def step_with(self, cost: Cost) -> float:
        """The step time with ``cost`` added (a negative correction is not let lower a phase's maximum here:
        an upper estimate for such options, exact for all others)."""
        new_max = list(self.phase_max)
        for key, v in self._effective(cost, True).loads.items():
            new_max[key[0]] = max(new_max[key[0]], self.loads[key] + v)
        return sum(new_max)

    def add(self, cost: Cost) -> None:
        at, values, phases = self._shift(self._effective(cost, True), 1.0)
        for g in cost.once:
            self.group_users[g] = self.group_users.get(g, 0) + 1
        for p, cols in phases.items():
            if (values[cols] < 0).any():  # a correction (a replica is not exchanged) may lower the maximum
                self.phase_max[p] = float(self.load_array[self.index.phase(p)].max())
            else:
                self.phase_max[p] = max(self.phase_max[p], float(self.load_array[at[cols]].max()))

    def remove(self, cost: Cost) -> None:
        """Take a placement's cost back out (phase maxima recomputed for the phases it touched)."""
        at, values, phases = self._shift(self._effective(cost, False), -1.0)
        for g in cost.once:
            self.group_users[g] -= 1
        for p, cols in phases.items():  # a load at the maximum left (or a correction was taken back): recompute
            if (values[cols] < 0).any() or \
                    (self.load_array[at[cols]] + values[cols] >= self.phase_max[p] * (1 - 1e-12)).any():
                self.phase_max[p] = float(self.load_array[self.index.phase(p)].max())

    def busiest(self, phase: int) -> tuple[tuple[int, str], float]:
        """The (phase, resource) key with the largest load in ``phase``, and that load (s)."""
        sl = self.index.phase(phase)
        i = int(np.argmax(self.load_array[sl]))
        return self.index.keys[sl.start + i], float(self.load_array[sl.start + i])

    def _shift(self, cost: Cost, sign: float):
        """Add ``sign`` x the cost's loads and memory; returns (load indices, loads, {phase: positions})."""
        of, n = self.index.of, len(cost.loads)
        at = np.fromiter((of[k] for k in cost.loads), np.int64, n)
        values = np.fromiter(cost.loads.values(), np.float64, n)
        self.load_array[at] += sign * values  # a cost's keys are distinct
        if cost.memory:
            mem_of = self.index.mem_of
            self.memory_array[[mem_of[m] for m in cost.memory]] += sign * np.fromiter(
                cost.memory.values(), np.float64, len(cost.memory))
        phase_of = at // self.index.width
        phases = {int(p): np.flatnonzero(phase_of == p) for p in np.unique(phase_of)}
        return at, values, phases

    @property
    def step(self) -> float:
        """Step time so far without fixed latencies, seconds."""
        return sum(self.phase_max)


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
        f"left: the largest free memory is {m} with {max(free[m], 0.0) / GiB:,.1f} GiB. This baseline places "
        "whole tables; the ilp method also splits them over GPUs and host DRAM.")


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
            raise nowhere(model, acc, t, [_table_wise(t, model.topo.gpus[0], 0, _precision(t))], "uvm")
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
    held_at_zero: dict[str, float] = defaultdict(float)  # every table with no row in HBM: outputs, workspace...
    for t in model.wl.tables:
        for b in model.builder.placement_buffers(_table_wise(t, owner[t.name], 0, _precision(t))):
            held_at_zero[b.memory] += b.bytes
    free = {m: usable[m] - held_at_zero[m] for m in usable}  # GPUs of a unified-memory node share one
    for g in gpus:
        mine = [t for t in model.wl.tables if owner[t.name] == g]
        mem = model.topo.memory_of(g)

        def held(t, k, g=g, mem=mem) -> float:  # bytes the table holds in this GPU's memory with k rows in HBM
            return sum(b.bytes for b in model.builder.placement_buffers(_table_wise(t, g, k, _precision(t)))
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
    out = [_table_wise(t, owner[t.name], hot[t.name], _precision(t)) for t in model.wl.tables]
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
        return fn(model, seed=seed)
    except InfeasibleError as exc:
        text = str(exc)
        if text.startswith("baseline:"):
            raise InfeasibleError(name + text[len("baseline"):]) from None
        raise
