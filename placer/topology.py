"""HardwareSpec -> a networkx graph of devices and links, and the resources the cost model loads.

Graph nodes are devices (``node0/gpu3``, ``node0/host``, ``node0/nvswitch``, ``node0/nic2``, ``fabric``);
edges are links with a bandwidth per direction. A *resource* is anything with a rate that a phase of a
training step can saturate:

- ``<gpu>:hbm``      bytes/s, HBM streaming bandwidth (gathers pay ``hbm_gather_efficiency`` as extra load)
- ``<gpu>:compute``  FLOP/s reachable by the dense model (peak x compute_efficiency)
- ``<gpu>:launch``   kernel launches per second (1 / kernel_launch_us)
- ``<host>:dram``    bytes/s of host DRAM
- ``<host>:cpu``     bytes/s of embedding rows the CPU gathers
- ``<a>-><b>``       bytes/s of one link in one direction (bw x efficiency)

Traffic between two devices follows the path of least summed 1/bandwidth (NVLink before PCIe), fixed per
pair, so every byte sent adds load to the directed link resources along that path.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from placer.specs.hardware import HardwareSpec, NodeTemplate
from placer.units import gbps_to_bytes_per_s, gib_to_bytes, tflops_to_flops, us_to_s

FABRIC = "fabric"


@dataclass(frozen=True)
class Resource:
    """Something with a rate. ``rate`` is units per second (bytes/s, FLOP/s, launches/s)."""

    name: str
    kind: str  # hbm | compute | launch | dram | cpu | link
    device: str  # the device it belongs to (for links: the sending end)
    rate: float
    unit: str


@dataclass(frozen=True)
class Memory:
    """A memory that holds table rows: one per GPU (HBM) and one per host (DRAM). Capacities in bytes."""

    name: str  # the device name
    kind: str  # hbm | dram
    capacity_bytes: float
    reserve_bytes: float

    @property
    def usable_bytes(self) -> float:
        return max(0.0, self.capacity_bytes - self.reserve_bytes)


def link_resource_name(a: str, b: str) -> str:
    return f"{a}->{b}"


class Topology:
    """The device graph of a HardwareSpec with its resources, memories and routing."""

    def __init__(self, spec: HardwareSpec, dense_dtype: str = "fp32"):
        """``dense_dtype`` picks which peak rate (peak_TFLOPs key) the compute resources run at."""
        self.spec = spec
        self.dense_dtype = dense_dtype
        self.graph = nx.Graph()
        self.resources: dict[str, Resource] = {}
        self.memories: dict[str, Memory] = {}
        self.gpus: list[str] = []
        self.hosts: list[str] = []
        self.node_of: dict[str, str] = {}
        self.template_of: dict[str, NodeTemplate] = {}
        self._gpus_of_node: dict[str, list[str]] = {}
        for node, template in spec.node_templates():
            self._add_node(node, template)
        if spec.num_nodes > 1:
            self.graph.add_node(FABRIC, kind="fabric", node=None)
            for node, template in spec.node_templates():
                for i in range(template.nics.count):
                    nic = f"{node}/nic{i}"
                    self._add_link(nic, FABRIC, "network", template.nics.bw_GBps, template.nics.latency_us
                                   + spec.fabric.latency_us / 2, 1.0)
        self._check_connected()

    # ---- construction -----------------------------------------------------------------------------------

    def _add_node(self, node: str, t: NodeTemplate) -> None:
        g = t.gpus
        host = f"{node}/host"
        self.hosts.append(host)
        self._gpus_of_node[node] = []
        for local in t.device_names:
            name = f"{node}/{local}"
            kind = "gpu" if local.startswith("gpu") else "host" if local == "host" else \
                "nic" if local.startswith("nic") and t.nics else "switch"
            self.graph.add_node(name, kind=kind, node=node)
            self.node_of[name] = node
            self.template_of[name] = t
            if kind == "gpu":
                self.gpus.append(name)
                self._gpus_of_node[node].append(name)
                self._resource(name, "hbm", gbps_to_bytes_per_s(g.hbm_bw_GBps), "B/s")
                peak = _peak_for(g.peak_TFLOPs, self.dense_dtype)
                self._resource(name, "compute", tflops_to_flops(peak) * g.compute_efficiency, "FLOP/s")
                self._resource(name, "launch", 1.0 / max(us_to_s(g.kernel_launch_us), 1e-12), "launch/s")
                self.memories[name] = Memory(name, "hbm", gib_to_bytes(g.hbm_GiB), gib_to_bytes(g.hbm_reserve_GiB))
        h = t.host
        self._resource(host, "dram", gbps_to_bytes_per_s(h.dram_bw_GBps), "B/s")
        self._resource(host, "cpu", gbps_to_bytes_per_s(h.cpu_gather_GBps), "B/s")
        self.memories[host] = Memory(host, "dram", gib_to_bytes(h.dram_GiB), gib_to_bytes(h.dram_reserve_GiB))
        for link in t.links:
            for a, b in t.link_pairs(link):
                self._add_link(f"{node}/{a}", f"{node}/{b}", link.kind, link.bw_GBps, link.latency_us,
                               link.efficiency)

    def _resource(self, device: str, kind: str, rate: float, unit: str) -> None:
        name = f"{device}:{kind}"
        self.resources[name] = Resource(name, kind, device, rate, unit)

    def _add_link(self, a: str, b: str, kind: str, bw_GBps: float, latency_us: float, efficiency: float) -> None:
        rate = gbps_to_bytes_per_s(bw_GBps) * efficiency
        # integer weights (1e15 / rate) so that equal-cost paths tie exactly (see route)
        self.graph.add_edge(a, b, kind=kind, bw_Bps=rate, latency_s=us_to_s(latency_us), weight=round(1e15 / rate))
        for u, v in ((a, b), (b, a)):
            name = link_resource_name(u, v)
            self.resources[name] = Resource(name, "link", u, rate, "B/s")

    def _check_connected(self) -> None:
        from placer.errors import SpecError

        for gpu in self.gpus:
            if not nx.has_path(self.graph, gpu, self.host_of(gpu)):
                raise SpecError(f"{gpu} has no link path to its host (add a pcie link)",
                                file=self.spec.source_path, field="templates.*.links")
        if len(self.gpus) > 1:
            comp = nx.node_connected_component(self.graph, self.gpus[0])
            cut = [g for g in self.gpus if g not in comp]
            if cut:
                raise SpecError(f"GPUs not connected to {self.gpus[0]}: {', '.join(cut[:4])}",
                                file=self.spec.source_path, field="templates.*.links")

    # ---- queries ----------------------------------------------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        return list(self._gpus_of_node)

    def gpus_of_node(self, node: str) -> list[str]:
        return self._gpus_of_node[node]

    def host_of(self, device: str) -> str:
        return f"{self.node_of[device]}/host"

    def gpu_spec(self, gpu: str):
        return self.template_of[gpu].gpus

    def host_spec(self, host: str):
        return self.template_of[host].host

    def route(self, src: str, dst: str) -> tuple[str, ...]:
        """Directed link resources of one shortest path from ``src`` to ``dst`` (empty if src == dst)."""
        nodes = _path_nodes(self, src, dst)
        return tuple(link_resource_name(u, v) for u, v in zip(nodes, nodes[1:]))

    def route_shares(self, src: str, dst: str) -> tuple[tuple[str, float], ...]:
        """(directed link resource, share of the traffic) for traffic from ``src`` to ``dst``: what the cost
        model loads. Traffic takes the paths of least summed 1/bandwidth; where several tie (a host reaching
        another node through any of its node's NICs), it is split equally at every hop (ECMP)."""
        return _route_shares(self, src, dst)

    def path_latency_s(self, src: str, dst: str) -> float:
        """Summed link latency from ``src`` to ``dst``, seconds."""
        nodes = _path_nodes(self, src, dst)
        return sum(self.graph.edges[u, v]["latency_s"] for u, v in zip(nodes, nodes[1:]))

    def bottleneck_bw(self, src: str, dst: str) -> float:
        """Lowest per-direction bandwidth (bytes/s) on the path from ``src`` to ``dst``; inf if same device."""
        return min((self.resources[n].rate for n in self.route(src, dst)), default=float("inf"))

    def summary(self) -> dict:
        """Counts and totals for one-line descriptions."""
        hbm = sum(m.capacity_bytes for m in self.memories.values() if m.kind == "hbm")
        dram = sum(m.capacity_bytes for m in self.memories.values() if m.kind == "dram")
        kinds: dict[str, int] = {}
        for _, _, data in self.graph.edges(data=True):
            kinds[data["kind"]] = kinds.get(data["kind"], 0) + 1
        return {"nodes": len(self.nodes), "gpus": len(self.gpus), "hbm_bytes": hbm, "dram_bytes": dram,
                "links": kinds}


def _peak_for(peaks: dict[str, float], dtype: str) -> float:
    """Peak TFLOP/s for ``dtype``; a missing 16-bit or tf32 entry falls back to the next slower format."""
    for key in {"bf16": ("bf16", "fp16", "tf32", "fp32"), "fp16": ("fp16", "bf16", "tf32", "fp32"),
                "tf32": ("tf32", "fp32")}.get(dtype, ("fp32",)):
        if key in peaks:
            return peaks[key]
    return min(peaks.values())


def _path_nodes(topo: Topology, src: str, dst: str) -> list[str]:
    return _paths_from(topo, src)[dst]


def _paths_from(topo: Topology, src: str) -> dict[str, list[str]]:
    cache = topo.__dict__.setdefault("_path_cache", {})
    if src not in cache:
        cache[src] = nx.single_source_dijkstra_path(topo.graph, src, weight="weight")
    return cache[src]


def _route_shares(topo: Topology, src: str, dst: str) -> tuple[tuple[str, float], ...]:
    if src == dst:
        return ()
    cache = topo.__dict__.setdefault("_pred_cache", {})
    if src not in cache:
        cache[src] = nx.dijkstra_predecessor_and_distance(topo.graph, src, weight="weight")
    pred, dist = cache[src]
    # the shortest-path DAG from src to dst, walked from dst back in order of decreasing distance, so that
    # each device passes on all the flow it receives, split equally over its predecessors
    dag, stack = {dst}, [dst]
    while stack:
        for u in pred.get(stack.pop(), []):
            if u not in dag:
                dag.add(u)
                stack.append(u)
    flow = dict.fromkeys(dag, 0.0)
    flow[dst] = 1.0
    shares: dict[str, float] = {}
    for v in sorted(dag, key=lambda n: -dist[n]):
        ps = pred.get(v, [])
        for u in ps:
            share = flow[v] / len(ps)
            shares[link_resource_name(u, v)] = share
            flow[u] += share
    return tuple(shares.items())
