"""Random constraint sets for a workload on a machine: what validation/constraints_random.py solves.

A set is the workload's ``constraints`` block (placer/specs/constraints.py): 1-4 entries and, sometimes, HBM
headroom. Each entry names a random subset of the tables (1-3 names, or a glob made from a table's name: a prefix
``C1*``, a suffix ``*_users``, one character as ``?``, rarely ``*``) and draws each field with some probability
(FIELD_P) from its legal values on that machine:

- ``shardings``, ``memory``, ``precisions``: a random non-empty subset of placer's names;
- ``devices``: 1-3 patterns among the machine's full GPU and host names, local names (``gpu1``, ``host``) and
  globs (``node0/*``, ``gpu*``, ``node0/gpu[01]``, ``*``);
- ``min_shards``, ``max_shards``: 1 to the GPU count + 1 (min <= max);
- ``colocate``: 2-3 tables by name;
- ``hbm_headroom_GiB``: 0-20% of one GPU's HBM (GiB, to 0.1).

With probability ``bad_p`` one entry is made invalid on purpose (a device the machine lacks, min_shards above
max_shards, a co-location of one table): placer must refuse it as a SpecError naming the field; ``expect`` in the
returned draw says which.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from placer.forms.names import SHARDING_NAMES
from placer.specs.constraints import MEMORY_CLASSES, PRECISIONS
from placer.units import GiB

#: probability that an entry draws each field (chosen: about half of the sets stay feasible on the shipped pairs)
FIELD_P = {"name": 0.3, "shardings": 0.3, "memory": 0.3, "devices": 0.3, "min_shards": 0.15, "max_shards": 0.2,
           "precisions": 0.2, "colocate": 0.2}
#: probability of HBM headroom in a set (chosen)
HEADROOM_P = 0.3
#: most of one GPU's HBM the headroom takes (the brief: 0-20%)
HEADROOM_MAX_FRACTION = 0.2
#: probability of one invalid entry in a set (chosen: a few SpecErrors in a few hundred sets)
BAD_P = 0.05


@dataclass(frozen=True)
class Draw:
    """One random set: ``constraints`` (the workload's block, as YAML data) and ``expect``: None, or the field
    path a SpecError must name (an invalid entry drawn on purpose)."""

    constraints: dict
    expect: str | None = None


def _subset(rng: random.Random, values) -> list:
    k = rng.randint(1, len(values))
    return sorted(rng.sample(list(values), k), key=list(values).index)


def table_glob(rng: random.Random, name: str) -> str:
    """A glob that matches ``name`` (and maybe others): a prefix, a suffix, one character as '?', or '*'."""
    roll = rng.random()
    if roll < 0.05 or len(name) < 2:
        return "*"
    if roll < 0.55:
        return name[:rng.randint(1, len(name) - 1)] + "*"
    if roll < 0.8:
        return "*" + name[rng.randint(1, len(name) - 1):]
    i = rng.randrange(len(name))
    return name[:i] + "?" + name[i + 1:]


def _tables(rng: random.Random, names: list[str]) -> list[str]:
    if rng.random() < 0.5:
        return rng.sample(names, rng.randint(1, min(3, len(names))))
    out = [table_glob(rng, rng.choice(names))]
    if rng.random() < 0.2:
        out.append(rng.choice(names))
    return out


def device_patterns(topo) -> list[str]:
    """Every pattern a ``devices`` entry may draw on ``topo``: full names, local names and globs."""
    full = list(topo.gpus) + list(topo.hosts)
    local = sorted({d.split("/", 1)[1] for d in full})
    nodes = sorted({d.split("/", 1)[0] for d in full})
    globs = [f"{n}/*" for n in nodes] + ["gpu*", "*", f"{nodes[0]}/gpu[01]", "*/gpu?"]
    return full + local + globs


def _devices(rng: random.Random, topo) -> list[str]:
    patterns = device_patterns(topo)
    return rng.sample(patterns, rng.randint(1, min(3, len(patterns))))


def _shards(rng: random.Random, entry: dict, n_gpus: int) -> None:
    top = n_gpus + 1
    if rng.random() < FIELD_P["min_shards"]:
        entry["min_shards"] = rng.randint(1, top)
    if rng.random() < FIELD_P["max_shards"]:
        entry["max_shards"] = rng.randint(entry.get("min_shards", 1), top)


def draw_entry(rng: random.Random, names: list[str], topo) -> dict:
    """One entry of ``constraints.tables``, its fields drawn (module docstring)."""
    entry: dict = {}
    if rng.random() < FIELD_P["name"]:
        entry["name"] = f"g{rng.randrange(100)}"
    if len(names) >= 2 and rng.random() < FIELD_P["colocate"]:
        entry["tables"] = rng.sample(names, rng.randint(2, min(3, len(names))))
        entry["colocate"] = True
    else:
        entry["tables"] = _tables(rng, names)
    if rng.random() < FIELD_P["shardings"]:
        entry["shardings"] = _subset(rng, SHARDING_NAMES)
    if rng.random() < FIELD_P["memory"]:
        entry["memory"] = _subset(rng, MEMORY_CLASSES)
    if rng.random() < FIELD_P["devices"]:
        entry["devices"] = _devices(rng, topo)
    _shards(rng, entry, len(topo.gpus))
    if rng.random() < FIELD_P["precisions"]:
        entry["precisions"] = _subset(rng, PRECISIONS)
    return entry


def _spoil(rng: random.Random, entries: list[dict], names: list[str], topo) -> str:
    """Make one entry invalid; the field path the SpecError must name."""
    i = rng.randrange(len(entries))
    entry, roll = entries[i], rng.random()
    if roll < 0.4:
        entry["devices"] = [f"gpu{len(topo.gpus) + 7}"]
        return f"constraints.tables[{i}].devices[0]"
    if roll < 0.7:
        entry["min_shards"], entry["max_shards"] = 3, 2
        return f"constraints.tables[{i}]"
    entry["tables"], entry["colocate"] = [rng.choice(names)], True
    return f"constraints.tables[{i}].colocate"


def draw_set(rng: random.Random, wl, topo, bad_p: float = BAD_P) -> Draw:
    """A random constraint set for workload ``wl`` on ``topo`` (module docstring)."""
    names = [t.name for t in wl.tables]
    entries = [draw_entry(rng, names, topo) for _ in range(rng.randint(1, 4))]
    expect = _spoil(rng, entries, names, topo) if rng.random() < bad_p else None
    out: dict = {}
    if topo.gpus and rng.random() < HEADROOM_P:
        hbm = topo.memories[topo.memory_of(topo.gpus[0])].capacity_bytes / GiB
        out["hbm_headroom_GiB"] = round(rng.uniform(0, HEADROOM_MAX_FRACTION) * hbm, 1)
    out["tables"] = entries
    return Draw(out, expect)
