"""Hardware spec: node templates (GPUs, host, switches, NICs, links) replicated into a cluster.

Units are in the field names: ``_GiB`` capacities (2**30 bytes), ``_GBps`` bandwidths (1e9 bytes/s, per
direction), ``_us`` latencies, ``_TFLOPs`` compute rates. Efficiencies are fractions in (0, 1] of the
datasheet peak that the named operation reaches (measured by ``placer calibrate``).

Device naming: inside a node the GPUs are ``gpu0..gpuN-1``, the host is ``host``, NICs ``nic0..nicK-1``,
switches by their own names; globally a device is ``<node>/<local name>``, nodes ``node0..`` in file order.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from placer.specs.common import StrictModel
from placer.specs.loading import load_model, read_document

Fraction = float
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: op kinds with a fixed cost per op (placer/program/ops.py lists which ops each kind covers)
OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad", "adam")
FIXED_COST_KINDS = ("lookup", "sort", "segment_reduce", "copy", "elementwise", "view", "gemm", "collective",
                    "dense_op") + tuple(f"update_{o}" for o in OPTIMIZERS)
StorageDtype = Literal["fp32", "fp16"]
RowRates = dict[StorageDtype, dict[PositiveInt, Rate]]  # storage dtype -> row bytes -> GB/s


class OpCostSpec(StrictModel):
    """What each kind of op the runner executes costs on one device (placer/program/opcosts.py prices ops with
    it): ``placer calibrate`` measures these. Every field is optional; a missing one takes its datasheet
    default, derived from the device's other fields (opcosts.py says how). Tables keyed by size are
    interpolated in log2 of the size and clamped at their ends."""

    fixed_us: dict[Literal[FIXED_COST_KINDS], Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        default_factory=dict, description="fixed cost of one op of each kind (dispatch + launch + its smallest run), "
                                          "us; dense_op: what an op of the dense step costs beyond that under "
                                          "autograd and module calls")
    gather_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of rows gathered and pooled from this "
                                  "device's memory, random rows of a table far larger than the caches")
    gather_cached_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of rows gathered again within a step "
                                  "(cache hits)")
    host_gather_GBps: RowRates | None = Field(
        default=None, description="storage dtype -> row bytes -> GB/s of rows in pinned host memory gathered by "
                                  "this device")
    stream_GBps: Rate | dict[PositiveInt, Rate] | None = Field(
        default=None, description="streaming rate of copies and elementwise ops, bytes read + written per second, "
                                  "GB/s: one rate, or bytes an op touches -> GB/s (small ops run in the caches)")
    stream_warm_GBps: dict[PositiveInt, Rate] | None = Field(
        default=None, description="bytes an op touches -> GB/s of the same copies reusing their buffers (operands "
                                  "in whichever cache holds that many bytes); a dense step's traffic is priced "
                                  "warm by the share this table's point at the step's memory says (OpCosts.warm)")
    strided_GBps: dict[PositiveInt, Rate] | None = Field(
        default=None, description="bytes an op moves (read + written) -> GB/s of elementwise ops over a transposed "
                                  "view (a gradient added to its transpose), operands cold")
    indexed_GBps: dict[PositiveInt, Rate] | None = Field(
        default=None, description="bytes an op moves (read + written, index tensors included) -> GB/s of "
                                  "indexing ops (the dot interaction's triangle: index, index_put)")
    sort_ns_per_id: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=None, description="sorting a step's row ids with their positions and finding the runs, ns per id")
    segment_reduce_GBps: dict[PositiveInt, Rate] | None = Field(
        default=None, description="gradient row bytes -> GB/s of per-lookup gradient rows expanded from the "
                                  "pooled gradients and summed per distinct row")
    update_GBps: dict[Literal[OPTIMIZERS], RowRates] | None = Field(
        default=None, description="optimizer -> storage dtype -> row bytes (weights + fp32 state) -> GB/s of "
                                  "distinct rows read, updated and written back")
    gemm_warm_TFLOPs: dict[Literal["fp32", "tf32", "bf16", "fp16"], dict[str, Rate]] | None = Field(
        default=None, description="as gemm_TFLOPs, with operands in the caches (see stream_warm_GBps)")
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


class GpuSpec(StrictModel):
    """Every GPU of a node template (identical within a template)."""

    model: str
    count: PositiveInt
    hbm_GiB: PositiveFloat = Field(description="HBM capacity per GPU, GiB")
    hbm_bw_GBps: PositiveFloat = Field(description="HBM streaming bandwidth, GB/s (datasheet or measured copy)")
    hbm_gather_efficiency: float = Field(gt=0, le=1, description="fraction of hbm_bw_GBps reached by random row gathers")
    hbm_reserve_GiB: float = Field(default=4.0, ge=0, description="HBM kept for CUDA context, allocator, workspace")
    peak_TFLOPs: dict[Literal["fp32", "tf32", "bf16", "fp16"], PositiveFloat]
    compute_efficiency: float = Field(gt=0, le=1, description="achievable fraction of peak_TFLOPs for MLP GEMMs")
    kernel_launch_us: float = Field(default=5.0, ge=0, description="fixed cost per kernel launched, us")
    host_read_efficiency: float = Field(
        default=0.5, gt=0, le=1,
        description="fraction of the PCIe link's bandwidth reached when the GPU gathers rows from pinned host memory")
    op_costs: OpCostSpec | None = Field(default=None, description="measured cost of each op kind (placer calibrate)")


class HostSpec(StrictModel):
    """The host (CPU sockets and DRAM) of a node template."""

    dram_GiB: PositiveFloat = Field(description="host DRAM capacity, GiB")
    dram_bw_GBps: PositiveFloat = Field(description="host DRAM bandwidth, GB/s")
    dram_reserve_GiB: float = Field(default=16.0, ge=0, description="DRAM kept for the OS, data loader, runtime")
    cpu_cores: PositiveInt
    cpu_gather_GBps: PositiveFloat = Field(
        description="bytes/s of embedding rows the CPU gathers and pools from DRAM, all cores together, GB/s")
    cpu_peak_TFLOPs: PositiveFloat = Field(default=1.0, description="CPU fp32 peak, all cores, TFLOP/s")
    op_costs: OpCostSpec | None = Field(default=None, description="measured cost of each op kind on the CPU "
                                                                  "(host tables' lookups, sorts and updates)")


class NicSpec(StrictModel):
    """Network interfaces of a node template, named nic0..nic{count-1}; each reaches the fabric."""

    count: PositiveInt
    bw_GBps: PositiveFloat = Field(description="per NIC, per direction, GB/s (400 Gb/s NDR = 50 GB/s)")
    latency_us: float = Field(default=2.0, ge=0)


class LinkSpec(StrictModel):
    """A link between two devices of the same node. An endpoint may be a glob ("gpu*"): a glob against a
    single device makes one link per match; two globs of equal size are paired in order (gpu0-nic0, ...)."""

    kind: Literal["nvlink", "pcie", "network"]
    between: tuple[str, str]
    bw_GBps: PositiveFloat = Field(description="bandwidth per direction, GB/s")
    latency_us: float = Field(default=1.0, ge=0)
    pcie_gen: int | None = Field(default=None, ge=1, le=7)
    efficiency: float = Field(default=1.0, gt=0, le=1, description="achievable fraction of bw_GBps for bulk copies")


class NodeTemplate(StrictModel):
    """One kind of node: its GPUs, host, switches, NICs and the links between them."""

    description: str = ""
    gpus: GpuSpec
    host: HostSpec
    switches: list[str] = Field(default_factory=list)
    nics: NicSpec | None = None
    links: list[LinkSpec]
    unified_memory: bool = Field(
        default=False,
        description="the 'GPUs' are CPU processes (placer run --device cpu): device memory and host memory are one "
                    "RAM (host.dram_GiB holds both), copies between them are not made, and host-table work runs on "
                    "the cores of the node's first 'GPU' (one stream)")

    @cached_property
    def device_names(self) -> list[str]:
        """Local device names of one node built from this template."""
        names = [f"gpu{i}" for i in range(self.gpus.count)] + ["host"] + list(self.switches)
        if self.nics:
            names += [f"nic{i}" for i in range(self.nics.count)]
        return names

    def expand(self, pattern: str) -> list[str]:
        """Devices a link endpoint names (a glob may match several)."""
        return [n for n in self.device_names if fnmatch.fnmatchcase(n, pattern)]

    @model_validator(mode="after")
    def _links_name_known_devices(self) -> "NodeTemplate":
        reserved = {"host"} | {f"gpu{i}" for i in range(self.gpus.count)}
        for s in self.switches:
            if s in reserved or s.startswith("nic"):
                raise ValueError(f"switches: switch name {s!r} clashes with a GPU, host or NIC name")
        known = ", ".join(_compact_names(self.device_names))
        for i, link in enumerate(self.links):
            sides = [self.expand(p) for p in link.between]
            for pattern, matches in zip(link.between, sides):
                if not matches:
                    raise ValueError(f"links[{i}].between: unknown device {pattern!r} (known: {known})")
            if len(sides[0]) > 1 and len(sides[1]) > 1 and len(sides[0]) != len(sides[1]):
                raise ValueError(f"links[{i}].between: globs match {len(sides[0])} and {len(sides[1])} devices; "
                                 "two globs must match the same number to be paired")
            if any(a == b for a, b in self.link_pairs(link)):
                raise ValueError(f"links[{i}].between: a link from a device to itself")
        return self

    def link_pairs(self, link: LinkSpec) -> list[tuple[str, str]]:
        """The (a, b) local device pairs one LinkSpec stands for."""
        a, b = (self.expand(p) for p in link.between)
        if len(a) > 1 and len(b) > 1:
            return list(zip(a, b))
        return [(x, y) for x in a for y in b]


def _compact_names(names: list[str]) -> list[str]:
    gpus = [n for n in names if n.startswith("gpu")]
    nics = [n for n in names if n.startswith("nic")]
    rest = [n for n in names if n not in gpus and n not in nics]
    out = [gpus[0] if len(gpus) == 1 else f"gpu0..gpu{len(gpus) - 1}"] if gpus else []
    out += rest
    if nics:
        out.append(nics[0] if len(nics) == 1 else f"nic0..nic{len(nics) - 1}")
    return out


class NodeGroup(StrictModel):
    """``count`` nodes built from ``template``."""

    template: str
    count: PositiveInt = 1


class FabricSpec(StrictModel):
    """The network between nodes: a non-blocking switch every NIC reaches at the NIC's own bandwidth."""

    kind: str = "infiniband"
    latency_us: float = Field(default=5.0, ge=0)


class HardwareSpec(StrictModel):
    """A whole machine or cluster. Build the graph with ``placer.topology.Topology(spec)``."""

    schema_version: Literal[1] = 1
    name: str
    description: str = ""
    templates: dict[str, NodeTemplate]
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
        """The same spec with its first node group replicated to ``nodes`` nodes (for what-if sweeps)."""
        groups = [NodeGroup(template=self.nodes[0].template, count=nodes)]
        return self.model_copy(update={"nodes": groups, "name": f"{self.name}-x{nodes}"})


def load_hardware(path: str | Path) -> HardwareSpec:
    """Load and validate a hardware spec (YAML or JSON). Raises SpecError naming file and field."""
    data = read_document(path)
    spec = load_model(HardwareSpec, path, data)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    return spec.model_copy(update={"source_path": str(path), "sha256": digest})
