"""What a workload's constraints (specs/constraints.py) mean for placements: which options a table may take, which
plans break them, and the tables that must share a device set.

``Rules.of(wl, topo)`` compiles them against a machine (device patterns expanded to its devices; a pattern that
names no device is a SpecError naming the field). ``allows(p)`` / ``broken(p)`` judge one placement against every
entry that names its table; ``colocated_groups`` lists the groups of tables that must share one device set;
``plan_faults`` lists every fault of a whole plan (placements and co-location) for ``placer check``. The menu
(options.py) keeps only the options a table's rules allow; the ILP adds the co-location rows (ilp.py,
Problem.equal); the baselines repair what they place against them (planner/honour.py); HBM headroom is taken off
every GPU's usable memory by the cost model (CostModel.usable_memory).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from placer.errors import SpecError
from placer.forms import storage
from placer.forms.shardings import sharding_of
from placer.plan import Placement
from placer.specs.constraints import TableConstraint
from placer.units import GiB


def memory_class(p: Placement) -> str:
    """Where ``p`` keeps its rows, as constraints name it: host (CPU lookups), hbm (every row in HBM), uvm (every
    row off the GPU, read by it) or cached (hot rows in HBM, the rest off the GPU)."""
    if not sharding_of(p).on_gpus:
        return "host"
    if all(s.host_rows == 0 for s in p.shards):
        return "hbm"
    if all(s.hbm_rows == 0 for s in p.shards):
        return "uvm"
    return "cached"


def precision_of(p: Placement) -> str:
    """The precision of ``p``'s rows as constraints name it: int8 for the int8 form, else its storage precision."""
    return "int8" if storage.uses(p, "int8") else p.precision


def device_set(p: Placement) -> frozenset[str]:
    """The devices ``p``'s shards are on."""
    return frozenset(s.device for s in p.shards)


@dataclass(frozen=True)
class Rule:
    """One constraint entry compiled for a machine: ``where`` names it in messages ("constraints.tables[2]
    (user_side)"), ``tables`` the tables it names (workload order), ``devices`` its device patterns expanded (None:
    any device)."""

    index: int
    spec: TableConstraint
    tables: tuple[str, ...]
    devices: frozenset[str] | None

    @property
    def where(self) -> str:
        return f"constraints.tables[{self.index}]" + (f" ({self.spec.name})" if self.spec.name else "")

    @property
    def said(self) -> str:
        """Its fields in words: 'shardings row_wise; memory host' ('co-location' for a bare co-location)."""
        c = self.spec
        fields = [("shardings", c.shardings), ("memory", c.memory), ("devices", c.devices),
                  ("precisions", c.precisions)]
        out = [f"{k} {', '.join(v)}" for k, v in fields if v is not None]
        out += [f"{k} {v}" for k, v in (("min_shards", c.min_shards), ("max_shards", c.max_shards)) if v is not None]
        return "; ".join(out) or "co-location"

    def broken(self, p: Placement) -> str | None:
        """What of this rule ``p`` breaks, in words (None: nothing)."""
        c = self.spec
        if c.shardings is not None and p.sharding not in c.shardings:
            return f"sharding {p.sharding} is not among {', '.join(c.shardings)}"
        if c.memory is not None and memory_class(p) not in c.memory:
            return f"its rows live in {memory_class(p)} memory, not in {', '.join(c.memory)}"
        if self.devices is not None:
            off = sorted(device_set(p) - self.devices)
            if off:
                return f"it is on {', '.join(off[:3])}, not among the allowed devices ({', '.join(c.devices)})"
        if c.min_shards is not None and len(p.shards) < c.min_shards:
            return f"{len(p.shards)} shard(s), fewer than min_shards {c.min_shards}"
        if c.max_shards is not None and len(p.shards) > c.max_shards:
            return f"{len(p.shards)} shards, more than max_shards {c.max_shards}"
        if c.precisions is not None and precision_of(p) not in c.precisions:
            return f"precision {precision_of(p)} is not among {', '.join(c.precisions)}"
        return None


