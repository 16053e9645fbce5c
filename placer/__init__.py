"""placer: where the embedding tables of a DLRM live during training, and proof of it.

Public API (re-exports only): load_hardware, load_workload, Topology, Plan, load_plan.

The names are imported when first used (PEP 562): ``import placer`` itself imports nothing heavy, so the
``placer`` command (placer/cli.py) owns its process (signals, streams: placer/process.py) before the 0.7 s of
imports that these names pull in, and Ctrl-C then never ends in a traceback.
"""
from __future__ import annotations

import importlib

#: public name -> the module that defines it
_EXPORTS = {"HardwareSpec": "placer.specs", "Workload": "placer.specs", "load_hardware": "placer.specs",
            "load_workload": "placer.specs", "Plan": "placer.plan", "load_plan": "placer.plan",
            "Topology": "placer.topology"}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'placer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
