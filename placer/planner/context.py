"""What every stage of the two-stage planner (two_stage.py) reads: the machine and workload, their symmetry, and the
dense model's loads folded into symmetry classes. Built once per solve; no stage changes it."""
from __future__ import annotations

import functools

from collections import defaultdict
from dataclasses import dataclass

from placer.cost import CostModel
from placer.options import OptionConfig
from placer.planner.progress import Tracker
from placer.planner.symmetry import Symmetry, resource_class
from placer.topology import Topology


@dataclass
class Context:
    """``model`` prices plans; ``local`` is the same model without the embedding exchange (kinds.py adds it
    from cached per-device vectors); ``base_total``: (phase, class) -> the dense model's load summed over the
    class, s; ``base_min``: (phase, class) -> its smallest load on one member, s (0 where some member has none);
    ``mem_usable``: memory class -> the least usable bytes of one member."""

    model: CostModel
    sym: Symmetry
    cfg: OptionConfig
    tracker: Tracker
    local: CostModel
    base_total: dict[tuple[int, str], float]
    base_min: dict[tuple[int, str], float]
    mem_usable: dict[str, float]

    @property
    def topo(self) -> Topology:
        return self.model.topo

    @functools.cached_property
    def gpu_classes(self) -> tuple[str, str]:
        """The classes of the GPUs' streams and of their memories (what EVERY_GPU loads and buffers fold into)."""
        g = self.model.topo.gpus[0]
        return resource_class(self.model.topo.stream_of(g)), resource_class(self.model.topo.memory_of(g))

    @functools.cached_property
    def gpu_set(self) -> frozenset[str]:
        """The GPUs' names (each is also the name of its HBM), for membership tests."""
        return frozenset(self.model.topo.gpus)

    @classmethod
    def of(cls, model: CostModel, sym: Symmetry, cfg: OptionConfig, tracker: Tracker | None = None) -> Context:
        base_total: dict[tuple[int, str], float] = defaultdict(float)
        members: dict[tuple[int, str], list[float]] = defaultdict(list)
        for (p, r), v in model.base_cost.loads.items():
            base_total[(p, resource_class(r))] += v
            members[(p, resource_class(r))].append(v)
        base_min = {k: (min(v) if len(v) == sym.class_size[k[1]] else 0.0) for k, v in members.items()}
        mem_usable: dict[str, float] = {}
        for m, v in model.usable_memory.items():
            c = resource_class(m)
            mem_usable[c] = min(mem_usable.get(c, float("inf")), v)
        return cls(model, sym, cfg, tracker or Tracker(None), CostModel(model.topo, model.wl, include_exchange=False),
                   base_total, base_min, mem_usable)
