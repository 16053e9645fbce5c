"""The physics floor of a plan: the step a production-class trainer would take on the hardware spec's datasheet.

A production trainer (FBGEMM's fused embedding kernels, a step replayed from a CUDA graph) pays for bytes and
FLOPs, not for issuing each op from Python. The floor prices the plan's step program with the spec's datasheet
rates (the spec's calibrated ``op_costs`` left out: opcosts.py's DATASHEET DEFAULTS, gathers at
``hbm_gather_efficiency`` of the HBM bandwidth, GEMMs at ``compute_efficiency`` of peak) and no fixed cost per
GPU kernel, plus one launch of the whole step (``kernel_launch_us``). Host CPU work keeps its per-op cost (a host
table's lookups are eager in every trainer). A GPU run reports its measured step over this floor (issue 48 item 6):
how far the runner is from what the hardware allows.
"""
from __future__ import annotations

from placer.cost import CostModel
from placer.plan import Plan
from placer.simulate import predict
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.units import us_to_s


def with_gpus(topo: Topology, change) -> Topology:
    """``topo``'s machine with every template's GPU spec replaced by ``change(gpus)``."""
    spec = topo.spec
    templates = {name: t.model_copy(update={"gpus": change(t.gpus)}) for name, t in spec.templates.items()}
    return Topology(spec.model_copy(update={"templates": templates}), topo.dense_dtype)


def step_launch_s(topo: Topology, graphs: int = 1) -> float:
    """Seconds to launch ``graphs`` whole steps (graphs): one kernel launch each, the slowest template's
    kernel_launch_us."""
    return graphs * us_to_s(max(t.gpus.kernel_launch_us for t in topo.spec.templates.values()))


def floor_topology(topo: Topology) -> Topology:
    """``topo``'s machine at datasheet rates with no fixed cost per GPU kernel (module docstring)."""
    return with_gpus(topo, lambda g: g.model_copy(update={"op_costs": None, "kernel_launch_us": 0.0}))


def floor_step_s(topo: Topology, workload: Workload, plan: Plan) -> float:
    """Seconds of ``plan``'s step on ``topo`` as a production-class trainer would take it: the program priced by
    floor_topology, plus one step launch (step_launch_s)."""
    step = predict(CostModel(floor_topology(topo), workload), plan, check_memory=False)["step_time_s"]
    return step + step_launch_s(topo)
