"""Input specs: hardware (device graph) and workload (tables, dense model), with their loaders."""
from placer.specs.hardware import HardwareSpec, load_hardware
from placer.specs.workload import Workload, load_workload

__all__ = ["HardwareSpec", "Workload", "load_hardware", "load_workload"]
