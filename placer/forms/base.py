"""What a placement form is, as data: the two kinds of form a placement combines.

A **sharding** (``Placement.sharding``) says how a table's rows and columns are cut into shards and which devices
hold them; a **storage form** says how the rows are kept (compressed QR / TT / int8 rows, a node-local replica
per node). Each form is one module of placer/forms/ that builds one of these objects; shardings.py and storage.py
list them, and the rest of placer asks the registry (``sharding_of(p).whole_copies``) instead of testing the form's
name. These classes import nothing of placer's plan or cost model, so any module may import them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class ShardingForm:
    """One sharding: its name in plan files, what its shards are, and the properties the cost model, the
    planner, the runner and the TorchRec mapping ask of it.

    ``family``: the devices a planner kind of it moves over (planner/types.Family's value: 'gpu' one GPU,
    'node' one node, 'block' a block of GPUs, 'all' every GPU). ``on_gpus``: its rows are read by GPUs (False:
    the host CPU looks them up). ``whole_copies``: every shard is a whole copy of the table, each GPU looks up its
    own samples and the gradients are all-reduced. ``pooled_exchange``: the pooled outputs (and their gradients)
    of other GPUs' samples cross to and from the shards (the all-to-all). ``split``: 'rows', 'cols' or None (the
    table is one piece per shard). ``node_local``: a node-local replica (placer/forms/node_local.py) may take it.
    ``torchrec_types``: TorchRec's sharding types that are this form (the first is the one exported; row-wise
    within one node of several is TorchRec's table_row_wise, torchrec_io/mapping.sharding_type_of).
    ``shape_text(n, devices)``: what shards of this geometry are, for a refusal. ``options(t, topo, precision,
    cfg, seen)``: its candidate placements of table ``t`` at ``precision`` under ``cfg`` (options.OptionConfig;
    ``seen``: a set the table's calls share across precisions), in the order the menu lists them."""

    name: str
    meaning: str
    family: str
    shape_text: Callable[[int, int], str]
    on_gpus: bool = True
    whole_copies: bool = False
    pooled_exchange: bool = False
    split: str | None = None
    node_local: bool = False
    torchrec_types: tuple[str, ...] = ()
    options: Callable | None = field(default=None, compare=False)

    @property
    def runs_under_torchrec(self) -> bool:
        """Whether TorchRec's DistributedModelParallel has this sharding."""
        return bool(self.torchrec_types)

    def accepts(self, geometry: str | None) -> bool:
        """Whether shards of ``geometry`` (plan.geometry_label: a sharding's name or None for a grid) may carry
        this label: their own geometry, or one whole piece (a split into one piece, as TorchRec writes it on one
        GPU; a host table is one whole piece in a host's memory)."""
        return geometry == self.name or (geometry == "table_wise" and self.name != "table_wise")


@dataclass(frozen=True)
class StorageForm:
    """One form of keeping a table's rows that a method can force (``placer solve --method NAME``): compressed
    rows or a node-local replica. ``field``: the workload entry that allows it (tables[].FIELD);
    ``allows(table)``: whether that entry allows it; ``torchrec_lacks``: what TorchRec has not, to run it (for
    export's and --trainer torchrec's refusals); ``check(p, t, file, field)``: SpecError for a placement in this
    form that its table's entry does not allow (None: checked elsewhere); ``compressions(t, precision)``: the
    Compression values the menu offers table ``t`` at ``precision`` (compressed forms)."""

    name: str
    field: str
    allows: Callable[[object], bool]
    torchrec_lacks: str
    check: Callable | None = field(default=None, compare=False)
    compressions: Callable | None = field(default=None, compare=False)


def first(items: list, canonical: bool) -> list:
    """``items[:1]`` when the menu is canonical (one representative per symmetry class), else ``items``."""
    return items[:1] if canonical else items
