"""HardwareSpec -> a networkx graph of devices and links, and the resources the cost model loads.

Graph nodes are devices (``node0/gpu3``, ``node0/host``, ``node0/nvswitch``, ``node0/nic2``, ``fabric``);
edges are links with a bandwidth per direction. A *resource* is anything with a rate that a phase of a
training step can saturate:

- ``<gpu>:stream``   the GPU's compute stream: its ops run one after another (loads in seconds, rate 1)
- ``<host>:cpu``     the host's CPU thread that looks up host tables (seconds, rate 1); on a unified-memory
                     node (CPU processes standing in for GPUs) there is none: that work runs on the stream of
                     the node's first GPU (``stream_of``)
- ``<host>:dram``    bytes/s of host DRAM, shared by everything that reads or writes it; ``<tier>:dram`` the
                     same of a memory tier (a node template's ``tiers``: a CXL expander, ...)
- ``<a>-><b>``       bytes/s of one link in one direction (bw x efficiency), shared

Memories: one per GPU (HBM), one per host (DRAM) and one per memory tier of a node (``tiers``: devices of kind
``memory``, which hold the cold rows of the node's GPU shards that name them); on a unified-memory node the GPUs
have none of their own (``memory_of`` a GPU is its host's: one RAM). ``op_costs`` gives what each op kind costs
on a device's stream (placer/program/opcosts.py); ``read_costs`` what a GPU's reads of a memory tier cost.

Traffic between two devices follows the path of least summed 1/bandwidth (NVLink before PCIe), fixed per
pair, so every byte sent adds load to the directed link resources along that path.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from placer.program.traffic import Traffic
from placer.specs.hardware import HardwareSpec, NodeTemplate
from placer.specs.kinds import FABRIC_LINK, GPU
from placer.units import gbps_to_bytes_per_s, gib_to_bytes, us_to_s

FABRIC = "fabric"


@dataclass(frozen=True)
class Resource:
    """Something with a rate. ``rate`` is units per second (bytes/s, FLOP/s, launches/s)."""

    name: str
    kind: str  # stream | dram | link
    device: str  # the device it belongs to (for links: the sending end)
    rate: float
    unit: str

    @property
    def is_stream(self) -> bool:
        return self.kind == "stream"


@dataclass(frozen=True)
class Memory:
    """A memory that holds table rows: one per GPU (HBM) and one per host (DRAM). Capacities in bytes."""

    name: str  # the device name
    kind: str  # hbm | dram | tier
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
        # routing and op costs, derived once per device on first use (op_costs, _paths_from, _route_shares)
        self._op_costs: dict[str, object] = {}
        self._paths: dict[str, dict[str, list[str]]] = {}
        self._preds: dict[str, tuple[dict, dict]] = {}
        for node, template in spec.node_templates():
            self._add_node(node, template)
        if spec.num_nodes > 1:
            self.graph.add_node(FABRIC, kind="fabric", node=None)
            for node, template in spec.node_templates():
                for i in range(template.nics.count):
                    nic = f"{node}/nic{i}"
                    self._add_link(nic, FABRIC, FABRIC_LINK, template.nics.bw_GBps, template.nics.latency_us
                                   + spec.fabric.latency_us / 2, 1.0)
        self._gpu_set = frozenset(self.gpus)
        self._node_symmetry = NodeSymmetry.of(self)  # routes found once per pair of node positions
        self._check_connected()

    # ---- construction -----------------------------------------------------------------------------------

    def _add_node(self, node: str, t: NodeTemplate) -> None:
        g = t.gpus
        host = f"{node}/host"
        self.hosts.append(host)
        self._gpus_of_node[node] = []
        for local, kind in t.device_kinds.items():  # the kind where the spec declares it, never from a name
            name = f"{node}/{local}"
            self.graph.add_node(name, kind=kind, node=node)
            self.node_of[name] = node
            self.template_of[name] = t
            if kind == GPU:
                self.gpus.append(name)
                self._gpus_of_node[node].append(name)
                self._stream(name, "stream")
                if not t.unified_memory:
                    self.memories[name] = Memory(name, "hbm", gib_to_bytes(g.hbm_GiB), gib_to_bytes(g.hbm_reserve_GiB))
        h = t.host
        self._resource(host, "dram", gbps_to_bytes_per_s(h.dram_bw_GBps), "B/s")
        if not t.unified_memory:
            self._stream(host, "cpu")
        reserve = h.dram_reserve_GiB + (g.hbm_reserve_GiB * g.count if t.unified_memory else 0.0)
        self.memories[host] = Memory(host, "dram", gib_to_bytes(h.dram_GiB), gib_to_bytes(reserve))
        for m in t.tiers:
            name = f"{node}/{m.name}"
            self._resource(name, "dram", gbps_to_bytes_per_s(m.bw_GBps), "B/s")
            self.memories[name] = Memory(name, "tier", gib_to_bytes(m.GiB), gib_to_bytes(m.reserve_GiB))
        for link in t.links:
            for a, b in t.link_pairs(link):
                self._add_link(f"{node}/{a}", f"{node}/{b}", link.kind, link.bw_GBps, link.latency_us,
                               link.efficiency)

    def _resource(self, device: str, kind: str, rate: float, unit: str) -> None:
        name = f"{device}:{kind}"
        self.resources[name] = Resource(name, kind, device, rate, unit)

    def _stream(self, device: str, suffix: str) -> None:
        name = f"{device}:{suffix}"
        self.resources[name] = Resource(name, "stream", device, 1.0, "s/s")

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
        for node, gpus in self._gpus_of_node.items():
            for m in self.tiers_of(gpus[0]) if gpus else []:
                if not nx.has_path(self.graph, gpus[0], m):
                    raise SpecError(f"memory tier {m} has no link path to {gpus[0]} (link it to the host or a "
                                    "switch)", file=self.spec.source_path, field="templates.*.links")
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

    def is_unified(self, device: str) -> bool:
        """True when ``device`` is on a unified-memory node (CPU processes: one RAM, shared cores)."""
        return self.template_of[device].unified_memory

    def stream_of(self, device: str) -> str:
        """The stream resource that runs ``device``'s ops: a GPU's compute stream, a host's CPU thread (on a
        unified-memory node, the stream of the node's first GPU: the same cores)."""
        if device in self._gpu_set:
            return f"{device}:stream"
        if self.template_of[device].unified_memory:
            return f"{self._gpus_of_node[self.node_of[device]][0]}:stream"
        return f"{device}:cpu"

    def exchange_sender(self, device: str) -> str:
        """The device whose stream and links send a shard on ``device`` to the sample owners in the all-to-all:
        the device itself; a host of a unified-memory node: the node's first GPU (the same cores; the runner
        runs a host's tables on that rank and sends their outputs in its all-to-all: runner/ranks.py)."""
        if device not in self._gpu_set and self.template_of[device].unified_memory:
            return self._gpus_of_node[self.node_of[device]][0]
        return device

    def tiers_of(self, device: str) -> list[str]:
        """The memory tiers of ``device``'s node (its template's ``tiers``), in their declared order."""
        node = self.node_of[device]
        return [f"{node}/{m.name}" for m in self.template_of[device].tiers]

    def cold_memory_of(self, gpu: str, tier: str | None) -> str:
        """The memory that holds the cold rows of a shard on ``gpu``: the tier of its node named ``tier`` (a local
        name, Shard.cold_memory), or its host's DRAM (None)."""
        return self.host_of(gpu) if tier is None else f"{self.node_of[gpu]}/{tier}"

    def read_costs(self, gpu: str, memory: str):
        """``gpu``'s op costs for rows it reads in ``memory``: its own (op_costs) for HBM and its host's DRAM; for
        a memory tier, the same with the host-read rate its path gives: the narrowest link of the route times the
        tier's read_efficiency, at most the tier's own bandwidth (datasheet figures: calibrate measures no tier)."""
        if self.memories[memory].kind != "tier":
            return self.op_costs(gpu)
        key = (gpu, memory)
        if key not in self._op_costs:
            from placer.program.opcosts import reading_at

            spec = next(m for m in self.template_of[memory].tiers if f"{self.node_of[memory]}/{m.name}" == memory)
            rate = min(self.bottleneck_bw(memory, gpu) * spec.read_efficiency, gbps_to_bytes_per_s(spec.bw_GBps))
            self._op_costs[key] = reading_at(self.op_costs(gpu), rate)
        return self._op_costs[key]

    def memory_of(self, device: str) -> str:
        """The memory that holds ``device``'s rows: its own HBM, or its host's DRAM (hosts, unified nodes)."""
        return device if device in self.memories else self.host_of(device)

    def op_costs(self, device: str):
        """What each op kind costs on ``device``'s stream (placer.program.opcosts.OpCosts), cached."""
        from placer.program.opcosts import op_costs_of_kind

        cache = self._op_costs
        if device not in cache:
            t, link = self.template_of[device], float("inf")
            if device in self._gpu_set or t.unified_memory:
                gpu = device if device in self.gpus else self._gpus_of_node[self.node_of[device]][0]
                host = self.host_of(gpu)
                link = self.bottleneck_bw(host, gpu) if host != gpu else float("inf")
            cache[device] = op_costs_of_kind(self.graph.nodes[device]["kind"], t, link)
        return cache[device]

    @cached_property
    def traffic(self) -> Traffic:
        """Shared-resource loads of transfers on this machine (program/traffic.py), built once: every cost model of
        the machine, a what-if's too, shares its cached routes (the all-to-all on 256 GPUs is seconds to route)."""
        return Traffic(self)

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


