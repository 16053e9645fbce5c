"""Node-local tables on several nodes (issue 39 target): what the network carries per step with and without them,
and whether the ILP makes a table node-local only where that lowers the predicted step.

For a workload that allows node_local on some tables (default: workloads/criteo-terabyte-node-local.yaml on
hardware_specs/dgx-h100-2node.yaml), it solves twice under the same limit: as written, and with node_local
cleared on every table (the plain menu). For each plan: the predicted step (ms) and the bytes per step its step
program sends between nodes (program/node_local_ops.network_bytes: every NIC -> fabric link's load), by table;
the allowed tables' share of the plain plan's cross-node embedding bytes. Then, holding the rest of the
node-local plan, every allowed table flipped alone (node-local -> its first node's replica as one shared copy,
shared -> a replica per node of it where it lies on one node), each re-priced: the step with the table node-local
and without; and the plain plan with the allowed tables made node-local, the rest held (each alone, then all).
Pricing only, no timing. Run:

    python3 -m validation.node_local_traffic [--hardware H] [--workload W] [--time-limit S] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import sys

from placer.cost import CostModel
from placer.node_local import one_replica, per_node
from placer.plan import Plan
from placer.planner.solve import SolveConfig, solve
from placer.program.build import plan_ops
from placer.program.node_local_ops import network_bytes
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

MB = 1e6  # bytes per MB (decimal), for the report


def cross_node(model: CostModel, plan: Plan) -> dict[str, float]:
    """Bytes per step sent between nodes by ``plan``, by table ('' the dense all-reduce)."""
    return network_bytes(plan_ops(model.builder, plan.placements), model.topo)


def step_ms(model: CostModel, placements) -> float | None:
    """Predicted step of ``placements`` (ms); None where they do not fit in memory."""
    plan = Plan(hardware={"name": model.topo.spec.name}, workload={"name": model.wl.name}, method="what-if",
                placements=placements)
    try:
        return predict(model, plan)["step_time_s"] * 1e3
    except Exception:  # noqa: BLE001 - an over-full memory: the what-if does not fit
        return None


def flipped(model: CostModel, plan: Plan, i: int):
    """Placement ``i`` of ``plan`` with node-locality flipped (None where it cannot be: spread over nodes)."""
    p = plan.placements[i]
    if p.node_local:
        return one_replica(p, len(model.topo.nodes))
    first = model.topo.nodes[0] + "/"
    if p.sharding not in ("table_wise", "row_wise", "column_wise") or p.compression is not None:
        return None
    nodes = {model.topo.node_of[s.device] for s in p.shards}
    if len(nodes) != 1:
        return None
    moved = p.model_copy(update={"shards": [s.model_copy(update={"device": first + s.device.split("/", 1)[1]})
                                            for s in p.shards]})
    return per_node(moved, model.topo.nodes)


def report(hardware: str, workload: str, time_limit: float) -> dict:
    topo = Topology(load_hardware(hardware))
    wl = load_workload(workload)
    allowed = [t.name for t in wl.tables if t.node_local]
    plain_wl = wl.model_copy(update={"tables": [t.model_copy(update={"node_local": False}) for t in wl.tables]})
    out: dict = {"hardware": hardware, "workload": workload, "time_limit_s": time_limit, "allowed": allowed}
    plans = {}
    for name, w in (("node_local", wl), ("plain", plain_wl)):
        plan = solve(topo, w, SolveConfig(time_limit_s=time_limit))
        model = CostModel(topo, w)
        net = cross_node(model, plan)
        plans[name] = (model, plan)
        out[name] = {"step_ms": plan.predicted["step_time_s"] * 1e3,
                     "node_local_tables": [p.table for p in plan.placements if p.node_local],
                     "cross_node_MB": sum(net.values()) / MB,
                     "cross_node_embedding_MB": sum(v for k, v in net.items() if k) / MB,
                     "cross_node_allowed_MB": sum(net.get(t, 0.0) for t in allowed) / MB,
                     "cross_node_dense_MB": net.get("", 0.0) / MB}
    plain = out["plain"]
    plain["allowed_share_of_embedding"] = plain["cross_node_allowed_MB"] / plain["cross_node_embedding_MB"]
    out["cross_node_fall"] = 1 - out["node_local"]["cross_node_MB"] / plain["cross_node_MB"]
    out["cross_node_embedding_fall"] = 1 - (out["node_local"]["cross_node_embedding_MB"]
                                            / plain["cross_node_embedding_MB"])
    model, plan = plans["node_local"]
    flips = []
    for i, p in enumerate(plan.placements):
        if p.table not in allowed:
            continue
        other = flipped(model, plan, i)
        if other is None:
            flips.append({"table": p.table, "chosen": p.label(), "flip": "not flippable (over several nodes)"})
            continue
        alt = step_ms(model, plan.placements[:i] + [other] + plan.placements[i + 1:])
        mine = out["node_local"]["step_ms"]
        local, shared = (mine, alt) if p.node_local else (alt, mine)
        flips.append({"table": p.table, "chosen": p.label(), "step_ms_node_local": local, "step_ms_shared": shared})
    out["flips"] = flips
    out["plain_made_node_local"] = _all_flipped(CostModel(topo, wl), plans["plain"][1], allowed)
    return out


def _all_flipped(model: CostModel, plan: Plan, allowed: list[str]) -> dict:
    """The plain plan with the allowed tables made node-local (each a replica per node where it lies), the rest
    held: each alone, then all together; steps (ms) and cross-node bytes (MB)."""
    out, placements = {"each_step_ms": {}}, list(plan.placements)
    for i, p in enumerate(plan.placements):
        other = flipped(model, plan, i) if p.table in allowed else None
        if other is not None:
            out["each_step_ms"][p.table] = step_ms(model, plan.placements[:i] + [other] + plan.placements[i + 1:])
            placements[i] = other
    together = plan.model_copy(update={"placements": placements})
    out["all_step_ms"] = step_ms(model, placements)
    out["all_cross_node_MB"] = sum(cross_node(model, together).values()) / MB
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hardware", default="hardware_specs/dgx-h100-2node.yaml")
    ap.add_argument("--workload", default="workloads/criteo-terabyte-node-local.yaml")
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per solve")
    ap.add_argument("--out", help="write the report JSON here")
    args = ap.parse_args(argv)
    out = report(args.hardware, args.workload, args.time_limit)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
