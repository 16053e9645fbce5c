"""The kinds of device and link a hardware spec describes: one registry, so that a new kind is one entry here.

A device's kind is where the spec declares it (``NodeTemplate.device_kinds``: the ``gpus``, the ``host``, its
``switches``, ``nics`` and memory ``tiers``), never read from its name. Each kind says what it is, the template
field that declares it, whether it runs ops (a stream of its own, priced by the op costs of its kind:
program/opcosts.py ``OP_COSTS_OF_KIND``), and its colour in the machine plot. A link kind says what it is, the
realistic range of its bandwidth (plausible.py warns outside it, or refuses a likely unit mistake) and its colour;
a link is priced by its bandwidth, latency and efficiency whatever its kind (program/traffic.py), so a new link
kind needs no code beyond its entry. A new memory tier is data, not a kind: a node template's ``tiers``
(docs/specs.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from placer.specs.ranges import GBITS, NIC_BW_GBps, TBPS, Range


@dataclass(frozen=True)
class DeviceKind:
    """A kind of device: its ``name``, what it is, the template field that declares it, whether it runs ops
    (``runs_ops``: its op costs are program/opcosts.OP_COSTS_OF_KIND's) and its plot colour."""

    name: str
    what: str
    declared_by: str
    runs_ops: bool
    color: str


@dataclass(frozen=True)
class LinkKind:
    """A kind of link: its ``name``, what it is, the realistic range of its bandwidth per direction (GB/s) and
    its plot colour."""

    name: str
    what: str
    bw_GBps: Range
    color: str


GPU, HOST, SWITCH, NIC, MEMORY = "gpu", "host", "switch", "nic", "memory"

DEVICE_KINDS: dict[str, DeviceKind] = {k.name: k for k in (
    DeviceKind(GPU, "an accelerator with its HBM (or a CPU process, on a unified-memory node)", "gpus", True,
               "#76b900"),
    DeviceKind(HOST, "the node's CPUs and DRAM: host rows, the CPU's own lookups", "host", True, "#9467bd"),
    DeviceKind(SWITCH, "a PCIe or NVLink switch: routes, no ops", "switches", False, "#7f7f7f"),
    DeviceKind(NIC, "a network card: the node's way to the fabric", "nics", False, "#ff7f0e"),
    DeviceKind(MEMORY, "a memory tier (CXL, LPDDR over NVLink-C2C, ...): cold rows a GPU reads over links",
               "tiers", False, "#8c564b"),
)}

LINK_KINDS: dict[str, LinkKind] = {k.name: k for k in (
    LinkKind("nvlink", "GPU to GPU (or to an NVSwitch) over NVLink", Range(1.0, 2_000.0, (20.0, 1_800.0), "GB/s",
                                                                          GBITS, TBPS), "#2ca02c"),
    LinkKind("pcie", "PCIe between a GPU, a switch, the host, a NIC or a memory tier",
             Range(0.05, 256.0, (1.0, 128.0), "GB/s", GBITS, TBPS), "#1f77b4"),
    LinkKind("network", "a NIC to the fabric (between nodes)", NIC_BW_GBps, "#ff7f0e"),
)}

#: The link kind of the NICs' links to the fabric (the Topology adds them: a spec's fabric has no links of its own).
FABRIC_LINK = "network"