class Rules:
    """A workload's constraints compiled for a machine (module docstring)."""

    def __init__(self, entries: list[Rule], headroom_GiB: float):
        self.entries = entries  # every entry, in the workload's order
        self.by_table: dict[str, list[Rule]] = {}
        for rule in entries:
            for name in rule.tables:
                self.by_table.setdefault(name, []).append(rule)
        #: the co-located groups: (the entry, its tables)
        self.groups: list[tuple[Rule, tuple[str, ...]]] = [(r, r.tables) for r in entries if r.spec.colocate]
        self.headroom_GiB = headroom_GiB

    @classmethod
    def of(cls, wl, topo) -> "Rules":
        return cls([Rule(i, c, tuple(wl.constrained_tables(i)), _devices(c, i, topo, wl))
                    for i, c in enumerate(wl.constraints.tables)], wl.constraints.hbm_headroom_GiB)

    @classmethod
    def none(cls) -> "Rules":
        """No constraints: what the menu is without them."""
        return cls([], 0.0)

    @property
    def empty(self) -> bool:
        return not self.by_table and not self.headroom_GiB

    def broken(self, p: Placement) -> list[str]:
        """'constraints.tables[i]: what p breaks' for every rule of its table that ``p`` breaks."""
        out = []
        for rule in self.by_table.get(p.table, ()):
            why = rule.broken(p)
            if why:
                out.append(f"{rule.where}: {why}")
        return out

    def allows(self, p: Placement) -> bool:
        return all(rule.broken(p) is None for rule in self.by_table.get(p.table, ()))

    def allowed(self, options: list[Placement]) -> list[Placement]:
        """The options every rule of their table allows, in their order."""
        return [p for p in options if self.allows(p)] if self.by_table else options

    def broken_groups(self, placements: list[Placement]) -> list[tuple[Rule, dict[str, frozenset[str]]]]:
        """(entry, table -> device set) of every co-located group whose tables in ``placements`` are not on one
        device set."""
        where = {p.table: device_set(p) for p in placements}
        out = []
        for rule, names in self.groups:
            sets = {n: where[n] for n in names if n in where}
            if len(set(sets.values())) > 1:
                out.append((rule, sets))
        return out

    def colocation_faults(self, placements: list[Placement]) -> list[str]:
        """For every co-located group whose tables are not on one device set: which tables sit where."""
        out = []
        for rule, sets in self.broken_groups(placements):
            first = rule.tables[0]
            odd = next(n for n in rule.tables if n in sets and sets[n] != sets.get(first))
            out.append(f"{rule.where}: co-located tables on different devices ({first} on "
                       f"{_devices_text(sets.get(first))}, {odd} on {_devices_text(sets[odd])})")
        return out

    def keeps_groups(self, table: str, devices: frozenset[str], placed: dict[str, Placement],
                     only: Rule | None = None, skip: Rule | None = None) -> bool:
        """Whether ``table`` on ``devices`` shares the device set of the other tables of its co-located groups
        placed so far (``placed``: table -> placement; ``only``: that group alone; ``skip``: all groups but it)."""
        for rule, names in self.groups:
            if table not in names or (only is not None and rule is not only) or rule is skip:
                continue
            if any(n != table and n in placed and device_set(placed[n]) != devices for n in names):
                return False
        return True

    def plan_faults(self, placements: list[Placement]) -> list[tuple[int | None, str]]:
        """(placement index or None, message) of every constraint ``placements`` break."""
        out: list[tuple[int | None, str]] = [(i, f"table {p.table!r}: {why}") for i, p in enumerate(placements)
                                             for why in self.broken(p)]
        return out + [(None, why) for why in self.colocation_faults(placements)]

    def headroom_bytes(self) -> float:
        return self.headroom_GiB * GiB


def _devices(c: TableConstraint, index: int, topo, wl) -> frozenset[str] | None:
    """The devices constraint ``c`` allows on ``topo`` (None: any). A pattern with a '/' matches full names
    ('node0/gpu1', 'node1/*'); one without matches that local name on every node ('gpu1', 'host', 'gpu*')."""
    if c.devices is None:
        return None
    every = list(topo.gpus) + list(topo.hosts)
    out: set[str] = set()
    for j, pattern in enumerate(c.devices):
        full = pattern if "/" in pattern else f"*/{pattern}"
        hit = [d for d in every if fnmatch.fnmatchcase(d, full)]
        if not hit:
            raise SpecError(f"{pattern!r} names no GPU or host of {topo.spec.name} (its GPUs are "
                            f"{', '.join(topo.gpus[:4])}{', ...' if len(topo.gpus) > 4 else ''})",
                            file=wl.source_path, field=f"constraints.tables[{index}].devices[{j}]")
        out.update(hit)
    return frozenset(out)


def _devices_text(devices: frozenset[str] | None) -> str:
    names = sorted(devices or ())
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
