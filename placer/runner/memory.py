"""What a plan needs in memory on THIS machine, checked before anything is allocated.

Computed from the plan's shards as the runner builds them (every GPU of the plan folded onto the one local
device): rows x cols x element bytes + optimizer state (fp32) for every block of rows, the padding row of each
split part, the split shards' two int32 maps, data-parallel gradients, the backward's per-lookup gradient rows of
the largest shard, pooled outputs, the dense model (cost.py's DenseModelCost, the whole global batch on one
device), the batch pool on the device and its CPU copy, and the build's transient rank permutation. A margin
is added (MARGIN_FRACTION + MARGIN_BYTES). On a CPU run, device and host needs both come out of RAM.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from placer.cost import DenseModelCost
from placer.errors import InfeasibleError
from placer.plan import Plan
from placer.runner.batches import batch_bytes_estimate
from placer.runner.optim import state_bytes_per_row
from placer.specs.workload import Workload
from placer.units import GiB, element_bytes, fmt_bytes

MARGIN_FRACTION = 0.10
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


def estimate_needs(plan: Plan, workload: Workload, device_type: str, pool_batches: int) -> MemoryNeeds:
    """Memory the runner will allocate for ``plan`` (before the margin)."""
    need = MemoryNeeds()
    tables = {t.name: t for t in workload.tables}
    opt = workload.optimizer.name
    B = workload.batch_size
    largest_expand = {"device": 0.0, "host": 0.0}
    for p in plan.placements:
        t = tables[p.table]
        e = element_bytes(p.precision)
        F = workload.outputs_per_sample(t.name)
        lookups = B * workload.lookups_per_sample(t.name)
        for s in p.shards:
            n, c, k = s.num_rows, s.num_cols, s.hbm_rows
            row = c * e + state_bytes_per_row(opt, c)
            share = lookups * n / t.rows
            if p.sharding == "host":
                need.add("host", "tables", n * row)
                largest_expand["host"] = max(largest_expand["host"], share * c * 4 * 2)
                need.add("device", "pooled outputs", F * B * c * 4 * 3)
                continue
            if p.sharding == "data_parallel":
                need.add("device", "tables", n * row)
                need.add("device", "data-parallel gradients", n * c * 4)
                need.add("device", "pooled outputs", F * B * c * 4 * 3 / len(p.shards))
                largest_expand["device"] = max(largest_expand["device"], share / len(p.shards) * c * 4)
                continue
            split = 1 if 0 < k < n else 0
            need.add("device", "tables", (k + split) * row if k else 0)
            need.add("host", "tables", (n - k + split) * row if n - k else 0)
            if split:
                need.add("device", "remap", n * 8)  # hot map + cold map, int32
                need.add("host", "remap", n * 4)
            need.add("device", "pooled outputs", F * B * c * 4 * 3)
            largest_expand["device"] = max(largest_expand["device"], share * c * 4 * 2 * (1 + split))
    need.add("device", "backward workspace", largest_expand["device"])
    need.add("host", "backward workspace", largest_expand["host"])
    need.add("device", "dense model", DenseModelCost.of(workload).hbm_bytes(B, opt))
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


def _top(parts: dict[str, float], n: int = 3) -> str:
    items = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)[:n]
    return ", ".join(f"{k} {fmt_bytes(v)}" for v, k in items) or "nothing"


__all__ = ["MemoryNeeds", "estimate_needs", "check_memory", "meminfo_available_bytes", "GiB"]
