"""Symmetries of a homogeneous cluster: relabel devices and resources between equivalent GPUs.

When every node is built from one template, swapping two nodes, or swapping two local GPU indices together
with their rail NICs, maps the device graph onto itself (checked edge by edge). A placement's cost on any
GPU is then its cost on the canonical GPU ``node0/gpu0``, relabeled; and resources fall into classes (all
HBMs, all GPU->NVSwitch links, all NIC->fabric links, ...) whose members carry the same load on average.
"""
from __future__ import annotations

import re
from functools import lru_cache

from placer.topology import Topology

_INDEXED = re.compile(r"node(\d+)/(?:(gpu|nic)(\d+))?")


@lru_cache(maxsize=None)
def resource_class(name: str) -> str:
    """'node3/gpu5->node3/nvswitch' -> 'node*/gpu*->node*/nvswitch'."""
    return _INDEXED.sub(lambda m: "node*/" + (f"{m.group(2)}*" if m.group(2) else ""), name)


class Symmetry:
    """Relabelings of a homogeneous topology. ``key`` = (node, local permutation as a tuple of pairs)."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.nodes = topo.nodes
        self.gpus_per_node = len(topo.gpus_of_node(self.nodes[0]))
        self.class_size: dict[str, int] = {}
        for name in topo.resources:
            c = resource_class(name)
            self.class_size[c] = self.class_size.get(c, 0) + 1
        for name in topo.memories:
            c = resource_class(name)
            self.class_size.setdefault(c, 0)
            self.class_size[c] += 1

    @staticmethod
    def of(topo: Topology) -> "Symmetry | None":
        """The symmetry of ``topo``, or None when nodes differ or the relabelings are not automorphisms."""
        templates = {id(topo.template_of[g]) for g in topo.gpus}
        if len(templates) != 1:
            return None
        sym = Symmetry(topo)
        checks = [sym.gpu_key(topo.gpus[-1])]
        if sym.gpus_per_node > 1:
            checks.append(sym.gpu_key(topo.gpus_of_node(sym.nodes[0])[1]))
        graph = topo.graph
        for key in checks:
            for u, v, data in graph.edges(data=True):
                a, b = sym.relabel(key, u), sym.relabel(key, v)
                if not graph.has_edge(a, b) or graph.edges[a, b]["bw_Bps"] != data["bw_Bps"]:
                    return None
        return sym

    def gpu_key(self, gpu: str) -> tuple:
        """The relabeling that maps node0/gpu0 onto ``gpu`` (and its rail NIC onto the matching NIC)."""
        node, local = gpu.split("/")
        i = int(local[3:])
        return (int(node[4:]), ((0, i),) if i else ())

    def node_key(self, node: str) -> tuple:
        return (int(node[4:]), ())

    def block_key(self, node: str, block: int, pieces: int) -> tuple:
        """Maps GPUs 0..pieces-1 of node0 onto block ``block`` of ``node``."""
        start = block * pieces
        return (int(node[4:]), tuple((i, start + i) for i in range(pieces)) if start else ())

    def relabel(self, key: tuple, name: str) -> str:
        return _relabel(key, name)


@lru_cache(maxsize=1_000_000)
def _relabel(key: tuple, name: str) -> str:
    node, pairs = key
    local = {}
    for a, b in pairs:
        local[a], local[b] = b, a

    def sub(m: re.Match) -> str:
        n = int(m.group(1))
        n = node if n == 0 else 0 if n == node else n
        if not m.group(2):
            return f"node{n}/"
        i = int(m.group(3))
        return f"node{n}/{m.group(2)}{local.get(i, i)}"

    return _INDEXED.sub(sub, name)
