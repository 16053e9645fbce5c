"""The placement problem as plain arrays, independent of PuLP and of the specs (easy to test alone).

    choose one option per group (table)
    minimize   sum_p y_p + fixed
    subject to y_p >= base[p,r] + sum_o load[o,p,r] x_o + sum_f fixed[f,p,r] u_f   for every (phase p, resource r)
               u_f >= sum of x over one table's options that use fused group f  for every such table
               sum_o mem[o,m] x_o <= capacity[m]             for every memory m

A fused group's fixed costs (FixedGroup: the fixed part of its ops, e.g. one lookup launch however many tables
it serves) are paid once when any chosen option uses it: u_f is that indicator (at integer points, exactly 1 if
some chosen option uses f, else free to be 0).

The two-stage planner (stage1.py) adds rows that hold for every plan but that the relaxation or a rounding
would miss: peak levels (PeakLevels) and pigeonhole counts (CountRow); its MIP (stage1_mip.py) also counts the
fused groups that options on single devices open GPU by GPU (GroupCounts).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from placer.planner.types import RowKey, RowKind, row_kind


@dataclass
class PeakLevels:
    """A stronger form of "y_phase >= the peak of every chosen option" for the relaxation.

        y_phase >= floor + sum_j step_j w_j,    w_j >= sum of x over one group's options whose peak >= level j

    for every level j and group (w_j in [0, 1]). At integer points this says y_phase >= the highest level
    reached, which the plain per-group peak rows already imply; in the relaxation it stops many groups from
    each taking a fraction of a high-peak option at once. Levels are seconds. Written compactly: a chain
    w_j >= w_{j+1}, and a group's row at level j only where its options reaching j differ from those reaching
    j + 1 (the chain implies the others; the same relaxation with ~20x fewer rows, measured on
    production-856). ``members[j]`` holds those groups' option ids at level j."""

    phase: int
    floor_s: float
    steps_s: list[float]
    members: list[list[np.ndarray]]


@dataclass
class CountRow:
    """Pigeonhole on a class of ``slots`` identical resources (e.g. the 256 GPUs' host links):

        y_phase >= base + size * z + sum(spread_coefs * x[spread_ids]),   slots * z >= sum(counts * x[ids]),
        z integer >= 0

    ``counts[i]``: how many members of the class option ``ids[i]`` loads with at least ``size`` seconds; some
    member then carries ceil(total / slots) of those loads, on top of the class's smallest base load and the
    loads every member carries (options over all GPUs: ``spread``). Valid for every plan of the folded
    problem; the relaxation of the plain class average cannot see it."""

    phase: int
    base_s: float
    size_s: float
    slots: int
    ids: np.ndarray
    counts: np.ndarray
    spread_ids: np.ndarray
    spread_coefs: np.ndarray

    def value(self, x: np.ndarray) -> float:
        """The row's seconds at an integer point ``x``."""
        total = float(self.counts @ x[self.ids])
        return (self.base_s + self.size_s * np.ceil(total / self.slots - 1e-9)
                + float(self.spread_coefs @ x[self.spread_ids]))


@dataclass
class FixedGroup:
    """A fused group's fixed costs, charged once when a chosen option uses the group: ``charges`` maps
    (phase, resource) to seconds; ``members`` lists, per table that can use it, that table's option ids that
    do (a table picks one option, so each list's x sum to at most 1). ``key``: what the group stands for, if
    anyone needs to find it again (the two-stage planner: the (location, dtype, width) opened on every GPU)."""

    charges: dict[tuple[int, str], float]
    members: list[np.ndarray]
    key: tuple = ()

    def used(self, x: np.ndarray) -> float:
        """The indicator at ``x``: 1 or 0 at an integer point, the least value the rows allow at a fractional
        one (the largest table's share of the group)."""
        return max((float(x[ids].sum()) for ids in self.members), default=0.0)


