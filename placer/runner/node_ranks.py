"""Node-local tables in a distributed run (``replicated: per_node``, placer/node_local.py): which replica a rank
holds and which samples it serves.

The ranks stand for the plan's GPUs (plan GPU i on rank i mod N: runner/ranks.py), so they fall into nodes as the
hardware spec groups its GPUs. A node-local table needs every rank inside one node (``check_node_local_ranks``:
in practice one process per plan GPU); then:

- node K's samples are its ranks' sample slices together, one contiguous range [a, b) of the global batch
  (``node_samples``);
- a rank of node K builds node K's replica only: the placement's K-th block of shards (they are listed node by
  node), as a plain placement of that node's GPUs (``local_plan``). Its rows start from the same seeded values on
  every node (runner/groups.init_rows depends on table, row and column only), its shards pool node K's samples
  only, its all-to-all goes to node K's ranks only (runner/exchange.py: a key's ``samples``), and its gradients
  update node K's replica alone (the sharded update; nothing is reduced across nodes).
"""
from __future__ import annotations

from placer.errors import SpecError
from placer.node_local import one_replica
from placer.plan import Plan


def rank_nodes(topo, rmap) -> list[str | None]:
    """Per rank, the one node all its plan GPUs are on; None for a rank whose GPUs span several nodes."""
    out: list[str | None] = []
    for r in range(rmap.world):
        nodes = {topo.node_of[g] for g in rmap.gpus if rmap.rank_of(g) == r}
        out.append(nodes.pop() if len(nodes) == 1 else None)
    return out


def check_node_local_ranks(plan: Plan, topo, rmap, file: str | None = None) -> None:
    """SpecError (exit 2) when ``plan`` has a node-local table and some rank's plan GPUs span several nodes (it
    could not hold one node's replica and serve that node's samples alone); nothing otherwise."""
    first = next((i for i, p in enumerate(plan.placements) if p.node_local), None)
    if first is None:
        return
    nodes = rank_nodes(topo, rmap)
    if None in nodes:
        r = nodes.index(None)
        raise SpecError(f"--nproc {rmap.world}: table {plan.placements[first].table!r} is node-local (a replica per "
                        f"node, trained on that node's samples), but rank {r} runs plan GPUs of several nodes (plan "
                        f"GPU i runs on rank i mod N); run one process per plan GPU (--nproc {len(topo.gpus)})",
                        file=file, field=f"placements[{first}].replicated")


def node_samples(topo, rmap) -> dict[str, tuple[int, int]]:
    """Node -> [start, stop) of the global batch its ranks own together (every rank inside one node:
    ``check_node_local_ranks``)."""
    out: dict[str, tuple[int, int]] = {}
    nodes = rank_nodes(topo, rmap)
    for r, node in enumerate(nodes):
        a, b = rmap.slices[r]
        lo, hi = out.get(node, (a, b))
        out[node] = (min(lo, a), max(hi, b))
    for node, (a, b) in out.items():  # the node's ranks are consecutive (GPUs in node order)
        mine = [rmap.slices[r] for r, n in enumerate(nodes) if n == node]
        if sum(y - x for x, y in mine) != b - a:
            raise SpecError(f"the ranks of {node} do not own one contiguous range of samples")
    return out


def local_plan(plan: Plan, topo, rmap, rank: int) -> tuple[Plan, dict[str, tuple[int, int]]]:
    """(the plan with every node-local placement cut to this rank's node's replica, as a plain placement;
    table -> the samples that replica serves). Other placements as planned."""
    node = rank_nodes(topo, rmap)[rank]
    samples = node_samples(topo, rmap) if any(p.node_local for p in plan.placements) else {}
    placements, served = [], {}
    for p in plan.placements:
        if p.node_local:
            p = one_replica(p, len(topo.nodes), topo.nodes.index(node))
            served[p.table] = samples[node]
        placements.append(p)
    return plan.model_copy(update={"placements": placements}), served
