"""placer: where the embedding tables of a DLRM live during training, and proof of it.

Public API (re-exports only): load_hardware, load_workload, Topology, Plan, load_plan.
"""
from placer.plan import Plan, load_plan
from placer.specs import HardwareSpec, Workload, load_hardware, load_workload
from placer.topology import Topology

__all__ = ["HardwareSpec", "Plan", "Topology", "Workload", "load_hardware", "load_plan", "load_workload"]
__version__ = "0.1.0"
