"""Symmetries of a homogeneous cluster: relabel devices and resources between equivalent GPUs.

When every node is built from one template, swapping two nodes maps the device graph onto itself; inside a
node, a relabeling of the local devices (GPUs, NICs, PCIe switches, ...) that maps GPU 0 onto GPU i is found
for every i: the plain swap of GPU 0 and GPU i with their NICs where that is an automorphism (NVSwitch
machines), else one found by graph matching (e.g. GPU pairs behind PCIe switches: swap the pairs and their
switches). Every relabeling is checked edge by edge. A placement's cost on any GPU is then its cost on the
canonical GPU ``node0/gpu0``, relabeled; and resources fall into classes (all HBMs, all GPU->NVSwitch links,
all NIC->fabric links, ...) whose members carry the same load on average.
"""
from __future__ import annotations

import re
from functools import lru_cache

import networkx as nx
from networkx.algorithms.isomorphism import GraphMatcher

from placer.topology import Topology

_INDEXED = re.compile(r"node(\d+)/(?:([a-z_]+?)(\d+))?")
_MAX_MATCHES = 5000  # automorphisms tried when looking for an involution (graph matching)


@lru_cache(maxsize=1 << 20)
def resource_class(name: str) -> str:
    """'node3/gpu5->node3/pcisw2' -> 'node*/gpu*->node*/pcisw*'."""
    return _INDEXED.sub(lambda m: "node*/" + (f"{m.group(2)}*" if m.group(2) else ""), name)


class Symmetry:
    """Relabelings of a homogeneous topology. ``key`` = (node, swaps): swap node0 with that node, and swap
    local devices as listed, ((prefix, a, b), ...) meaning node-local ``{prefix}{a}`` <-> ``{prefix}{b}``."""

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
        self._local: dict[tuple[int, ...], tuple] = {}  # local GPU indices of block 0's image -> swaps

    @staticmethod
    def of(topo: Topology) -> "Symmetry | None":
        """The symmetry of ``topo``, or None when nodes differ or some GPU has no relabeling onto GPU 0."""
        templates = {id(topo.template_of[g]) for g in topo.gpus}
        if len(templates) != 1:
            return None
        sym = Symmetry(topo)
        try:  # every local relabeling is checked where it is made (_local_swaps)
            for g in topo.gpus_of_node(sym.nodes[0]):
                sym.gpu_key(g)
        except LookupError:
            return None
        if len(sym.nodes) > 1 and not sym.is_automorphism(sym.node_key(sym.nodes[-1])):
            return None
        return sym

    def is_automorphism(self, key: tuple) -> bool:
        graph = self.topo.graph
        for u, v, data in graph.edges(data=True):
            a, b = self.relabel(key, u), self.relabel(key, v)
            if not graph.has_edge(a, b) or graph.edges[a, b]["bw_Bps"] != data["bw_Bps"]:
                return False
        return True

    def gpu_key(self, gpu: str) -> tuple:
        """The relabeling that maps node0/gpu0 onto ``gpu`` (and what hangs off GPU 0 onto what hangs off it)."""
        node, local = gpu.split("/")
        return (int(node[4:]), self._local_swaps((int(local[3:]),)))

    def node_key(self, node: str) -> tuple:
        return (int(node[4:]), ())

    def block_key(self, node: str, block: int, pieces: int) -> tuple:
        """Maps GPUs 0..pieces-1 of node0 onto block ``block`` of ``node``; LookupError if no relabeling does."""
        start = block * pieces
        return (int(node[4:]), self._local_swaps(tuple(range(start, start + pieces))))

    def relabel(self, key: tuple, name: str) -> str:
        return _relabel(key, name)

    def _local_swaps(self, image: tuple[int, ...]) -> tuple:
        """Swaps mapping local GPUs 0..len(image)-1 onto ``image`` (an involution, checked on the graph)."""
        if image not in self._local:
            if all(i == j for j, i in enumerate(image)):
                self._local[image] = ()
            else:
                plain = tuple((prefix, j, i) for j, i in enumerate(image) if i != j for prefix in ("gpu", "nic"))
                if self.is_automorphism((0, plain)):
                    self._local[image] = plain
                else:
                    self._local[image] = self._matched_swaps(image)
        return self._local[image]

    def _matched_swaps(self, image: tuple[int, ...]) -> tuple:
        """Swaps from an involutive automorphism of node0 (found by graph matching) that maps local GPU j onto
        local GPU image[j]; LookupError if there is none."""
        node0 = self.nodes[0]
        sub = self.topo.graph.subgraph([n for n in self.topo.graph if n.startswith(node0 + "/")])
        left, right = nx.Graph(sub), nx.Graph(sub)
        for g in (left, right):
            for n in g:
                g.nodes[n]["label"] = n.split("/", 1)[1].rstrip("0123456789")  # gpu, nic, pcisw, host, ...
        for j, i in enumerate(image):
            left.nodes[f"{node0}/gpu{j}"]["label"] = f"anchor{j}"
            right.nodes[f"{node0}/gpu{i}"]["label"] = f"anchor{j}"
        matcher = GraphMatcher(left, right, node_match=lambda a, b: a["label"] == b["label"],
                               edge_match=lambda a, b: a["bw_Bps"] == b["bw_Bps"])
        for n, mapping in enumerate(matcher.isomorphisms_iter()):
            if n >= _MAX_MATCHES:
                break
            if all(mapping[mapping[a]] == a for a in mapping):
                swaps = []
                for a, b in mapping.items():
                    ma, mb = _INDEXED.match(a), _INDEXED.match(b)
                    if a < b and ma.group(2) and ma.group(2) == mb.group(2):
                        swaps.append((ma.group(2), int(ma.group(3)), int(mb.group(3))))
                    elif a != b and not (ma.group(2) and ma.group(2) == mb.group(2)):
                        break  # moves an unindexed device: not expressible as swaps
                else:
                    key = (0, tuple(swaps))
                    if self.is_automorphism(key):
                        return key[1]
        raise LookupError(f"no relabeling of {node0} maps GPUs 0..{len(image) - 1} onto {image}")


@lru_cache(maxsize=1_000_000)
def _relabel(key: tuple, name: str) -> str:
    node, swaps = key
    local: dict[tuple[str, int], int] = {}
    for prefix, a, b in swaps:
        local[(prefix, a)], local[(prefix, b)] = b, a

    def sub(m: re.Match) -> str:
        n = int(m.group(1))
        n = node if n == 0 else 0 if n == node else n
        if not m.group(2):
            return f"node{n}/"
        i = int(m.group(3))
        return f"node{n}/{m.group(2)}{local.get((m.group(2), i), i)}"

    return _INDEXED.sub(sub, name)
