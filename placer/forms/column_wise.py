"""Column-wise: pieces holding all of the table's rows, split by columns over a block of GPUs; each piece pools
its columns of every bag and the pieces are concatenated. TorchRec calls it column_wise (table_column_wise within
a node). Options: 2, 4 or 8 equal pieces on aligned blocks of a node's GPUs, every row in HBM."""
from placer.forms import names
from placer.forms.base import ShardingForm, first
from placer.plan import Placement, Shard

NAME = names.COLUMN_WISE
COLUMN_PIECES = (2, 4, 8)
MIN_COLUMN_PIECE = 4  # narrowest column piece offered, elements


def options(t, topo, precision: str, cfg, seen: set) -> list:
    """Each of COLUMN_PIECES that cuts the table's dim into pieces of at least MIN_COLUMN_PIECE columns, on each
    aligned block of that many GPUs of each node (the first block of the first node when canonical)."""
    if not cfg.column_wise:
        return []
    out = []
    for pieces in COLUMN_PIECES:
        if t.dim % pieces or t.dim // pieces < MIN_COLUMN_PIECE:
            continue
        width = t.dim // pieces
        for node in first(topo.nodes, cfg.canonical):
            gpus = topo.gpus_of_node(node)
            for start in first(list(range(0, len(gpus) - pieces + 1, pieces)), cfg.canonical):
                block = gpus[start:start + pieces]
                out.append(Placement.model_construct(table=t.name, sharding=NAME, precision=precision, shards=[
                    Shard.model_construct(device=g, rows=(0, t.rows), cols=(i * width, (i + 1) * width),
                                          hbm_rows=t.rows, host_rows=0) for i, g in enumerate(block)]))
    return out


FORM = ShardingForm(
    name=NAME, meaning="pieces holding all of the table's rows, split by columns", family="block",
    shape_text=lambda n, devices: f"its {n} shards split the columns over {devices} device(s)",
    pooled_exchange=True, split="cols", node_local=True, torchrec_types=("column_wise", "table_column_wise"),
    options=options)
