"""A node-local table's part of the step program (placer/node_local.py; build.py hands it here).

With N nodes and global batch B, every node's replica serves that node's samples only: B / N samples (its shards'
lookups, distinct rows and bags accordingly, from the table's access model at B / N samples' lookups). Its
all-to-all (the pooled embeddings to the node's sample owners, their gradients back) stays inside the node: each
of the replica's shards sends every GPU of its node that GPU's samples' share (B / W samples x the table's
features x the shard's columns x 4 bytes, as for any shard) over the node's links, and the network carries none
of it. Its updates are its node's lookups' only, and no gradient of it is reduced across nodes (nor within one:
a row-wise or column-wise replica's shards hold disjoint pieces). Memory: every replica's rows, state and buffers
on its own node's GPUs and host, so the ILP's capacity rows see each node's copy.

Sizes are per step: samples and lookups counts, bytes bytes, seconds seconds. ``network_bytes`` counts what a step
program sends between nodes (the measure of what node-local tables save).
"""
from __future__ import annotations

from collections import defaultdict

from placer.plan import Placement


def batch_of(topo, batch: int, p: Placement) -> int:
    """Samples a replica of ``p`` serves per step: the global ``batch``, or its node's share (batch / nodes) for a
    node-local placement."""
    return round(batch / len(topo.nodes)) if p.node_local else batch


def node_exchange(traffic, topo, device: str, per_gpu_bytes: float, outgoing: bool) -> list[tuple[str, float]]:
    """(link, seconds) of ``per_gpu_bytes`` from ``device`` to every GPU of its own node (outgoing), or from every
    one of them to it: the all-to-all of a node-local shard."""
    acc: dict[str, float] = defaultdict(float)
    for h in topo.gpus_of_node(topo.node_of[device]):
        for link, s in (traffic.send(device, h, per_gpu_bytes) if outgoing else traffic.send(h, device, per_gpu_bytes)):
            acc[link] += s
    return list(acc.items())


def network_bytes(ops, topo) -> dict[str, float]:
    """Bytes per step the ops of a step program send into the network between nodes (every link from a NIC to the
    fabric; an op's traffic is (link, seconds), bytes = seconds x the link's rate), by table name ("" for what no
    table owns: the dense model's gradient all-reduce)."""
    out: dict[str, float] = defaultdict(float)
    for op in ops:
        for link, seconds in op.traffic:
            if link.endswith("->fabric"):
                out[op.table or ""] += seconds * topo.resources[link].rate
    return dict(out)