@dataclass
class CountedGroup:
    """One type of fused group in GroupCounts: ``fixed_s``, its fixed cost on the stream of a GPU that opens it;
    ``ids``/``loads_s``: the options that open it on GPUs and what each puts on those GPUs' streams (s, summed
    over them); ``every``: the index in Problem.fixed_groups of the same type opened on every GPU (u), or -1;
    ``most_s``: the most load any choice puts there (each table's largest option, summed), s."""

    fixed_s: float
    ids: np.ndarray
    loads_s: np.ndarray
    every: int = -1
    most_s: float = float("inf")

    def needed(self, x: np.ndarray, level_s: float, slots: int, u: float) -> float:
        """The fewest GPUs that open the group beyond every GPU's (``u`` = 1: none) when no stream carries more
        than ``level_s`` of its own: its loads over the room one stream leaves, rounded up."""
        load = float(self.loads_s @ x[self.ids]) - slots * level_s * u
        return max(0.0, float(np.ceil(load / (level_s - self.fixed_s) - 1e-9)))


@dataclass
class GroupCounts:
    """The fused groups that options on single GPUs (or blocks of them) open GPU by GPU, counted in the class
    average of the GPUs' streams in one phase (``row``: that load row; ``slots`` GPUs in the class). Every
    GPU's stream carries the smallest base load ``base_s``, the loads every GPU carries alike (s_phase) and the
    fixed costs of the groups open on every GPU (the u of Problem.fixed_groups charged on ``row``); call the
    rest its own load. If no stream's own load exceeds ``level_s``, a group type t whose GPUs carry loads L_t
    (with its fixed cost f_t on each) is open on at least n_t >= L_t / (level_s - f_t) GPUs, whose fixed costs
    add f_t n_t / slots to the class average; else some stream carries more than the level:

        y_phase >= base + s_phase + sum_g charge_g u_g + level * over               over binary
        (level - f_t) n_t + slots * level * u_t + L_t^most * over >= L_t(x)         n_t integer >= 0, per type
        the class-average row gains + sum_t f_t n_t / slots

    Valid for every plan (over = 1 exactly when some stream's own load exceeds the level; u_t = 1: the type is
    open on every GPU and counted there). The level is a choice: low, and the first row makes 'over' cheap;
    high, and the counts are weak (stage1_groups.py)."""

    phase: int
    row: tuple[int, str]
    slots: int
    base_s: float
    level_s: float
    types: list[CountedGroup]

    def counted_s(self, x: np.ndarray, fixed_groups: list[FixedGroup]) -> float:
        """What the counts add to the class average at a choice ``x`` when no stream is over the level, s."""
        return sum(t.fixed_s * t.needed(x, self.level_s, self.slots, fixed_groups[t.every].used(x) if t.every >= 0
                                        else 0.0) for t in self.types) / self.slots

    def over_s(self, spread_s: float, on_every_s: float) -> float:
        """The least phase time when some stream's own load is over the level, given s_phase ``spread_s`` and the
        fixed groups' charges on ``row`` (``on_every_s``: Problem.fixed_charges), s."""
        return self.base_s + spread_s + on_every_s + self.level_s

    def value(self, x: np.ndarray, average_s: float, spread_s: float, on_every_s: float,
              fixed_groups: list[FixedGroup]) -> float:
        """The least phase time the rows allow at a choice ``x``, given the class-average row's value without
        the counts (``average_s``), s_phase and the fixed groups' charges on ``row``: the cheaper of 'over' and
        not."""
        return min(average_s + self.counted_s(x, fixed_groups), max(average_s, self.over_s(spread_s, on_every_s)))


