"""What a plan needs in memory on THIS machine, checked before anything is allocated.

Computed from the step program's buffers (placer/program/build.py, the numbers the planner's memory rows
sum; every GPU of the plan folded onto the one local device): rows and optimizer state where they live, pooled
outputs and gradients, the backward's per-lookup workspace, replicas' dense gradients, split shards' slot maps,
the step's input ids; plus what the runner holds per member beyond them (the pooled gradient autograd hands
over before it is packed, and a fixed allowance per member for its Python objects: a plan of 20,000 one-row
shards must not be under-counted); plus the dense model at the whole batch, the batch pool on the device and
its CPU copy, and the build's transient rank permutations. A margin is added (MARGIN_FRACTION + MARGIN_BYTES).
On a CPU run, device and host needs both come out of RAM.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from placer.errors import InfeasibleError
from placer.plan import Plan
from placer.program.build import ProgramBuilder
from placer.program.dense import trace
from placer.runner.batches import batch_bytes_estimate
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.units import GiB, fmt_bytes

MARGIN_FRACTION = 0.10
#: fp32 gradient of a member's pooled output, as autograd hands it to the backward before pack_grad copies it
#: into the group's packed buffer (the program counts the output and the packed gradient): bytes per value
GRAD_BYTES = 4
#: per member of a fused group (a shard, or a part of a hot/cold split), whatever its size: the Slot and Member
#: objects, the member's views and autograd nodes, its arrays in every batch's input step. Measured ~2.5 KiB
#: (tracemalloc and RSS: tiny at batch 8 with 1,000 and 5,000 one-row shards, CPU run); 8 KiB is kept.
PER_MEMBER_BYTES = 8 * 1024
MARGIN_BYTES = {"cuda": 768 * 2**20, "cpu": 512 * 2**20}


@dataclass
class MemoryNeeds:
    """Bytes by purpose, on the local device and in host RAM."""

    device: dict[str, float] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)

    def add(self, where: str, what: str, n: float) -> None:
        bucket = self.device if where == "device" else self.host
        bucket[what] = bucket.get(what, 0.0) + float(n)

    @property
    def device_total(self) -> float:
        return sum(self.device.values())

    @property
    def host_total(self) -> float:
        return sum(self.host.values())


def estimate_needs(plan: Plan, workload: Workload, topology: Topology, device_type: str, pool_batches: int
                   ) -> MemoryNeeds:
    """Memory the runner will allocate for ``plan`` (before the margin): the step program's buffers
    (program/build.py: the same numbers the planner's memory rows sum), every plan GPU's on the local device
    and every host's in RAM, the dense model at the whole batch (one process runs it), the batch pool (and its
    CPU copy on a GPU run) and the build's transient rank permutations."""
    need = MemoryNeeds()
    builder = ProgramBuilder(topology, workload)
    gpu_memories = {topology.memory_of(g) for g in topology.gpus} - set(topology.hosts)
    for p in plan.placements:
        for b in builder.placement_buffers(p):
            need.add("device" if b.memory in gpu_memories else "host", b.purpose, b.bytes)
        for key, m in builder.members(p):  # what the runner holds per member beyond the program's buffers
            where = "device" if topology.memory_of(key.device) in gpu_memories else "host"
            need.add(where, "pooled gradients from autograd (before pack_grad)",
                     m.bags * (m.cols[1] - m.cols[0]) * GRAD_BYTES)
            need.add("host", "per-member objects", PER_MEMBER_BYTES)
    dense = trace(workload, workload.batch_size, "cuda" if device_type == "cuda" else "cpu")
    need.add("device", "dense model", dense.resident_bytes(workload.resolved_dense_optimizer.name))
    per_batch = batch_bytes_estimate(workload, plan)
    need.add("device", "batch pool", per_batch * pool_batches)
    if device_type == "cuda":
        need.add("host", "batch pool (CPU copy)", per_batch * pool_batches)
    need.add("host", "rank permutations (build)", 4.0 * sum(t.rows for t in workload.tables)
             + 8.0 * max(t.rows for t in workload.tables))
    return need


def meminfo_available_bytes() -> float | None:
    """MemAvailable from /proc/meminfo, bytes (None where there is no /proc/meminfo)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def device_free_bytes(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return float(free)


def with_margin(n: float, device_type: str) -> float:
    return n * (1 + MARGIN_FRACTION) + MARGIN_BYTES.get(device_type, MARGIN_BYTES["cpu"])


def check_memory(need: MemoryNeeds, device: torch.device, *, host_available: float | None = None,
                 device_free: float | None = None) -> dict:
    """Refuse (InfeasibleError) when the plan cannot fit this machine; returns the numbers compared."""
    kind = device.type
    host_available = meminfo_available_bytes() if host_available is None else host_available
    if kind == "cuda" and device_free is None:
        device_free = device_free_bytes(device)
    if kind == "cuda":
        dev_need = with_margin(need.device_total, kind)
        host_need = with_margin(need.host_total, "cpu")
    else:
        dev_need = 0.0
        host_need = with_margin(need.device_total + need.host_total, kind)
    report = {"device_needed_bytes": dev_need, "device_free_bytes": device_free,
              "host_needed_bytes": host_need, "host_available_bytes": host_available,
              "device_breakdown_bytes": dict(need.device), "host_breakdown_bytes": dict(need.host)}
    problems = []
    if kind == "cuda" and device_free is not None and dev_need > device_free:
        problems.append(f"{fmt_bytes(dev_need)} of GPU memory ({_top(need.device)}), but {device} has "
                        f"{fmt_bytes(device_free)} free")
    if host_available is not None and host_need > host_available:
        where = "RAM (device and host parts together on a CPU run)" if kind != "cuda" else "host RAM"
        parts = _top({**need.device, **need.host} if kind != "cuda" else need.host)
        problems.append(f"{fmt_bytes(host_need)} of {where} ({parts}), but MemAvailable is "
                        f"{fmt_bytes(host_available)}")
    if problems:
        worst = max((dev_need / device_free) if (kind == "cuda" and device_free) else 0.0,
                    host_need / host_available if host_available else 0.0)
        raise InfeasibleError("the plan does not fit this machine: it needs " + "; and ".join(problems)
                              + f" (margin {MARGIN_FRACTION:.0%} + {fmt_bytes(MARGIN_BYTES.get(kind, 0))} "
                              f"included). Try --scale {max(2, int(worst * 1.5 + 1))} (divides every table's "
                              "rows), or a plan for this machine (placer calibrate, then placer solve).")
    return report


def _top(parts: dict[str, float]) -> str:
    """Every part summed, largest first."""
    items = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)
    return ", ".join(f"{k} {fmt_bytes(v)}" for v, k in items) or "nothing"


__all__ = ["MemoryNeeds", "estimate_needs", "check_memory", "meminfo_available_bytes", "GiB"]
