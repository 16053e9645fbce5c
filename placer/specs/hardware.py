"""Hardware spec: node templates (GPUs, host, switches, NICs, links) replicated into a cluster.

Units are in the field names: ``_GiB`` capacities (2**30 bytes), ``_GBps`` bandwidths (1e9 bytes/s, per
direction), ``_us`` latencies, ``_TFLOPs`` compute rates. Efficiencies are fractions in (0, 1] of the
datasheet peak that the named operation reaches (measured by ``placer calibrate``).

Device naming: inside a node the GPUs are ``gpu0..gpuN-1``, the host is ``host``, NICs ``nic0..nicK-1``,
switches by their own names; globally a device is ``<node>/<local name>``, nodes ``node0..`` in file order.
A device's kind (gpu, host, switch, nic) is where it is declared (``NodeTemplate.device_kinds``), never read
from its name. Every number is finite and within the bounds of ``placer/specs/limits.py``; values outside
the realistic range of their kind of part warn, or are refused when a unit mistake explains them
(``placer/specs/plausible.py``).
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import numbers
import re
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from placer.errors import SpecError
from placer.specs import limits as L
from placer.specs.common import StrictModel
from placer.specs.detect import expect_kind
from placer.specs.kinds import GPU, HOST, LINK_KINDS, MEMORY, NIC, SWITCH
from placer.specs.loading import load_model, read_document, validation_to_spec_error
from placer.specs.plausible import check_plausible

Rate = L.OpRate
#: bytes an op touches, as an op-cost table key (1 PiB at most)
OpBytes = L.count(2**50)
#: ids one sort sorts, as an op-cost table key
SortIds = L.count(2**40)
#: op kinds with a fixed cost per op (placer/program/ops.py lists which ops each kind covers)
OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam")
FIXED_COST_KINDS = ("lookup", "sort", "segment_reduce", "copy", "elementwise", "view", "gemm", "collective",
                    "all_reduce", "dense_op", "embedding_op") + tuple(f"update_{o}" for o in OPTIMIZERS)
StorageDtype = Literal["fp32", "fp16"]
RowRates = dict[StorageDtype, dict[L.RowBytes, Rate]]  # storage dtype -> row bytes -> GB/s


class TbeCostSpec(StrictModel):
    """What FBGEMM's fused embedding kernels (TorchRec's TBE) cost on one device, for a step priced as TorchRec's
    DistributedModelParallel runs it (program/tbe_costs.py; ``placer calibrate --trainer torchrec`` measures it).
    Every field is optional: a missing one takes its default there."""

    fixed_us: dict[Literal["tbe_forward", "tbe_backward", "dense_forward", "dense_backward", "input_dist",
                           "dmp_step"], L.LatencyUs] = Field(
        default_factory=dict, description="fixed cost of one TBE forward call, one fused backward (sort, reduce and "
                                          "optimizer update), one dense TBE's forward and backward (data-parallel "
                                          "tables), one input distribution of the ids (per sharding type), and "
                                          "DMP's own Python per step (calibrate/dmp.py), us")
    forward_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of rows gathered and pooled by a TBE forward")
    backward_GBps: dict[Literal[OPTIMIZERS], RowRates] | None = Field(
        default=None, description="optimizer -> storage dtype -> row bytes -> GB/s of a fused TBE backward with that "
                                  "optimizer: per lookup its pooled gradient row read, per distinct row its weights "
                                  "and state read and written (rows drawn from a table far larger than the caches, "
                                  "nearly every lookup a distinct row)")
    forward_cached_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of a TBE forward's lookups of rows it read "
                                  "before in the same call (ids from a few hot rows): every lookup past a row's first")
    backward_lookup_GBps: dict[Literal[OPTIMIZERS], RowRates] | None = Field(
        default=None, description="optimizer -> storage dtype -> row bytes -> GB/s of the fused backward's work per "
                                  "lookup: its pooled gradient row (fp32 bytes) sorted and summed; with "
                                  "backward_row_GBps it prices the backward in place of backward_GBps")
    backward_row_GBps: dict[Literal[OPTIMIZERS], RowRates] | None = Field(
        default=None, description="optimizer -> storage dtype -> row bytes -> GB/s of the fused backward's work per "
                                  "distinct row: its weights and optimizer state read and written (2 x their bytes)")
    dense_forward_GBps: dict[L.RowBytes, Rate] | None = Field(
        default=None, description="fp32 row bytes -> GB/s of a data-parallel table's dense TBE (DMP's dense compute "
                                  "kernel): rows gathered and pooled, per lookup")
    dense_backward_GBps: dict[L.RowBytes, Rate] | None = Field(
        default=None, description="fp32 row bytes -> GB/s of its backward: per bag the pooled gradient row (fp32) "
                                  "added into the table's dense gradient")
    dmp_GBps: dict[Literal["pooled"], Rate] = Field(
        default_factory=dict, description="pooled: GB/s of DMP's own work per byte of the pooled embeddings a "
                                          "rank's samples receive (fp32; the KeyedTensors' joins and splits forward "
                                          "and backward), fitted on synthetic DMP steps (calibrate/dmp.py)")


class OpCostSpec(StrictModel):
    """What each kind of op the runner executes costs on one device (placer/program/opcosts.py prices ops with
    it): ``placer calibrate`` measures these. Every field is optional; a missing one takes its datasheet
    default, derived from the device's other fields (opcosts.py says how). Tables keyed by size are
    interpolated in log2 of the size and clamped at their ends."""

    fixed_us: dict[Literal[FIXED_COST_KINDS], L.LatencyUs] = Field(
        default_factory=dict, description="fixed cost of one op of each kind (dispatch + launch + its smallest run), "
                                          "us; dense_op: what an op of the dense step costs beyond that under "
                                          "autograd and module calls; embedding_op: what one ATen op of a fused "
                                          "group's ops costs its host in a step beyond that (program/issue.py); "
                                          "all_reduce: what the step's gradient all-reduce costs beyond its "
                                          "ring's hop latencies and bytes (gloo's steps between CPU ranks)")
    graph_fixed_us: dict[Literal[FIXED_COST_KINDS], L.LatencyUs] = Field(
        default_factory=dict, description="fixed cost of one op of each kind replayed from a CUDA graph (its kernels' "
                                          "smallest device time, no host issue), us: where the step runs as a graph "
                                          "these replace fixed_us (program/graph_price.py)")
    gather_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of rows gathered and pooled from this "
                                  "device's memory, random rows of a table far larger than the caches")
    gather_cached_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of rows gathered again within a step "
                                  "(cache hits)")
    host_gather_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of rows in pinned host memory gathered by "
                                  "this device")
    stream_GBps: Rate | dict[OpBytes, Rate] | None = Field(
        default=None, description="streaming rate of copies and elementwise ops, bytes read + written per second, "
                                  "GB/s: one rate, or bytes an op touches -> GB/s (small ops run in the caches)")
    stream_warm_GBps: dict[OpBytes, Rate] | None = Field(
        default=None, description="bytes an op touches -> GB/s of the same copies reusing their buffers (operands "
                                  "in whichever cache holds that many bytes); a dense step's traffic is priced "
                                  "warm by the share this table's point at the step's memory says (OpCosts.warm)")
    strided_GBps: dict[OpBytes, Rate] | None = Field(
        default=None, description="bytes an op moves (read + written) -> GB/s of elementwise ops over a transposed "
                                  "view (a gradient added to its transpose), operands cold")
    indexed_GBps: dict[OpBytes, Rate] | None = Field(
        default=None, description="bytes an op moves (read + written, index tensors included) -> GB/s of "
                                  "indexing ops (the dot interaction's triangle: index, index_put)")
    sort_ns_per_id: L.SortNs | dict[SortIds, L.SortNs] | None = Field(
        default=None, description="sorting a step's row ids with their positions and finding the runs, ns per id: "
                                  "one number, or ids sorted -> ns per id (a sort's algorithm changes with the "
                                  "count: torch.sort on a CPU switches to a radix sort at 32,768 ids)")
    segment_reduce_GBps: dict[OpBytes, Rate] | None = Field(
        default=None, description="gradient row bytes -> GB/s of per-lookup gradient rows expanded from the "
                                  "pooled gradients and summed per distinct row")
    update_GBps: dict[Literal[OPTIMIZERS], RowRates] | None = Field(
        default=None, description="optimizer -> storage dtype -> row bytes (weights + fp32 state) -> GB/s of "
                                  "distinct rows read, updated and written back")
    gemm_warm_TFLOPs: dict[Literal["fp32", "tf32", "bf16", "fp16"], dict[str, Rate]] | None = Field(
        default=None, description="as gemm_TFLOPs, with operands in the caches (see stream_warm_GBps)")
    torchrec: TbeCostSpec | None = Field(
        default=None, description="FBGEMM's fused embedding kernels, for steps priced as TorchRec runs them")
    gemm_TFLOPs: dict[Literal["fp32", "tf32", "bf16", "fp16"], dict[str, Rate]] | None = Field(
        default=None, description="dense dtype -> 'MxKxN' or 'MxKxN:tn' (operand layout) -> TFLOP/s measured at "
                                  "that GEMM shape")

    @field_validator("gemm_TFLOPs", "gemm_warm_TFLOPs")
    @classmethod
    def _shapes(cls, v):
        for dtype, table in (v or {}).items():
            for shape in table:
                dims, _, layout = shape.partition(":")
                parts = dims.split("x")
                if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts) or \
                        layout not in ("", "nn", "nt", "tn", "tt"):
                    raise ValueError(f"{dtype}.{shape}: a GEMM shape is written MxKxN with positive integers, "
                                     "optionally :nn, :nt, :tn or :tt (t: that operand is a transposed view)")
        return v


def _reserve_below(memory, reserve: str, capacity: str, what: str):
    """``memory`` (a GpuSpec, HostSpec or TierSpec) when its field ``reserve`` (GiB) is below its ``capacity``;
    else the ValueError naming both (``what``: ' of HBM', the memory's name in the message)."""
    r, c = getattr(memory, reserve), getattr(memory, capacity)
    if r >= c:
        raise ValueError(f"{reserve}: {r:g} GiB reserved of {c:g} GiB{what} leaves nothing for tables; the reserve "
                         f"must be below {capacity}")
    return memory


class GpuSpec(StrictModel):
    """Every GPU of a node template (identical within a template)."""

    model: str
    count: L.GpuCount
    hbm_GiB: L.CapacityGiB = Field(description="HBM capacity per GPU, GiB")
    hbm_bw_GBps: L.BandwidthGBps = Field(description="HBM streaming bandwidth, GB/s (datasheet or measured copy)")
    hbm_gather_efficiency: L.Efficiency = Field(description="fraction of hbm_bw_GBps reached by random row gathers")
    hbm_reserve_GiB: L.ReserveGiB = Field(default=4.0,
                                          description="HBM kept for CUDA context, allocator, workspace, GiB")
    peak_TFLOPs: dict[Literal["fp32", "tf32", "bf16", "fp16"], L.TFLOPs] = Field(
        min_length=1, description="datasheet peak per dense dtype, TFLOP/s")
    compute_efficiency: L.Efficiency = Field(description="achievable fraction of peak_TFLOPs for MLP GEMMs")
    kernel_launch_us: L.LatencyUs = Field(default=5.0, description="fixed cost per kernel launched, us")
    graph_kernel_us: L.LatencyUs | None = Field(
        default=None, description="device time of a small kernel replayed from a CUDA graph (no host issue), us; "
                                  "None: opcosts.GRAPH_KERNEL_US (placer calibrate --device cuda measures it)")
    host_read_efficiency: L.Efficiency = Field(
        default=0.5,
        description="fraction of the PCIe link's bandwidth reached when the GPU gathers rows from pinned host memory")
    op_costs: OpCostSpec | None = Field(default=None, description="measured cost of each op kind (placer calibrate)")

    @model_validator(mode="after")
    def _reserve_below_capacity(self) -> "GpuSpec":
        return _reserve_below(self, "hbm_reserve_GiB", "hbm_GiB", " of HBM")


class HostSpec(StrictModel):
    """The host (CPU sockets and DRAM) of a node template."""

    dram_GiB: L.CapacityGiB = Field(description="host DRAM capacity, GiB")
    dram_bw_GBps: L.BandwidthGBps = Field(description="host DRAM bandwidth, GB/s")
    dram_reserve_GiB: L.ReserveGiB = Field(default=16.0, description="DRAM kept for the OS, data loader, runtime, GiB")
    cpu_cores: L.CpuCores
    cpu_gather_GBps: L.BandwidthGBps = Field(
        description="bytes/s of embedding rows the CPU gathers and pools from DRAM, all cores together, GB/s")
    cpu_peak_TFLOPs: L.TFLOPs = Field(default=1.0, description="CPU fp32 peak, all cores, TFLOP/s")
    op_costs: OpCostSpec | None = Field(default=None, description="measured cost of each op kind on the CPU "
                                                                  "(host tables' lookups, sorts and updates)")

    @model_validator(mode="after")
    def _reserve_below_capacity(self) -> "HostSpec":
        return _reserve_below(self, "dram_reserve_GiB", "dram_GiB", " of DRAM")


class NicSpec(StrictModel):
    """Network interfaces of a node template, named nic0..nic{count-1}; each reaches the fabric."""

    count: L.NicCount
    bw_GBps: L.BandwidthGBps = Field(description="per NIC, per direction, GB/s (400 Gb/s NDR = 50 GB/s)")
    latency_us: L.LatencyUs = Field(default=2.0, description="us")


class TierSpec(StrictModel):
    """A memory of the node beyond its GPUs' HBM and its host's DRAM (a CXL memory expander, a Grace's LPDDR over
    NVLink-C2C, ...): a device named ``name``, joined to the node by its ``links``, that holds the cold rows of GPU
    shards (a shard's hottest rows in its GPU's HBM, the rest in its host's DRAM or in one such tier: Shard.
    cold_memory). A GPU reads its rows as it reads host memory (zero-copy gathers across the links of its path):
    at ``read_efficiency`` of the path's narrowest link, and ``bw_GBps`` is the tier's own bandwidth, shared by
    every read and write of it."""

    name: L.Name
    GiB: L.CapacityGiB = Field(description="capacity, GiB")
    bw_GBps: L.BandwidthGBps = Field(description="the memory's own bandwidth, GB/s")
    reserve_GiB: L.ReserveGiB = Field(default=0.0, description="capacity kept back, GiB")
    read_efficiency: L.Efficiency = Field(
        default=0.5, description="fraction of the narrowest link on a GPU's path to it reached by row gathers")

    @model_validator(mode="after")
    def _reserve_below_capacity(self) -> "TierSpec":
        return _reserve_below(self, "reserve_GiB", "GiB", "")


class LinkSpec(StrictModel):
    """A link between two devices of the same node. An endpoint may be a glob ("gpu*"): a glob against a
    single device makes one link per match; two globs of equal size are paired in order (gpu0-nic0, ...)."""

    kind: Literal[tuple(LINK_KINDS)]  # specs/kinds.py: nvlink, pcie, network
    between: tuple[str, str]
    bw_GBps: L.BandwidthGBps = Field(description="bandwidth per direction, GB/s")
    latency_us: L.LatencyUs = Field(default=1.0, description="us")
    pcie_gen: L.count(7) | None = None
    efficiency: L.Efficiency = Field(default=1.0, description="achievable fraction of bw_GBps for bulk copies")


#: a switch name may not look like a device of another kind, nor hold a path separator or glob characters
_GENERATED_NAME = re.compile(r"^(gpu|nic)\d+$|^host$|^fabric$")
_BAD_NAME_CHARS = set("/*?[]! \t\n")


class NodeTemplate(StrictModel):
    """One kind of node: its GPUs, host, switches, NICs and the links between them."""

    description: str = ""
    gpus: GpuSpec
    host: HostSpec
    switches: list[L.Name] = Field(default_factory=list, max_length=L.MAX_SWITCHES_PER_NODE)
    nics: NicSpec | None = None
    #: memories beyond HBM and host DRAM, each a device of the node (TierSpec), in the order a reader lists them
    tiers: list[TierSpec] = Field(default_factory=list, max_length=L.MAX_TIERS_PER_NODE)
    links: list[LinkSpec]
    unified_memory: bool = Field(
        default=False,
        description="the 'GPUs' are CPU processes (placer run --device cpu): device memory and host memory are one "
                    "RAM (host.dram_GiB holds both), copies between them are not made, and host-table work runs on "
                    "the cores of the node's first 'GPU' (one stream)")

    @cached_property
    def device_kinds(self) -> dict[str, str]:
        """Local device name -> its declared kind ('gpu', 'host', 'switch', 'nic', 'memory'), in device order. The
        kind comes from where the device is declared (gpus, host, switches, nics, tiers), never from its name."""
        kinds = {f"gpu{i}": GPU for i in range(self.gpus.count)}
        kinds["host"] = HOST
        kinds.update((s, SWITCH) for s in self.switches)
        if self.nics:
            kinds.update((f"nic{i}", NIC) for i in range(self.nics.count))
        kinds.update((m.name, MEMORY) for m in self.tiers)
        return kinds

    @cached_property
    def device_names(self) -> list[str]:
        """Local device names of one node built from this template."""
        return list(self.device_kinds)

    def expand(self, pattern: str) -> list[str]:
        """Devices a link endpoint names (a glob may match several)."""
        if pattern in self.device_kinds:
            return [pattern]
        return [n for n in self.device_names if fnmatch.fnmatchcase(n, pattern)]

    @model_validator(mode="after")
    def _names_and_links(self) -> "NodeTemplate":
        seen_switch: dict[str, int] = {}
        for i, s in enumerate(self.switches):
            if not s or _GENERATED_NAME.match(s) or s.startswith("nic") or set(s) & _BAD_NAME_CHARS:
                raise ValueError(f"switches[{i}]: switch name {s!r} is empty, clashes with a GPU, host or NIC name "
                                 "(gpuN, host, nicN) or holds '/', a space or glob characters")
            if s in seen_switch:
                raise ValueError(f"switches[{i}]: duplicate switch name {s!r} (first at switches[{seen_switch[s]}])")
            seen_switch[s] = i
        for i, m in enumerate(self.tiers):
            if _GENERATED_NAME.match(m.name) or m.name.startswith("nic") or set(m.name) & _BAD_NAME_CHARS:
                raise ValueError(f"tiers[{i}].name: {m.name!r} clashes with a GPU, host or NIC name (gpuN, host, "
                                 "nicN) or holds '/', a space or glob characters")
            if m.name in seen_switch or any(m.name == o.name for o in self.tiers[:i]):
                raise ValueError(f"tiers[{i}].name: {m.name!r} names another device of the node already")
        if self.tiers and self.unified_memory:
            raise ValueError("tiers: a unified-memory node (CPU processes) has one RAM; it has no memory tiers")
        if self.unified_memory:
            reserve = self.host.dram_reserve_GiB + self.gpus.hbm_reserve_GiB * self.gpus.count
            if reserve >= self.host.dram_GiB:
                raise ValueError(f"host.dram_reserve_GiB: on a unified-memory node the host and every GPU reserve "
                                 f"{reserve:g} GiB of the one RAM (dram_reserve_GiB + count x hbm_reserve_GiB), at "
                                 f"or above host.dram_GiB = {self.host.dram_GiB:g}")
        known = ", ".join(_compact_names(self.device_kinds))
        first_link: dict[frozenset, int] = {}
        for i, link in enumerate(self.links):
            sides = [self.expand(p) for p in link.between]
            for pattern, matches in zip(link.between, sides):
                if not matches:
                    raise ValueError(f"links[{i}].between: unknown device {pattern!r} (known: {known})")
            if len(sides[0]) > 1 and len(sides[1]) > 1 and len(sides[0]) != len(sides[1]):
                raise ValueError(f"links[{i}].between: globs match {len(sides[0])} and {len(sides[1])} devices; "
                                 "two globs must match the same number to be paired")
            for a, b in self.link_pairs(link):
                if a == b:
                    raise ValueError(f"links[{i}].between: a link from a device to itself ({a})")
                pair = frozenset((a, b))
                if pair in first_link:
                    j = first_link[pair]
                    same = "the same link" if self.links[j].kind == link.kind else \
                        f"a second link ({self.links[j].kind} and {link.kind}; placer keeps one link per pair)"
                    raise ValueError(f"links[{i}].between: {same} between {a} and {b} as links[{j}]")
                first_link[pair] = i
        return self

    @cached_property
    def num_link_pairs(self) -> int:
        """Links one node of this template has, globs expanded."""
        return sum(len(self.link_pairs(link)) for link in self.links)

    def link_pairs(self, link: LinkSpec) -> list[tuple[str, str]]:
        """The (a, b) local device pairs one LinkSpec stands for."""
        a, b = (self.expand(p) for p in link.between)
        if len(a) > 1 and len(b) > 1:
            return list(zip(a, b))
        return [(x, y) for x in a for y in b]


def _compact_names(kinds: dict[str, str]) -> list[str]:
    """'gpu0..gpu7, host, nvswitch, nic0..nic7' from device name -> kind."""
    gpus = [n for n, k in kinds.items() if k == GPU]
    nics = [n for n, k in kinds.items() if k == NIC]
    rest = [n for n, k in kinds.items() if k not in (GPU, NIC)]
    out = [gpus[0] if len(gpus) == 1 else f"gpu0..gpu{len(gpus) - 1}"] if gpus else []
    out += rest
    if nics:
        out.append(nics[0] if len(nics) == 1 else f"nic0..nic{len(nics) - 1}")
    return out


class NodeGroup(StrictModel):
    """``count`` nodes built from ``template``."""

    template: str
    count: L.NodeCount = 1


class FabricSpec(StrictModel):
    """The network between nodes: a non-blocking switch every NIC reaches at the NIC's own bandwidth."""

    kind: str = "infiniband"
    latency_us: L.LatencyUs = Field(default=5.0, description="switch latency between NICs, us")


class HardwareSpec(StrictModel):
    """A whole machine or cluster. Build the graph with ``placer.topology.Topology(spec)``."""

    schema_version: Literal[1] = 1
    name: L.Name
    description: str = ""
    templates: dict[L.NonEmptyName, NodeTemplate]
    nodes: list[NodeGroup] = Field(min_length=1)
    fabric: FabricSpec | None = None
    source_path: str | None = Field(default=None, exclude=True)
    sha256: str | None = Field(default=None, exclude=True)

    @field_validator("templates")
    @classmethod
    def _some_template(cls, v: dict) -> dict:
        if not v:
            raise ValueError("at least one node template is required")
        return v

    @model_validator(mode="after")
    def _nodes_use_known_templates(self) -> "HardwareSpec":
        for i, group in enumerate(self.nodes):
            if group.template not in self.templates:
                raise ValueError(f"nodes[{i}].template: unknown template {group.template!r} "
                                 f"(known: {', '.join(self.templates)})")
        totals = {"nodes": (self.num_nodes, L.MAX_NODES), "GPUs": (self.num_gpus, L.MAX_TOTAL_GPUS),
                  "devices": (sum(len(self.templates[g.template].device_kinds) * g.count for g in self.nodes),
                              L.MAX_TOTAL_DEVICES),
                  "links": (sum(self.templates[g.template].num_link_pairs * g.count for g in self.nodes),
                            L.MAX_TOTAL_LINKS)}
        for what, (n, most) in totals.items():
            if n > most:
                raise ValueError(f"nodes: the cluster has {n:,} {what}, more than the {most:,} placer models")
        if self.num_nodes > 1:
            if self.fabric is None:
                raise ValueError("fabric: required when there is more than one node")
            for name, t in self.templates.items():
                if t.nics is None:
                    raise ValueError(f"templates.{name}.nics: required when there is more than one node")
        return self

    @property
    def num_nodes(self) -> int:
        return sum(g.count for g in self.nodes)

    def node_templates(self) -> list[tuple[str, NodeTemplate]]:
        """(node name, template) for every node, in order: node0, node1, ..."""
        out = []
        for group in self.nodes:
            for _ in range(group.count):
                out.append((f"node{len(out)}", self.templates[group.template]))
        return out

    @property
    def num_gpus(self) -> int:
        return sum(self.templates[g.template].gpus.count * g.count for g in self.nodes)

    def with_gpu_count(self, nodes: int) -> "HardwareSpec":
        """The same spec with its first node group replicated to ``nodes`` nodes (for what-if sweeps), validated
        again (a multi-node spec needs a fabric and NICs). Raises SpecError for a count that is not a whole
        number from 1 to MAX_NODES, or a spec the new count makes invalid."""
        if isinstance(nodes, bool) or not isinstance(nodes, numbers.Integral) or not 1 <= nodes <= L.MAX_NODES:
            raise SpecError(f"the node count must be a whole number from 1 to {L.MAX_NODES:,}, got {nodes!r}",
                            file=self.source_path, field="nodes")
        nodes = int(nodes)
        data = self.model_dump()
        data.update(nodes=[{"template": self.nodes[0].template, "count": nodes}], name=f"{self.name}-x{nodes}")
        try:
            spec = HardwareSpec.model_validate(data)
        except ValidationError as exc:
            raise validation_to_spec_error(exc, self.source_path) from None
        return spec.model_copy(update={"source_path": self.source_path, "sha256": self.sha256})


def load_hardware(path: str | Path, *, allow_implausible: bool = False) -> HardwareSpec:
    """Load and validate a hardware spec (YAML or JSON). Raises SpecError naming file and field, also for a value
    that is most likely a unit mistake (placer/specs/plausible.py) unless ``allow_implausible``; warns
    (placer.specs.plausible.SpecWarning) for other values outside the realistic range of their kind of part."""
    data = read_document(path)
    expect_kind(data, path, "hardware")
    spec = load_model(HardwareSpec, path, data)
    check_plausible(spec, str(path), allow_implausible)  # a likely unit mistake: SpecError; unusual: SpecWarning
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    return spec.model_copy(update={"source_path": str(path), "sha256": digest})
