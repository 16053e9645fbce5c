"""Node-local tables (the workload's ``node_local``; communication avoidance): a replica of the table on every node,
laid out on each as an intra-node option on node0 is (table-wise on one GPU with its hot rows, row-wise over the
node's GPUs, column-wise on a block of them), each node's samples looking up and updating only their node's
replica. A plan says so with ``replicated: per_node`` and lists every node's shards, node by node
(placer/plan.py checks them).

What it saves: the all-to-all of the table's pooled embeddings and of their gradients stays inside each node
(NVLink), so the network carries none of the table's bytes; what it costs: a whole copy per node, and replicas
that drift apart (each sees 1 / nodes of the samples: an accuracy question the workload's permission answers).
"""
from __future__ import annotations

from placer.errors import SpecError
from placer.forms.shardings import names_where
from placer.plan import Placement, Shard

#: the shardings a node-local replica may have (one node's intra-node layouts)
NODE_LOCAL_SHARDINGS = names_where("node_local")


def local_name(device: str) -> str:
    """'node3/gpu5' -> 'gpu5': a device's name inside its node."""
    return device.split("/", 1)[-1]


def per_node(p: Placement, nodes: list[str]) -> Placement:
    """``p`` (a placement on the first node's GPUs) replicated on every node of ``nodes``: the same shards on the
    same local GPUs of each node, node by node, marked ``replicated: per_node``. Built without validation (options
    are correct by construction)."""
    shards = [Shard.model_construct(device=f"{node}/{local_name(s.device)}", rows=s.rows, cols=s.cols,
                                    hbm_rows=s.hbm_rows, host_rows=s.host_rows, cold_memory=s.cold_memory)
              for node in nodes for s in p.shards]
    return Placement.model_construct(table=p.table, sharding=p.sharding, precision=p.precision, shards=shards,
                                     compression=None, replicated="per_node")


def node_local_options(options: list[Placement], nodes: list[str]) -> list[Placement]:
    """The node-local variants of a table's intra-node ``options`` on the first node (uncompressed table-wise,
    row-wise and column-wise options whose GPUs are all the first node's): each replicated on every node. None on
    one node, where a replica per node is the plain option."""
    if len(nodes) < 2:
        return []
    first = nodes[0] + "/"
    return [per_node(p, nodes) for p in options
            if p.sharding in NODE_LOCAL_SHARDINGS and p.compression is None and p.replicated is None
            and all(s.device.startswith(first) for s in p.shards)]


def one_replica(p: Placement, num_nodes: int, node: int = 0) -> Placement:
    """Node ``node``'s replica (by index; default the first) of a node-local placement, as a plain placement of that
    node's GPUs (its shards are listed node by node, as many on each): what the sample owners of one node assemble
    and send back, what a rank of that node holds; ``p`` itself when it is not node-local."""
    if not p.node_local:
        return p
    per = max(1, len(p.shards) // num_nodes)
    return p.model_copy(update={"shards": p.shards[node * per:(node + 1) * per], "replicated": None})


def refuse_node_local(plan, what: str, why: str, file: str | None = None) -> None:
    """SpecError (exit 2) naming the first node-local placement of ``plan``, for a command (``what``) that cannot
    run or write it as planned (``why``); nothing for a plan without one."""
    for i, p in enumerate(plan.placements):
        if p.node_local:
            raise SpecError(f"{what}: table {p.table!r} is node-local (a replica per node, trained on that node's "
                            f"samples alone), and {why}", file=file, field=f"placements[{i}].replicated")
