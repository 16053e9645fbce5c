"""Row-wise: pieces of the table's full width, split by rows over the GPUs of a node (or of the machine); each
piece pools its rows' part of every bag and the partial sums are reduced across GPUs. TorchRec calls it row_wise
over every GPU and table_row_wise over one node's GPUs of several. Options: over each node's GPUs (and every GPU
of a machine of several nodes), the same hot fraction on each piece."""
from placer.forms import names
from placer.forms.base import ShardingForm, first
from placer.plan import Placement, Shard

NAME = names.ROW_WISE


def row_split(rows: int, pieces: int) -> list[tuple[int, int]]:
    """Contiguous id ranges of near-equal size (the first ``rows % pieces`` one row longer)."""
    base, extra = divmod(rows, pieces)
    out, start = [], 0
    for i in range(pieces):
        stop = start + base + (1 if i < extra else 0)
        out.append((start, stop))
        start = stop
    return [r for r in out if r[1] > r[0]]


def placement(t, gpus: list[str], precision: str, hot_fraction: float, first_only: bool = False,
              smallest_only: bool = False):
    """Row-wise over ``gpus`` (near-equal id ranges), each shard's hottest ``hot_fraction`` in HBM; None when the
    table has fewer rows than GPUs. ``first_only``: just the first shard, the largest (a probe for the memory a
    split needs); ``smallest_only``: just the last range, the smallest, on the first GPU (a probe that prices
    every shard at most at what it costs: planner/kinds.py repeats it for a lower bound)."""
    if t.rows < len(gpus):
        return None
    ranges = row_split(t.rows, len(gpus))
    pairs = list(zip(gpus, ranges))
    if first_only:
        pairs = pairs[:1]
    elif smallest_only:
        pairs = [(gpus[0], ranges[-1])]
    shards = []
    for g, (a, b) in pairs:
        k = int(round(hot_fraction * (b - a)))
        shards.append(Shard.model_construct(device=g, rows=(a, b), cols=(0, t.dim), hbm_rows=k, host_rows=b - a - k))
    return Placement.model_construct(table=t.name, sharding=NAME, precision=precision, shards=shards)


def options(t, topo, precision: str, cfg, seen: set) -> list:
    """Over each node's GPUs (the first node only when canonical) and, with ``cfg.all_gpu_kinds`` on several
    nodes, over every GPU, at each hot-row level; a split this precision already offered (two levels that round
    to the same HBM rows) is skipped (``seen``: the table's keys, shared across its precisions, so the key holds
    the precision: fp16 row-wise is offered beside fp32's)."""
    if not cfg.row_wise:
        return []
    groups = [topo.gpus_of_node(n) for n in first(topo.nodes, cfg.canonical) if len(topo.gpus_of_node(n)) > 1]
    if len(topo.nodes) > 1 and cfg.all_gpu_kinds:
        groups.append(list(topo.gpus))
    out = []
    for group in groups:
        for f in cfg.levels_for(t.name):
            p = placement(t, group, precision, f)
            key = p and (precision, len(group), group[0], tuple(s.hbm_rows for s in p.shards))
            if p is not None and key not in seen:
                seen.add(key)
                out.append(p)
    return out


FORM = ShardingForm(
    name=NAME, meaning="pieces of the table's full width, split by rows", family="node",
    shape_text=lambda n, devices: f"its {n} shards split the rows over {devices} device(s)",
    pooled_exchange=True, split="rows", node_local=True, torchrec_types=("row_wise", "table_row_wise"),
    options=options)
