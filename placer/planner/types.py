"""The two-stage planner's vocabulary in one place: what its stages read, what each returns, and the shape of a
stage-2 move (two_stage.py runs them as one pipeline).

The pipeline, for a newcomer (module docstring of two_stage.py for the details):

1. option kinds (kinds.py): ``Kinds``, per table its ``Kind`` list (a canonical option with its folded costs);
2. stage 1 (stage1.py): ``Stage1Result``, a choice of one kind per table and the lower bound;
3. stage 2 (stage2.py): ``Stage2Result``, the chosen kinds on devices and their step time, improved by ``Move``s
   (swap.py, repack.py, rekind.py) in rounds; fill.py assigns anew around pins where GPUs starve;
4. ``TwoStageResult``: the best placements, the bound and stage 1's solver account, for two_stage_solve.py to price.

Stage 1's aggregated problem (problem.Problem) names its rows (phase, resource): a resource class's name (a
string: every member's average) or a ``RowKey`` (RowKind: a table's peak row, the stream row of the GPU that
holds a table, or one exact resource).

Only this module's runtime imports are leaves (placer.plan, placer.program.ops): every planner module may import
it. The names in annotations alone are imported for type checkers only.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from placer.plan import Placement
from placer.program.ops import GroupKey

if TYPE_CHECKING:
    from placer.planner.accumulator import Accumulator
    from placer.planner.assign import Assigner
    from placer.planner.budget import Budget
    from placer.planner.ilp import IlpResult
    from placer.planner.problem import Problem


class Family(str, enum.Enum):
    """Which devices a kind's placement can move to (kinds.FAMILY by sharding): one GPU, one node, a block of GPUs,
    or none (an option over all GPUs). Its members are their names as strings ("gpu" == Family.GPU), so a
    comparison with, or a key made of, the old string names keeps working."""

    GPU = "gpu"
    NODE = "node"
    BLOCK = "block"
    ALL = "all"  # over all GPUs: no choice of devices
    LOCAL = "node_local"  # a replica on every node (node_local.py), moved alike on each: local GPU or block

    def __str__(self) -> str:
        return self.value


@dataclass
class Kind:
    """One canonical option of one table, with what stage 1 and stage 2 need to know of it (kinds.py folds it)."""

    table: int
    placement: Placement
    family: Family
    totals: dict[tuple[int, str], float]  # (phase, class) -> seconds summed over the class
    peak: list[float]  # per phase: max over classes of base_min + the kind's load on one member
    mem_totals: dict[str, float]  # memory class -> bytes
    own: list[tuple[int, str, float]] = field(default_factory=list)  # canonical (phase, resource, s)
    own_mem: list[tuple[str, float]] = field(default_factory=list)  # canonical (memory, bytes)
    # (phase, class) -> load on each member it touches, s ("all" kinds: the load every member carries)
    members: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    hbm_bytes: float = 0.0
    build: Callable[[], Placement] | None = None  # for Family.ALL kinds: the full placement, built when chosen
    # the fused groups it uses on its devices (canonical) with their fixed costs as (position in ``own``, s):
    # paid by the device only if no table there uses the group yet
    groups: list[tuple[GroupKey, list[tuple[int, float]]]] = field(default_factory=list)
    # per phase, s: what it puts on every GPU's stream alike (an option over all GPUs: its load per member), and
    # beyond that, the most it puts on one GPU's stream with its groups' fixed costs (0 for options over all GPUs)
    every_gpu: list[float] = field(default_factory=list)
    stream_peak: list[float] = field(default_factory=list)
    # options over all GPUs: the fused groups they open on every GPU, as ((location, dtype, width), seconds per
    # phase on each GPU's stream), paid once per GPU however many options use the group
    every_gpu_groups: list[tuple[tuple[str, str, int], list[float]]] = field(default_factory=list)

    def full_placement(self) -> Placement:
        return self.build() if self.build is not None else self.placement

    @property
    def weight(self) -> float:
        return sum(self.peak)


#: Per table, its kinds (kinds.KindFolder.kinds); stage 1's option ids number them flattened table by table.
Kinds = list[list[Kind]]


class RowKind(enum.Enum):
    """What a stage-1 load row that is not a class average bounds (its RowKey)."""

    TABLE = "table"  # a table's peak: the most any of its kinds puts on one member of a class (stage1.build_stage1)
    STREAM = "stream"  # the stream of the GPU that holds a table (stage1._stream_rows)
    EXACT = "exact"  # one resource exactly: the link the dense all-reduce loads most


@dataclass(frozen=True)
class RowKey:
    """The resource part of a stage-1 row key (phase, RowKey): ``of`` is the table index (TABLE, STREAM) or the
    resource's name (EXACT). It orders and prints as its old string name "<kind>:<of>" (lp.py sorts the stream
    rows), so the LP's rows keep their order."""

    kind: RowKind
    of: int | str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.of}"

    def __lt__(self, other: object) -> bool:
        return str(self) < str(other)


def row_kind(resource: str | RowKey) -> RowKind | None:
    """The RowKind of a stage-1 row's resource part; None for a class average (a resource class's name)."""
    return resource.kind if isinstance(resource, RowKey) else None


@dataclass
class Stage1Result:
    """Stage 1's answer: the solver result (its ``chosen``: option ids of ``problem``, the kinds flattened table by
    table), the aggregated problem, and the other choices it made on the way (the first rounding's, ...), best
    first, for stage 2 to try too."""

    result: IlpResult
    problem: Problem
    other_choices: list[list[int]]


@dataclass(frozen=True)
class Stage2Result:
    """Stage 2's answer for one stage-1 choice: the placements ([] where none fit) and their step time without
    the fixed latencies (s; inf where none fit)."""

    placements: list[Placement]
    step_s: float

    def better_than(self, other: Stage2Result) -> bool:
        """Placed, and faster than ``other``."""
        return bool(self.placements) and self.step_s < other.step_s


@dataclass(frozen=True)
class Assignment:
    """One assignment of stage 2 (assign.Assigner.assign, .assign_best; stage2.assign_and_improve): the placements,
    one per table ([] where some table fits nowhere), and the Accumulator of their loads (its ``step``: the step
    time without the fixed latencies, s). Frozen, but ``placements`` and ``acc`` are changed in place by the
    Moves."""

    placements: list[Placement]
    acc: Accumulator


#: Stage 2's answer before any choice was placed.
NO_PLACEMENTS = Stage2Result([], float("inf"))


@dataclass(frozen=True)
class TwoStageResult:
    """What the two stages give two_stage_solve.py: the best placements (None where stage 2 placed none), the lower
    bound (s; 0 where stage 1 had none), stage 1's solver account (status, sizes, backend) and the wall seconds."""

    placements: list[Placement] | None
    bound_s: float
    stage1: IlpResult
    wall_s: float


class Move(Protocol):
    """A stage-2 move: changes the assignment in place (``placements``, ``acc``, the Assigner's ``where`` and
    ``spread``) where that lowers the step time, while ``budget`` lasts; returns how many changes it made (0:
    nothing to do, the round may end). swap.swap and repack.repack are Moves; rekind.rekind and
    rekind.rekind_pairs are once given the kinds (``kinds=``). fill.fill_starved is not: it proposes pins for
    assigning anew (stage2.py keeps the new assignment only if it is faster)."""

    def __call__(self, stage2: Assigner, placements: list[Placement], acc: Accumulator, budget: Budget) -> int: ...