class NodeSymmetry:
    """Routes on a cluster of identical nodes, found once per pair of positions. Where every node is built from
    one template and the fabric joins every NIC alike, renaming the nodes maps the device graph onto itself,
    and a shortest path between two devices visits only their own nodes (and the fabric between them): a route
    from nodeI/a to nodeJ/b is the route from node0/a to node0/b (I = J) or to node1/b (I != J), renamed. So
    routes cost one search per device of node0 instead of one per device of the cluster (1,024 GPUs: 8
    searches instead of 1,024, each ~35 ms there)."""

    def __init__(self, topo: Topology):
        nodes = topo.nodes
        self.index = {n: i for i, n in enumerate(nodes)}
        self.nodes = nodes
        self.node_of = topo.node_of

    @staticmethod
    def of(topo: Topology) -> NodeSymmetry | None:
        """The symmetry of ``topo``'s nodes, or None where they differ (or there is one node)."""
        templates = {id(topo.template_of[topo.hosts[i]]) for i in range(len(topo.hosts))}
        if len(topo.nodes) < 2 or len(templates) != 1:
            return None
        return NodeSymmetry(topo)

    def canonical(self, src: str, dst: str) -> tuple[str, str, dict[str, str]] | None:
        """(canonical source, canonical destination, canonical node -> real node) of a route, or None where
        either end is outside the nodes (the fabric)."""
        a, b = self.node_of.get(src), self.node_of.get(dst)
        if a is None or b is None:
            return None
        n0, n1 = self.nodes[0], self.nodes[1]
        back = {n0: a} if a == b else {n0: a, n1: b}
        return (self._move(src, a, n0), self._move(dst, b, n0 if a == b else n1), back)

    @staticmethod
    def _move(device: str, node: str, to: str) -> str:
        return to + device[len(node):]

    def rename(self, device: str, back: dict[str, str]) -> str:
        """A canonical device's real name (devices outside the nodes keep theirs)."""
        node = self.node_of.get(device)
        return device if node is None or node not in back else self._move(device, node, back[node])


def _path_nodes(topo: Topology, src: str, dst: str) -> list[str]:
    sym = topo._node_symmetry
    moved = sym.canonical(src, dst) if sym is not None else None
    if moved is None:
        return _paths_from(topo, src)[dst]
    a, b, back = moved
    return [sym.rename(d, back) for d in _paths_from(topo, a)[b]]


def _paths_from(topo: Topology, src: str) -> dict[str, list[str]]:
    cache = topo._paths
    if src not in cache:
        cache[src] = nx.single_source_dijkstra_path(topo.graph, src, weight="weight")
    return cache[src]


def _route_shares(topo: Topology, src: str, dst: str) -> tuple[tuple[str, float], ...]:
    if src == dst:
        return ()
    sym = topo._node_symmetry
    moved = sym.canonical(src, dst) if sym is not None else None
    if moved is not None and (moved[0], moved[1]) != (src, dst):
        a, b, back = moved
        return tuple((link_resource_name(*(sym.rename(d, back) for d in link.split("->", 1))), share)
                     for link, share in _route_shares(topo, a, b))
    cache = topo._preds
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