@dataclass
class Problem:
    """Options are numbered 0..n-1; ``groups[i]`` lists the options of table i."""

    groups: list[list[int]]
    num_phases: int
    # (phase, resource) -> (option ids, seconds); base seconds of the same row. The resource: a name, or in the
    # two-stage planner's stage 1 a class name or a types.RowKey (a table's peak, stream or one exact resource)
    load_rows: dict[tuple[int, str | RowKey], tuple[np.ndarray, np.ndarray]]
    load_base: dict[tuple[int, str | RowKey], float]
    # memory -> (option ids, bytes); capacity in bytes
    mem_rows: dict[str, tuple[np.ndarray, np.ndarray]]
    mem_capacity: dict[str, float]
    fixed_s: float = 0.0
    labels: list[str] = field(default_factory=list)
    levels: list[PeakLevels] = field(default_factory=list)
    counts: list[CountRow] = field(default_factory=list)
    fixed_groups: list[FixedGroup] = field(default_factory=list)
    # Loads every member of a class carries alike, per phase: (option ids, seconds), summed as s_phase; the
    # load rows named in ``spread_rows`` read y_phase >= base + sum load x + s_phase (a device's own load on top
    # of what every device carries: the two-stage planner's per-table stream rows, stage1.py)
    spread: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    spread_rows: frozenset = frozenset()
    group_counts: list[GroupCounts] = field(default_factory=list)
    # Pairs of option-id sets whose chosen counts are equal: sum x[a] == sum x[b] (tables that must share a
    # device set, one pair per device set and neighbouring tables of the group: placer/constraints.py)
    equal: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def __post_init__(self):
        self._num_options = sum(len(g) for g in self.groups)

    @property
    def num_options(self) -> int:
        return self._num_options

    def objective(self, chosen: list[int]) -> float:
        """Step time (s) of a choice of one option per group, by the same formula as the simulator."""
        return float(self.phase_times(chosen).sum()) + self.fixed_s

    def phase_times(self, chosen: list[int] | np.ndarray) -> np.ndarray:
        """Per phase, the busiest row's seconds under a choice of one option per group (a list of option ids),
        or under a value of every option (an array of num_options values, e.g. a relaxation's)."""
        if isinstance(chosen, np.ndarray) and chosen.dtype.kind == "f" and len(chosen) == self.num_options:
            x = chosen
        else:
            x = np.zeros(self.num_options)
            x[chosen] = 1.0
        per_phase = np.zeros(self.num_phases)
        extra = self.fixed_charges(x)
        spread = self.spread_values(x)
        counted = {gc.row: gc for gc in self.group_counts}
        for key in self.load_rows:
            v = self._row_value(key, x, extra, spread)
            if key in counted:
                v = counted[key].value(x, v, spread[key[0]], extra.get(key, 0.0), self.fixed_groups)
            per_phase[key[0]] = max(per_phase[key[0]], v)
        for key in set(self.load_base) | set(extra):
            if key not in self.load_rows:
                v = self.load_base.get(key, 0.0) + extra.get(key, 0.0)
                per_phase[key[0]] = max(per_phase[key[0]], v)
        for row in self.counts:
            per_phase[row.phase] = max(per_phase[row.phase], row.value(x))
        return per_phase

    def fixed_charges(self, x: np.ndarray) -> dict[tuple[int, str], float]:
        """(phase, resource) -> the fixed groups' charges there at option values ``x``, s."""
        extra: dict[tuple[int, str], float] = defaultdict(float)
        for fg in self.fixed_groups:
            u = fg.used(x)
            if u:
                for key, v in fg.charges.items():
                    extra[key] += u * v
        return extra

    def load_row_value(self, key: tuple[int, str], x: np.ndarray) -> float:
        """One load row's seconds at option values ``x`` (its spread and fixed charges; no group counts)."""
        return self._row_value(key, x, self.fixed_charges(x), self.spread_values(x))

    def _row_value(self, key: tuple[int, str], x: np.ndarray, charges: dict[tuple[int, str], float],
                   spread: np.ndarray) -> float:
        """load_row_value, given the fixed charges (fixed_charges) and s_phase (spread_values) at ``x``."""
        ids, coef = self.load_rows[key]
        v = self.load_base.get(key, 0.0) + float(coef @ x[ids]) + charges.get(key, 0.0)
        return v + (spread[key[0]] if key in self.spread_rows else 0.0)

    def spread_values(self, x: np.ndarray) -> np.ndarray:
        """s_phase (seconds) at option values ``x``: the loads every member carries alike (``spread``)."""
        out = np.zeros(self.num_phases)
        for ph, (ids, coef) in self.spread.items():
            out[ph] = float(coef @ x[ids])
        return out

    def fits(self, chosen: list[int], slack: float = 1e-9) -> bool:
        x = np.zeros(self.num_options)
        x[chosen] = 1.0
        return (all(float(b @ x[ids]) <= self.mem_capacity[m] * (1 + slack) + 1
                    for m, (ids, b) in self.mem_rows.items())
                and all(float(x[a].sum()) == float(x[b].sum()) for a, b in self.equal))

    def simple_lower_bound(self) -> float:
        """A valid bound from resources alone: each table at its cheapest option on every (phase, resource)
        independently. Weak but never wrong, and cheap."""
        return float(self.phase_floors().sum()) + self.fixed_s

    def phase_floors(self) -> np.ndarray:
        """A lower bound on every phase's time (s) in any solution: on every row, its base plus each group's
        smallest coefficient there (0 for a group with an option off the row); the largest per phase."""
        floor = np.zeros(self.num_phases)
        for (ph, _), v in self.load_base.items():
            floor[ph] = max(floor[ph], v)
        group_of = np.empty(self.num_options, dtype=np.int64)
        sizes = np.array([len(g) for g in self.groups])
        for gi, g in enumerate(self.groups):
            group_of[g] = gi
        for (ph, name), (ids, v) in self.load_rows.items():
            g = group_of[ids]
            smallest = np.full(len(self.groups), np.inf)
            np.minimum.at(smallest, g, v)
            covered = np.bincount(g, minlength=len(self.groups)) == sizes  # every option of the group is on the row
            total = self.load_base.get((ph, name), 0.0) + float(smallest[covered].sum())
            floor[ph] = max(floor[ph], total)
        return floor

    def table_peaks(self) -> np.ndarray:
        """(phases, options): each option's coefficient in its group's table row (types.RowKind.TABLE) of that
        phase (its peak, as the two-stage planner writes them; 0 where it has none), seconds."""
        peaks = np.zeros((self.num_phases, self.num_options))
        for (ph, name), (ids, v) in self.load_rows.items():
            if row_kind(name) is RowKind.TABLE:
                peaks[ph, ids] = v
        return peaks


