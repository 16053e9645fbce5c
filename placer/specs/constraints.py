"""What a workload may say of where its tables go: constraints, as a TorchRec user writes ParameterConstraints.

A workload's ``constraints`` block:

    constraints:
      hbm_headroom_GiB: 4            # on every GPU, HBM left free beyond the spec's reserve
      tables:
        - {tables: [C1, C10], shardings: [row_wise, column_wise]}     # allowed sharding kinds
        - {tables: ["C2*"], memory: [hbm]}                             # every row in HBM (no UVM, no host rows)
        - {name: user_side, tables: [C3, C4], colocate: true}          # one device set for the group
        - {tables: [C5], devices: [gpu0, gpu1], max_shards: 2, precisions: [fp32]}

An entry applies to the tables it names (names or globs, each matching at least one table); a table under several
entries meets all of them. Fields (each optional; absent: no constraint):

- ``shardings``: the sharding kinds allowed (placer's names: table_wise, row_wise, column_wise, data_parallel, host;
  TorchRec's sharding_types, its table_row_wise and grid forms aside).
- ``memory``: where the rows may live: ``hbm`` (every row in HBM: TorchRec's fused kernel), ``cached`` (hot rows in
  HBM, the rest in host memory or a memory tier: fused_uvm_caching), ``uvm`` (every row off the GPU, read by it:
  fused_uvm), ``host`` (rows in host memory looked up by the CPU: placer's host sharding).
- ``devices``: the devices the table's shards may be on: full names (``node0/gpu1``, ``node1/host``), a local name
  for that device on every node (``gpu1``, ``host``), or globs (``node0/*``).
- ``min_shards``, ``max_shards``: how many shards (pieces or replicas) the table is split into.
- ``precisions``: the row precisions allowed (fp32, fp16, bf16, int8: int8 being the int8 form of a frozen table).
- ``colocate``: the entry's tables all live on one device set (the same devices, shard for shard, as a set).

Checked here: the shape and ranges (SpecError naming the field). The workload checks that every pattern names a
table (specs/workload.py); what the constraints mean for a placement is placer/constraints.py.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from placer.forms.names import SHARDING_NAMES
from placer.specs import limits as L
from placer.specs.common import StrictModel

#: Where a table's rows may live (``memory``): the names of constraints.memory_class's answers.
MEMORY_CLASSES = ("hbm", "cached", "uvm", "host")
#: The row precisions a constraint may allow (int8: the int8 form of a frozen table, forms/int8.py).
PRECISIONS = ("fp32", "fp16", "bf16", "int8")
#: Most shards a constraint may name: a table split over every GPU of the largest cluster.
MAX_SHARDS = L.MAX_TOTAL_GPUS


class TableConstraint(StrictModel):
    """Constraints on the tables ``tables`` names (module docstring); ``name`` labels it in messages."""

    name: L.Name | None = None
    tables: list[L.NonEmptyName] = Field(min_length=1)
    shardings: list[Literal[SHARDING_NAMES]] | None = Field(default=None, min_length=1)
    memory: list[Literal[MEMORY_CLASSES]] | None = Field(default=None, min_length=1)
    devices: list[L.NonEmptyName] | None = Field(default=None, min_length=1)
    min_shards: L.count(MAX_SHARDS) | None = None
    max_shards: L.count(MAX_SHARDS) | None = None
    precisions: list[Literal[PRECISIONS]] | None = Field(default=None, min_length=1)
    colocate: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> "TableConstraint":
        if self.min_shards is not None and self.max_shards is not None and self.min_shards > self.max_shards:
            raise ValueError(f"min_shards {self.min_shards} is above max_shards {self.max_shards}")
        return self

    @property
    def narrows_devices(self) -> bool:
        """Whether it ties tables to some devices (``devices`` or ``colocate``): the two-stage planner, which
        treats every GPU of a class alike, cannot honour it."""
        return self.devices is not None or self.colocate


class Constraints(StrictModel):
    """A workload's constraints: HBM headroom on every GPU (GiB) and the per-table entries."""

    hbm_headroom_GiB: L.ReserveGiB = Field(default=0.0, description="HBM kept free on every GPU beyond the "
                                                                    "spec's reserve, GiB")
    tables: list[TableConstraint] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.tables and self.hbm_headroom_GiB == 0

    @property
    def narrows_devices(self) -> bool:
        return any(c.narrows_devices for c in self.tables)
