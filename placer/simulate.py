"""Evaluate any plan with the cost model: step time, throughput, phases, per-device load, bottleneck.

The same arithmetic as the ILP objective (cost.py's formula), so a plan's predicted step time and the
ILP objective that chose it agree to rounding.
"""
from __future__ import annotations

from collections import defaultdict

from placer.cost import PHASES, Cost, CostModel
from placer.errors import SpecError
from placer.plan import Plan
from placer.plan_check import check_plan
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.units import fmt_bytes

MEMORY_SLACK = 1e-9  # relative tolerance on capacity checks (rounding of row counts)


def total_cost(model: CostModel, plan: Plan) -> Cost:
    """Base (dense) cost plus every placement's cost."""
    cost = Cost()
    cost += model.base_cost
    for p in plan.placements:
        cost += model.placement_cost(p)
    return cost


def phase_times(model: CostModel, cost: Cost) -> tuple[list[float], list[str | None]]:
    """Per phase: time (busiest resource + fixed latency) and the busiest resource's name."""
    busiest: list[tuple[float, str | None]] = [(0.0, None)] * len(PHASES)
    for (phase, res), seconds in cost.total_loads().items():
        if seconds > busiest[phase][0]:
            busiest[phase] = (seconds, res)
    lat = model.fixed_latency_s
    return [b[0] + lat[p] for p, b in enumerate(busiest)], [b[1] for b in busiest]


def memory_overflows(model: CostModel, cost: Cost) -> list[tuple[str, float, float]]:
    """(memory, bytes placed by tables, bytes usable for tables) for every memory over its capacity."""
    base = model.base_cost.memory
    out = []
    for name, usable in model.usable_memory.items():
        placed = cost.memory.get(name, 0.0) - base.get(name, 0.0)
        if placed > usable * (1 + MEMORY_SLACK) + 1:
            out.append((name, placed, usable))
    return out


def predict(model: CostModel, plan: Plan, *, check_memory: bool = True) -> dict:
    """The 'predicted' block of a plan (see docs/design.md 'Plan JSON')."""
    cost = total_cost(model, plan)
    if check_memory:
        over = memory_overflows(model, cost)
        if over:
            name, placed, usable = over[0]
            headroom = model.wl.constraints.hbm_headroom_GiB if model.topo.memories[name].kind == "hbm" else 0
            raise SpecError(f"plan puts {fmt_bytes(placed)} of tables on {name}, which holds "
                            f"{fmt_bytes(max(usable, 0))} for tables"
                            + (f" after the workload's HBM headroom of {headroom:g} GiB "
                               "(constraints.hbm_headroom_GiB)" if headroom else "")
                            + (f" (and {len(over) - 1} more memories over capacity)" if len(over) > 1 else ""),
                            field="placements")
    times, resources = phase_times(model, cost)
    step = sum(times)
    devices: dict[str, dict] = {}
    topo = model.topo
    busy: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (phase, res), seconds in cost.total_loads().items():
        device = topo.resources[res].device
        busy[device][f"{PHASES[phase]}:{topo.resources[res].kind}"] += seconds
    for g in topo.gpus:
        host = topo.host_of(g)
        mem = topo.memory_of(g)
        own = mem == g  # a GPU whose memory is another's (none shipped) shows none of its own
        devices[g] = {"hbm_used_bytes": cost.memory.get(mem, 0.0) if own else 0.0,
                      "hbm_capacity_bytes": topo.memories[mem].capacity_bytes if own else 0.0,
                      "hbm_reserve_bytes": topo.memories[mem].reserve_bytes if own else 0.0,
                      "busy_s": dict(busy.get(g, {}))}
        devices.setdefault(host, {"host_used_bytes": cost.memory.get(host, 0.0),
                                  "host_capacity_bytes": topo.memories[host].capacity_bytes,
                                  "host_reserve_bytes": topo.memories[host].reserve_bytes,
                                  "busy_s": dict(busy.get(host, {}))})
        for tier in topo.tiers_of(g):  # a node's memory tiers (the spec's tiers), where it has any
            devices.setdefault(tier, {"tier_used_bytes": cost.memory.get(tier, 0.0),
                                      "tier_capacity_bytes": topo.memories[tier].capacity_bytes,
                                      "tier_reserve_bytes": topo.memories[tier].reserve_bytes,
                                      "busy_s": dict(busy.get(tier, {}))})
    worst = max(range(len(PHASES)), key=lambda p: times[p])
    return {
        "step_time_s": step,
        "throughput_samples_per_s": model.B / step if step > 0 else float("inf"),
        "phases_s": {PHASES[p]: times[p] for p in range(len(PHASES))},
        "phase_bottlenecks": {PHASES[p]: resources[p] for p in range(len(PHASES)) if resources[p]},
        "devices": devices,
        "bottleneck": f"{resources[worst]} ({PHASES[worst]})" if resources[worst] else "none",
    }


def simulate(plan: Plan, topology: Topology, workload: Workload, *, check: bool = True,
             file: str | None = None) -> dict:
    """Check ``plan`` against the machine and workload, then predict it. Returns the 'predicted' block."""
    if check:
        check_plan(plan, topology, workload, file=file)
    return predict(CostModel(topology, workload), plan)