def build_problem(option_costs: list[list], base_cost, fixed_s: float, usable_memory: dict[str, float],
                  num_phases: int, labels: list[str] | None = None) -> Problem:
    """Assemble a Problem from per-table lists of cost.Cost objects (loads in s, group fixed costs, memory
    in bytes)."""
    groups: list[list[int]] = []
    load_cols: dict[tuple[int, str], tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    mem_cols: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    fixed: dict = {}  # group key -> (charges, {table index: option ids})
    oid = 0
    for ti, costs in enumerate(option_costs):
        group = []
        for c in costs:
            for key, charges in c.once.items():
                entry = fixed.setdefault(key, (charges, defaultdict(list)))
                entry[1][ti].append(oid)
            for key, v in c.loads.items():
                ids, vals = load_cols[key]
                ids.append(oid)
                vals.append(v)
            for m, b in c.memory.items():
                ids, vals = mem_cols[m]
                ids.append(oid)
                vals.append(b)
            group.append(oid)
            oid += 1
        groups.append(group)
    as_arrays = lambda d: {k: (np.asarray(i, dtype=np.int64), np.asarray(v, dtype=np.float64))
                           for k, (i, v) in d.items()}
    fixed_groups = [FixedGroup(dict(charges), [np.asarray(ids, dtype=np.int64) for ids in per_table.values()])
                    for charges, per_table in fixed.values()]
    return Problem(groups=groups, num_phases=num_phases, load_rows=as_arrays(load_cols),
                   load_base=dict(base_cost.total_loads()), mem_rows=as_arrays(mem_cols),
                   mem_capacity={m: usable_memory[m] for m in mem_cols}, fixed_s=fixed_s,
                   labels=labels or [], fixed_groups=fixed_groups)
