"""Bytes on shared resources: routes on the device graph, the all-to-all of pooled embeddings, ring
all-reduces, and the latency no bandwidth hides. Loads are seconds: bytes / the resource's rate.

- a transfer from ``src`` to ``dst`` loads every directed link on its routes (Topology.route_shares);
- the all-to-all sends each GPU its samples' share: a device's outgoing exchange of ``per_gpu`` bytes loads
  the links from it to every GPU (incoming: from every GPU to it);
- a ring all-reduce of n bytes over W GPUs moves 2(W-1)/W n bytes through every ring hop; over several nodes
  with G GPUs each it runs G rings, ring r leaving every node through a different GPU and rail NIC.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the topology owns its Traffic (Topology.traffic)
    from placer.topology import Topology


class Traffic:
    """Shared-resource loads of transfers on one topology (cached per route)."""

    def __init__(self, topology: Topology):
        self.topo = topology
        self.gpus = topology.gpus
        self._rate = {name: r.rate for name, r in topology.resources.items()}
        self._exchange_cache: dict[tuple[str, bool], list[tuple[str, float]]] = {}
        self.ring_cache: dict[tuple[str, ...], list[tuple[str, float]]] = {}
        self._send_cache: dict[tuple[str, str], list[tuple[str, float]]] = {}
        self._path_cache: dict[tuple[str, str], float] = {}

    def rate(self, resource: str) -> float:
        return self._rate[resource]

    def send(self, src: str, dst: str, n_bytes: float) -> list[tuple[str, float]]:
        """(link, seconds) of ``n_bytes`` from ``src`` to ``dst``."""
        if n_bytes <= 0 or src == dst:
            return []
        key = (src, dst)
        if key not in self._send_cache:
            self._send_cache[key] = [(link, share / self._rate[link])
                                     for link, share in self.topo.route_shares(src, dst)]
        return [(link, spb * n_bytes) for link, spb in self._send_cache[key]]

    def path_Bps(self, src: str, dst: str) -> float:
        """Bytes/s of one transfer from ``src`` to ``dst``: its slowest link (inf on the same device)."""
        key = (src, dst)
        if key not in self._path_cache:
            self._path_cache[key] = self.topo.bottleneck_bw(src, dst)
        return self._path_cache[key]

    def unit_exchange(self, device: str, outgoing: bool) -> list[tuple[str, float]]:
        """(link, seconds per byte) for one byte from ``device`` to every GPU (outgoing) or from every GPU to
        ``device``; cached, so an all-to-all costs one pass over the links it touches."""
        key = (device, outgoing)
        if key not in self._exchange_cache:
            acc: dict[str, float] = defaultdict(float)
            for h in self.gpus:
                routes = self.topo.route_shares(device, h) if outgoing else self.topo.route_shares(h, device)
                for link, share in routes:
                    acc[link] += share / self._rate[link]
            self._exchange_cache[key] = list(acc.items())
        return self._exchange_cache[key]

    def exchange(self, device: str, per_gpu_bytes: float, outgoing: bool) -> list[tuple[str, float]]:
        if per_gpu_bytes <= 0:
            return []
        return [(link, per_gpu_bytes * spb) for link, spb in self.unit_exchange(device, outgoing)]

    def ring_orders(self, gpus: tuple[str, ...]) -> list[list[str]]:
        """The rings an all-reduce over ``gpus`` runs, each carrying an equal share of the bytes.

        Within one node: one ring in GPU order. Over several nodes with G GPUs each (NCCL-style multi-rail):
        G rings, ring r visiting each node's GPUs rotated by r, so that every node is left through a
        different GPU (and its rail NIC) by each ring."""
        nodes: dict[str, list[str]] = {}
        for g in gpus:
            nodes.setdefault(self.topo.node_of[g], []).append(g)
        sizes = {len(v) for v in nodes.values()}
        if len(nodes) == 1 or len(sizes) != 1:
            return [list(gpus)]
        per = sizes.pop()
        return [[local[(i + r) % per] for local in nodes.values() for i in range(per)] for r in range(per)]

    def unit_allreduce(self, gpus: tuple[str, ...]) -> list[tuple[str, float]]:
        """(link, seconds per byte all-reduced) of a ring all-reduce over ``gpus``; cached."""
        W = len(gpus)
        if gpus not in self.ring_cache:
            acc: dict[str, float] = defaultdict(float)
            rings = self.ring_orders(gpus) if W > 1 else []
            for ring in rings:
                for i, g in enumerate(ring):
                    for link, share in self.topo.route_shares(g, ring[(i + 1) % W]):
                        acc[link] += share * 2 * (W - 1) / W / len(rings) / self._rate[link]
            self.ring_cache[gpus] = list(acc.items())
        return self.ring_cache[gpus]

    def allreduce(self, gpus: tuple[str, ...], n_bytes: float) -> list[tuple[str, float]]:
        if len(gpus) < 2 or n_bytes <= 0:
            return []
        return [(link, n_bytes * spb) for link, spb in self.unit_allreduce(gpus)]

    def fixed_latency_s(self, num_phases: int, fx: int, bx: int, ar: int) -> dict[int, float]:
        """Latency per phase that no bandwidth hides: the farthest exchange path; for the all-reduce, the
        lesser of a ring's 2(W-1) and a tree's 2 ceil(log2 W) hops of the slowest ring hop."""
        out = {p: 0.0 for p in range(num_phases)}
        W = len(self.gpus)
        if W > 1:
            g0 = self.gpus[0]
            farthest = max(self.topo.path_latency_s(g0, h) for h in self.gpus[1:])
            out[fx] = out[bx] = farthest
            ring = self.ring_orders(tuple(self.gpus))[0]
            hop = max(self.topo.path_latency_s(g, ring[(i + 1) % W]) for i, g in enumerate(ring))
            # NCCL picks a tree when latency dominates: 2 log2(W) hops instead of the ring's 2(W-1)
            out[ar] = 2 * min(W - 1, math.ceil(math.log2(W))) * hop
        return out
