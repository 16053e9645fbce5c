"""Host: the whole table in a host's memory, looked up by that host's CPU, the pooled outputs sent to the GPUs
over PCIe. placer's runner runs it; TorchRec has no such sharding (export maps it to table-wise UVM on a GPU of
its node, torchrec_io/mapping.nearest_mappable). Options: one per host (OptionConfig.host)."""
from placer.forms import names
from placer.forms.base import ShardingForm, first
from placer.plan import Placement, Shard

NAME = names.HOST


def placement(t, host: str, precision: str):
    """Table ``t`` whole in the memory of ``host``, looked up by its CPU."""
    return Placement.model_construct(table=t.name, sharding=NAME, precision=precision, shards=[
        Shard.model_construct(device=host, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)])


def options(t, topo, precision: str, cfg, seen: set) -> list:
    """On each host (the first only when canonical)."""
    return [placement(t, h, precision) for h in first(topo.hosts, cfg.canonical)] if cfg.host else []


FORM = ShardingForm(
    name=NAME, meaning="one shard holding the whole table in a host's memory", family="node",
    shape_text=lambda n, devices: "its one shard holds the whole table",
    on_gpus=False, options=options)
