"""Loads and memory placed so far, kept incrementally: what every planner that places tables one at a time (the
baselines, stage 2 of the two-stage planner, its repacking and fill, the local tie-break) reads and updates.

LoadIndex numbers a model's (phase, resource) loads and memories densely, so an Accumulator keeps them as arrays
(callers may score many devices at once) and reads them by name through read-only views.
"""
from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from placer.cost import PHASES, Cost, CostModel


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
        self.group_ids: dict = {}  # fused group -> its number, given as groups are first met (group_id)

    def group_id(self, group) -> int:
        """A fused group's number (Accumulator.users_of reads the users of many at once)."""
        return self.group_ids.setdefault(group, len(self.group_ids))

    def phase(self, p: int) -> slice:
        return slice(p * self.width, (p + 1) * self.width)

    def arrays_of(self, cost: Cost) -> tuple:
        """(load indices, loads in s, memory indices, bytes, {phase: positions in the loads}) of ``cost``, what an
        Accumulator adds (Cost.indexed keeps them on the cost for this index)."""
        of, n = self.of, len(cost.loads)
        at = np.fromiter((of[k] for k in cost.loads), np.int64, n)
        values = np.fromiter(cost.loads.values(), np.float64, n)
        mem_at = np.fromiter((self.mem_of[m] for m in cost.memory), np.int64, len(cost.memory))
        mem_values = np.fromiter(cost.memory.values(), np.float64, len(cost.memory))
        phase_of = at // self.width
        phases = {int(p): np.flatnonzero(phase_of == p) for p in np.unique(phase_of)}
        return at, values, mem_at, mem_values, phases

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

    def __init__(self, model: CostModel, costs: Iterable[Cost] = ()):
        """``costs``: placements' costs held from the start, summed as simulate.total_cost sums a plan (every
        load, then each fused group's fixed costs once), so that the step time is the one predict() gives."""
        self.model = model
        self.index = index = load_index(model)
        self.load_array = np.zeros(len(index.keys))
        self.memory_array = np.zeros(len(index.mem_names))
        self.loads = _ArrayView(self.load_array, index.of, index.keys)
        self.memory = _ArrayView(self.memory_array, index.mem_of, index.mem_names)
        self._users = np.zeros(64, dtype=np.int64)  # placements added that use each fused group, by its number
        # (LoadIndex.group_id)
        base = model.base_cost
        total = Cost(loads=defaultdict(float, base.loads), once=dict(base.once))
        for cost in costs:
            total += cost
            self._count_users(cost, 1)
        for key, v in total.total_loads().items():
            self.load_array[index.of[key]] += v
        for m, b in total.memory.items():
            self.memory_array[index.mem_of[m]] += b
        self.phase_max = [float(self.load_array[index.phase(p)].max()) for p in range(len(PHASES))]

    def fits(self, cost: Cost) -> bool:
        at, mem, usable = self.index.mem_of, self.memory_array, self.index.usable
        return all(mem[at[m]] + b <= usable[at[m]] for m, b in cost.memory.items())

    def _effective(self, cost: Cost, adding: bool) -> Cost:
        """``cost`` with the fixed costs of the groups it opens (adding) or closes (removing) as loads."""
        flips = [g for g in cost.once if self.users(g) == (0 if adding else 1)]
        if not flips:
            return cost
        loads = dict(cost.loads.items())  # a packed cost's loads are a mapping built from its arrays
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
        self._count_users(cost, 1)
        for p, cols in phases.items():
            if (values[cols] < 0).any():  # a correction (a replica is not exchanged) may lower the maximum
                self.phase_max[p] = float(self.load_array[self.index.phase(p)].max())
            else:
                self.phase_max[p] = max(self.phase_max[p], float(self.load_array[at[cols]].max()))

    def remove(self, cost: Cost) -> None:
        """Take a placement's cost back out (phase maxima recomputed for the phases it touched)."""
        at, values, phases = self._shift(self._effective(cost, False), -1.0)
        self._count_users(cost, -1)
        for p, cols in phases.items():  # a load at the maximum left (or a correction was taken back): recompute
            if (values[cols] < 0).any() or \
                    (self.load_array[at[cols]] + values[cols] >= self.phase_max[p] * (1 - 1e-12)).any():
                self.phase_max[p] = float(self.load_array[self.index.phase(p)].max())

    def swap_delta(self, old: Cost, new: Cost) -> dict[int, float]:
        """{load index: seconds added} when ``old`` (a cost added) is replaced by ``new``: their own loads, and the
        fixed costs of each fused group that the swap opens or closes. Exact: nothing is added or taken back."""
        of = self.index.of
        delta: dict[int, float] = {}
        for k, v in old.loads.items():
            i = of[k]
            delta[i] = delta.get(i, 0.0) - v
        for k, v in new.loads.items():
            i = of[k]
            delta[i] = delta.get(i, 0.0) + v
        for g in dict.fromkeys([*old.once, *new.once]):  # in a fixed order: the sums are the same every run
            n0 = self.users(g)
            n1 = n0 - (g in old.once) + (g in new.once)
            if (n0 > 0) != (n1 > 0):
                sign = 1.0 if n1 > 0 else -1.0
                for k, v in (old.once[g] if g in old.once else new.once[g]).items():
                    i = of[k]
                    delta[i] = delta.get(i, 0.0) + sign * v
        return delta

    def phase_maxima_with(self, delta: dict[int, float]) -> list[float]:
        """Each phase's busiest load (s) with ``delta`` (swap_delta) applied, exactly (a load that falls is not
        kept at its old maximum)."""
        out = list(self.phase_max)
        if not delta:
            return out
        at = np.fromiter(delta.keys(), np.int64, len(delta))
        values = self.load_array[at] + np.fromiter(delta.values(), np.float64, len(delta))
        width = self.index.width
        for p in np.unique(at // width).tolist():
            sl = self.index.phase(p)
            seg = self.load_array[sl].copy()
            mine = at // width == p
            seg[at[mine] - sl.start] = values[mine]
            out[p] = float(seg.max())
        return out

    def replace(self, old: Cost, new: Cost) -> None:
        """``old`` (a cost added) replaced by ``new``: the loads moved by exactly swap_delta (so that what
        phase_maxima_with priced is what is kept), the memory and the groups' users with them."""
        delta = self.swap_delta(old, new)
        at = np.fromiter(delta.keys(), np.int64, len(delta))
        self.load_array[at] += np.fromiter(delta.values(), np.float64, len(delta))
        self._count_users(old, -1)
        self._count_users(new, 1)
        mem_of = self.index.mem_of
        for m, b in old.memory.items():
            self.memory_array[mem_of[m]] -= b
        for m, b in new.memory.items():
            self.memory_array[mem_of[m]] += b
        for p in np.unique(at // self.index.width).tolist():
            self.phase_max[p] = float(self.load_array[self.index.phase(p)].max())

    def _count_users(self, cost: Cost, sign: int) -> None:
        if cost.once:
            ids = [self.index.group_id(g) for g in cost.once]
            if max(ids) >= len(self._users):
                self._users = np.concatenate([self._users, np.zeros(max(ids) + 64, dtype=np.int64)])
            self._users[ids] += sign

    def users(self, group) -> int:
        """How many placements added use the fused group ``group``."""
        i = self.index.group_id(group)
        return int(self._users[i]) if i < len(self._users) else 0

    def users_of(self, ids: np.ndarray) -> np.ndarray:
        """How many placements added use each fused group of ``ids`` (numbers from LoadIndex.group_id)."""
        out = np.zeros(len(ids), dtype=np.int64)
        known = ids < len(self._users)
        out[known] = self._users[ids[known]]
        return out

    def busiest(self, phase: int) -> tuple[tuple[int, str], float]:
        """The (phase, resource) key with the largest load in ``phase``, and that load (s)."""
        sl = self.index.phase(phase)
        i = int(np.argmax(self.load_array[sl]))
        return self.index.keys[sl.start + i], float(self.load_array[sl.start + i])

    def _shift(self, cost: Cost, sign: float):
        """Add ``sign`` x the cost's loads and memory; returns (load indices, loads, {phase: positions})."""
        at, values, mem_at, mem_values, phases = cost.indexed(self.index)
        self.load_array[at] += sign * values  # a cost's keys are distinct
        if len(mem_at):
            self.memory_array[mem_at] += sign * mem_values
        return at, values, phases

    @property
    def step(self) -> float:
        """Step time so far without fixed latencies, seconds."""
        return sum(self.phase_max)


def packed(cost: Cost, index: LoadIndex) -> Cost:
    """``cost`` with its loads kept only as the arrays an Accumulator adds (about a sixth of the memory: a
    single-GPU table's cost on 128 GPUs has ~510 loads, ~80 KB as a dict, ~13 KB packed); its ``loads`` read
    them by name (one name by a linear search: the Accumulator reads them whole, and only where a group opens or
    closes). For costs kept to be added again and again (assign.Assigner.price)."""
    indexed = cost.indexed(index)
    return Cost(loads=_PackedLoads(index.keys, indexed[0], indexed[1]), memory=dict(cost.memory), once=cost.once,
                indexed_as=(index, indexed))


class _PackedLoads(Mapping):
    """Read-only loads by (phase, resource) over a packed cost's arrays (``at``: positions in ``keys``)."""

    def __init__(self, keys: list, at: np.ndarray, values: np.ndarray):
        self._keys, self._at, self._values = keys, at, values

    def __len__(self) -> int:
        return len(self._at)

    def __iter__(self):
        keys = self._keys
        return (keys[i] for i in self._at.tolist())

    def __getitem__(self, key):
        for i, v in zip(self._at.tolist(), self._values.tolist()):
            if self._keys[i] == key:
                return v
        raise KeyError(key)

    def items(self):
        keys = self._keys
        return [(keys[i], v) for i, v in zip(self._at.tolist(), self._values.tolist())]

    def values(self):
        return self._values.tolist()
