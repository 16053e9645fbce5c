"""The step's price where it replays as CUDA graphs (runner/graph_step.py): device work, one launch, no host issue.

An eager step is priced as the runner issues it: every GPU op pays its kernels' launches from the host
(``kernel_launch_us`` x kernels, or calibrate's ``fixed_us``), and the runner's ATen ops their host dispatch
(``embedding_op``, ``dense_op``: program/issue.py). Replayed from a graph, the host issues nothing per op: an op
costs its kernels' device time (``graph_kernel_us`` x kernels, or the ``graph_fixed_us`` calibrate measures by
replaying captured op chains) plus its bytes and FLOPs at the same rates, and the step pays one launch per graph.
Host CPU work (rows the host looks up) keeps its eager prices: it stays eager beside the graphs.
"""
from __future__ import annotations

from placer.cost import CostModel
from placer.plan import Plan
from placer.program.floor import step_launch_s, with_gpus
from placer.program.opcosts import GRAPH_KERNEL_US
from placer.simulate import predict
from placer.specs.workload import Workload
from placer.topology import Topology

#: host issue per op: nothing where a graph replays the ops
HOST_ISSUE_KINDS = ("dense_op", "embedding_op")


def graph_gpu(gpu):
    """A GPU template's spec as its ops cost in a graph replay: fixed costs from ``graph_fixed_us`` where
    calibrated, else ``graph_kernel_us`` per kernel (the datasheet defaults), and no host issue."""
    kernel_us = gpu.graph_kernel_us if gpu.graph_kernel_us is not None else GRAPH_KERNEL_US
    costs = gpu.op_costs
    if costs is not None:
        fixed = {k: v for k, v in costs.graph_fixed_us.items() if k not in HOST_ISSUE_KINDS}
        costs = costs.model_copy(update={"fixed_us": {**fixed, **{k: 0.0 for k in HOST_ISSUE_KINDS}}})
    return gpu.model_copy(update={"kernel_launch_us": kernel_us, "op_costs": costs})


def graph_topology(topo: Topology) -> Topology:
    """``topo``'s machine with every GPU priced as graph_gpu says."""
    return with_gpus(topo, graph_gpu)


def predict_graph(topo: Topology, workload: Workload, plan: Plan, graphs: int = 1, *, cpu_reads_host: bool = False
                  ) -> dict:
    """simulate.predict's answer for ``plan`` with the step replayed as ``graphs`` CUDA graphs: the program priced
    on graph_topology, each graph's launch added to the step (and to its throughput)."""
    out = predict(CostModel(graph_topology(topo), workload, cpu_reads_host=cpu_reads_host), plan, check_memory=False)
    launch = step_launch_s(topo, graphs)
    out["step_time_s"] += launch
    if "samples_per_s" in out and out["step_time_s"] > 0:
        out["samples_per_s"] = workload.batch_size / out["step_time_s"]
    out["graph_launch_s"] = launch
    return out
