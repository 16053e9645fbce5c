"""Where a fused group's rows live and how its device reaches them (GroupKey.location, program/ops.py): the one
place that turns a location into a memory, the device its rows are read from, and whether reads cross links.

- hbm, replica: the device's own memory (a unified-memory node's GPU: its host's RAM);
- uvm: the host's DRAM, read by the GPU across its links (not on a unified-memory node: the same RAM);
- cpu: the host's DRAM, read by the host's CPU;
- tier:<name>: the memory tier <name> of the device's node (the hardware spec's ``tiers``), read by the GPU across
  the links of its path, as host memory is (Topology.read_costs prices its gathers).
"""
from __future__ import annotations

from placer.program.ops import TIER_PREFIX, GroupKey


def tier_location(tier: str) -> str:
    """The location of rows in the memory tier named ``tier`` (a local name: 'cxl0')."""
    return TIER_PREFIX + tier


def rows_memory(topo, key: GroupKey) -> str:
    """The memory (a Topology.memories name) that holds ``key``'s rows."""
    if key.tier is not None:
        return topo.cold_memory_of(key.device, key.tier)
    if key.location in ("hbm", "replica"):
        return topo.memory_of(key.device)
    return topo.memory_of(topo.host_of(key.device))


def reads_across_links(topo, key: GroupKey) -> bool:
    """Whether ``key``'s device reads its rows from another device's memory across links (uvm rows off a
    unified-memory node, a memory tier's rows)."""
    return key.tier is not None or (key.location == "uvm" and not topo.is_unified(key.device))


def rows_source(topo, key: GroupKey) -> str | None:
    """The device whose memory ``key``'s rows are read from when not its own: its host (uvm, cpu) or the tier;
    None for rows in the device's own memory."""
    if key.tier is not None:
        return topo.cold_memory_of(key.device, key.tier)
    return topo.host_of(key.device) if key.location in ("uvm", "cpu") else None
