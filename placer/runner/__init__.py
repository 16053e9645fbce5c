"""The runner: build any plan with PyTorch, train it on synthetic batches, measure it (see docs/runner.md).

Entry points: ``run_plan`` (build + train + time + prediction beside it), ``Trainer`` (the built plan),
``scale_plan`` (a plan for a workload with fewer rows), ``estimate_needs``/``check_memory`` (refuse a plan
that does not fit this machine before allocating).
"""
from placer.runner.memory import check_memory, estimate_needs
from placer.runner.run import RunConfig, run_plan
from placer.runner.trainer import Trainer
from placer.runner.scale import scale_plan

__all__ = ["RunConfig", "Trainer", "check_memory", "estimate_needs", "run_plan", "scale_plan"]
