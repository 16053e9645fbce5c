"""Table-wise: the whole table as one shard on one GPU (its rows in HBM, in host memory the GPU reads, or split
hot rows in HBM / cold rows in host memory: placer/forms/tiers.py). Other GPUs' samples reach it through the
all-to-all of pooled outputs. Options: one per GPU and hot-row level. Compressed forms (placer/forms/storage.py)
are table-wise too, every row in HBM."""
from placer.forms import names
from placer.forms.base import ShardingForm, first
from placer.forms.tiers import hot_rows_levels, local_tiers
from placer.plan import Placement, Shard

NAME = names.TABLE_WISE


def placement(t, device: str, precision: str, hbm_rows: int, compression=None, cold_memory: str | None = None):
    """Table ``t`` whole on GPU ``device``, its hottest ``hbm_rows`` rows in HBM and the rest in its host's memory
    (or in the memory tier ``cold_memory`` of its node), stored in ``compression`` (None: rows as they are). Built
    without validation: options are correct by construction and there are many."""
    return Placement.model_construct(table=t.name, sharding=NAME, precision=precision, compression=compression,
                                     shards=[Shard.model_construct(device=device, rows=(0, t.rows), cols=(0, t.dim),
                                                                   hbm_rows=hbm_rows, host_rows=t.rows - hbm_rows,
                                                                   cold_memory=cold_memory)])


def options(t, topo, precision: str, cfg, seen: set) -> list:
    """On each GPU (the first only when canonical), at each hot-row level of ``cfg``; then, where the GPU's node
    has memory tiers (the spec's ``tiers``), with the cold rows in each tier instead of host memory."""
    gpus = first(topo.gpus, cfg.canonical)
    levels = hot_rows_levels(t.rows, cfg.levels_for(t.name))
    return [placement(t, g, precision, k) for g in gpus for k in levels] + [
        placement(t, g, precision, k, cold_memory=tier) for g in gpus for tier in local_tiers(topo, g)
        for k in levels if k < t.rows]


FORM = ShardingForm(
    name=NAME, meaning="one shard holding the whole table on one GPU", family="gpu",
    shape_text=lambda n, devices: "its one shard holds the whole table",
    pooled_exchange=True, node_local=True, torchrec_types=("table_wise",), options=options)
