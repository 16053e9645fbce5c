"""Node-local replicas (the workload's ``node_local``, communication avoidance): a replica of the table on every
node, laid out on each as an intra-node option on node0 is, each node's samples looking up and updating only their
node's replica (``replicated: per_node`` in a plan). Which shardings may be node-local is each sharding form's
``node_local``; placer/node_local.py builds the options and refuses such plans where they cannot run; this module
is the form's entry and the check that check_plan (placer/plan.py) runs before it checks the first node's replica
as it checks any placement."""
from __future__ import annotations

from placer.errors import SpecError
from placer.forms.base import StorageForm
from placer.forms.shardings import sharding_of


def allows(t) -> bool:
    """Whether table ``t``'s workload entry allows node-local replicas (node_local: true)."""
    return bool(t.node_local)


def check_per_node(p, t, topology, file: str | None, where: str):
    """A node-local placement (``replicated: per_node``): allowed by the table's workload entry (``node_local``),
    uncompressed, table_wise / row_wise / column_wise on GPUs, one replica on every node of a machine of >= 2
    nodes, every replica laid out as node0's (the same rows, columns and hot rows on the same local GPUs, listed
    node by node) and a valid placement of its own."""
    field = f"{where}.replicated"
    if not t.node_local:
        raise SpecError(f"table {p.table!r} is placed node-local, but its workload entry does not allow it "
                        "(node_local: true)", file=file, field=field)
    if not sharding_of(p).node_local or p.compression is not None:
        raise SpecError(f"table {p.table!r}: a node-local table is table_wise, row_wise or column_wise and "
                        f"uncompressed, got {p.label()}", file=file, field=field)
    nodes = topology.nodes
    if len(nodes) < 2:
        raise SpecError(f"table {p.table!r}: node-local on a machine of one node is the plain placement (leave "
                        "out replicated)", file=file, field=field)
    per = len(p.shards) // len(nodes)
    blocks = [p.shards[i * per:(i + 1) * per] for i in range(len(nodes))]
    layout = [sorted((s.device.split("/", 1)[-1], s.rows, s.cols, s.hbm_rows) for s in b) for b in blocks]
    for node, b, lay in zip(nodes, blocks, layout):
        if per * len(nodes) != len(p.shards) or any(topology.node_of.get(s.device) != node for s in b):
            raise SpecError(f"table {p.table!r}: list each node's replica in node order, {per or 1} shard(s) on "
                            f"each of the {len(nodes)} nodes' GPUs", file=file, field=f"{where}.shards")
        if lay != layout[0]:
            raise SpecError(f"table {p.table!r}: the replica on {node} is laid out unlike {nodes[0]}'s (the same "
                            "rows, columns and hot rows on the same local GPUs)", file=file, field=f"{where}.shards")
    return p.model_copy(update={"shards": blocks[0], "replicated": None})


FORM = StorageForm(name="node_local", field="node_local", allows=allows,
                   torchrec_lacks="sharding that keeps a replica per node trained on that node's samples alone")
