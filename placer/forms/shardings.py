"""The registry of shardings: every ShardingForm (placer/forms/base.py), one module each, by the name plan files
give it. Code that must know what a placement's sharding does asks ``sharding_of(p)`` for the property
(``whole_copies``, ``on_gpus``, ``pooled_exchange``, ``family``, ``torchrec_types``, ...) and builds placements
with the forms' ``name``; a new sharding is a new module here and its entry in ``SHARDINGS``."""
from __future__ import annotations

from placer.forms import column_wise, data_parallel, host, row_wise, table_wise
from placer.forms.base import ShardingForm

TABLE_WISE: ShardingForm = table_wise.FORM
ROW_WISE: ShardingForm = row_wise.FORM
COLUMN_WISE: ShardingForm = column_wise.FORM
DATA_PARALLEL: ShardingForm = data_parallel.FORM
HOST: ShardingForm = host.FORM

#: every sharding by its name in plan files, in the order the docs and refusals list them
SHARDINGS: dict[str, ShardingForm] = {f.name: f for f in (TABLE_WISE, ROW_WISE, COLUMN_WISE, DATA_PARALLEL, HOST)}
#: TorchRec's sharding type -> placer's sharding form (table_row_wise is row_wise within one node)
FROM_TORCHREC: dict[str, ShardingForm] = {st: f for f in SHARDINGS.values() for st in f.torchrec_types}
#: TorchRec 1.8's ShardingType, member -> value, in its order (grid_shard: no placer form; checked against TorchRec by
#: tests/test_torchrec_constraints.py)
TORCHREC_SHARDING_TYPES: dict[str, str] = {
    "DATA_PARALLEL": "data_parallel", "TABLE_WISE": "table_wise", "COLUMN_WISE": "column_wise",
    "ROW_WISE": "row_wise", "TABLE_ROW_WISE": "table_row_wise", "TABLE_COLUMN_WISE": "table_column_wise",
    "GRID_SHARD": "grid_shard"}
#: (TorchRec's type for a form, a narrower one of the same form): (row_wise, table_row_wise), (column_wise, ...)
NARROWER_TORCHREC_TYPES = tuple((f.torchrec_types[0], t) for f in SHARDINGS.values() for t in f.torchrec_types[1:])


def sharding_of(p) -> ShardingForm:
    """The sharding form of placement ``p`` (or of a sharding's name)."""
    return SHARDINGS[p if isinstance(p, str) else p.sharding]


def names_where(prop: str) -> tuple[str, ...]:
    """The names of the shardings whose ``prop`` is true ('pooled_exchange', 'node_local', ...), in order."""
    return tuple(n for n, f in SHARDINGS.items() if getattr(f, prop))
