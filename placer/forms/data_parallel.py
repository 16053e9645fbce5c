"""Data-parallel: a whole copy of the table on each of several GPUs; each GPU looks up its own samples (no
exchange of pooled outputs) and the table's gradient is all-reduced every step. Small tables only
(DATA_PARALLEL_MAX_BYTES). TorchRec's data_parallel replicates on every rank (kernel ``dense``). Options: a
replica on every GPU."""
from placer.forms import names
from placer.forms.base import ShardingForm
from placer.plan import Placement, Shard

NAME = names.DATA_PARALLEL
DATA_PARALLEL_MAX_BYTES = 64 * 2**20  # replicate only tables up to 64 MiB (their all-reduce is whole-table)


def allowed(t, precision: str, topo, cfg) -> bool:
    """Whether the menu offers ``t`` data-parallel at ``precision``: allowed by ``cfg``, several GPUs, a small
    table."""
    return cfg.data_parallel and len(topo.gpus) > 1 and t.size_bytes(precision) <= DATA_PARALLEL_MAX_BYTES


def placement(t, gpus: list[str], precision: str):
    """A whole replica of ``t`` on each of ``gpus``, every row in HBM."""
    return Placement.model_construct(table=t.name, sharding=NAME, precision=precision, shards=[
        Shard.model_construct(device=g, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=t.rows, host_rows=0)
        for g in gpus])


def options(t, topo, precision: str, cfg, seen: set) -> list:
    """A replica on every GPU, where ``allowed`` and ``cfg.all_gpu_kinds``."""
    return [placement(t, topo.gpus, precision)] if cfg.all_gpu_kinds and allowed(t, precision, topo, cfg) else []


FORM = ShardingForm(
    name=NAME, meaning="a whole copy of the table on each of several GPUs", family="all",
    shape_text=lambda n, devices: f"its {n} shards are whole copies of the table",
    whole_copies=True, torchrec_types=("data_parallel",), options=options)
