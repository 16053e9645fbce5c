"""The vocabulary of a step program: phases, fused groups, their members, and ops.

A training step is a sequence of PHASES separated by synchronization points (the runner synchronizes there
too). Within a phase each device runs its ops in order on one STREAM (a GPU's compute stream, a host's CPU
thread); different streams overlap, and a SHARED resource (a link, a host's DRAM) carries the bytes of every op
that touches it. So a phase lasts as long as its busiest stream or shared resource:

    phase time = max(max over streams of the sum of its ops' seconds, max over shared resources of their load)

Embedding work is fused as production trainers fuse it (FBGEMM's TBE): on each device, the shards of every
table with the same (location, storage dtype, width) form one GROUP, backed by one fused table; the group
runs one lookup (gather and sum-pool) in the forward, and one sort, one segment reduce and one optimizer
update in the backward. A group's op costs a fixed part once (``GroupKey``-keyed "once" charges) plus a
variable part per member (its rows, lookups, bags), which is what keeps the planner's rows linear.

Op kinds (``KINDS``): lookup, sort, segment_reduce, update (sparse, distinct rows), scatter and update_dense
(data-parallel replicas), copy_h2d / copy_d2h (pooled outputs of CPU-looked-up tables), combine (a table's
parts summed or concatenated), pack_grad (a group's pooled gradient gathered from its members), all_to_all,
all_reduce, gemm and elementwise (the dense model), optimizer_dense (the dense model's update).
"""
from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("embedding_forward", "forward_exchange", "dense", "backward_exchange", "embedding_backward",
          "gradient_allreduce")
FWD, FX, DENSE, BX, BWD, AR = range(len(PHASES))

#: where a group's rows live and who reads them
#: - hbm: device memory, read by the device
#: - uvm: pinned host memory read by the GPU (on a unified-memory machine: the same RAM as hbm)
#: - cpu: host memory, looked up and updated by the host's CPU ("host" sharding)
#: - replica: a data-parallel replica in device memory (pools its own samples; dense gradient, all-reduce)
#: - tier:<name>: a memory tier of the node (the spec's ``tiers``), read by the GPU as uvm rows are
#: (program/locations.py turns a location into its memory)
LOCATIONS = ("hbm", "uvm", "cpu", "replica")
TIER_PREFIX = "tier:"

KINDS = ("lookup", "sort", "segment_reduce", "update", "scatter", "update_dense", "copy_h2d", "copy_d2h",
         "combine", "pack_grad", "all_to_all", "all_reduce", "gemm", "elementwise", "optimizer_dense", "host_issue")
HOST_ISSUE = "host_issue"

EVERY_GPU = "*"  # an op's stream (or a buffer's memory) meaning: the same on every GPU (the sample owners)
POOLED_BYTES = 4  # pooled embeddings and their gradients are fp32
STATE_BYTES = 4  # optimizer state is fp32
INDEX_BYTES = 8  # row ids and bag ids are int64
INT8_ROW_EXTRA_BYTES = 8  # an int8 row's fp32 scale and bias
#: a group's form (GroupKey.form): what its rows are beyond location, dtype and width
FROZEN, INT8, QR_PREFIX, TT_PREFIX = "frozen", "int8", "qr:", "tt:"


@dataclass(frozen=True, order=True)
class GroupKey:
    """One fused group: the plan device whose stream runs it, and what its members share."""

    device: str  # a GPU, or a host for location "cpu"
    location: str  # one of LOCATIONS, or TIER_PREFIX + a memory tier's local name
    dtype: str  # storage precision of the rows: fp32 | fp16 | int8 (frozen int8 rows: dim bytes + scale and bias)
    width: int  # columns of every member
    form: str = ""  # "" trained rows; "frozen" (no backward); "int8" (frozen, int8); "qr:mult" / "qr:add" (QR
    #                 tables of that combine); "tt:<table>" (one TT table's three cores, program/tt_ops.py)

    @property
    def label(self) -> str:
        form = f" {self.form}" if self.form else ""
        return f"{self.device}[{self.location} {self.dtype} x{self.width}{form}]"

    @property
    def trained(self) -> bool:
        """Whether the group's rows are updated (a backward, a sparse update): not for frozen tables."""
        return self.form not in (FROZEN, INT8)

    @property
    def tier(self) -> str | None:
        """The memory tier (local name) that holds the group's rows, or None (its location says where)."""
        return self.location[len(TIER_PREFIX):] if self.location.startswith(TIER_PREFIX) else None

    @property
    def qr(self) -> bool:
        return self.form.startswith(QR_PREFIX)

    @property
    def tt(self) -> bool:
        return self.form.startswith(TT_PREFIX)


@dataclass(frozen=True)
class Member:
    """One block of one table's rows in a group: a shard, or the hot or cold part of a split shard.

    ``bags`` pooled outputs per step (features x samples it pools), ``lookups`` row ids gathered per step and
    ``unique_rows`` distinct rows among them (expected values, from the table's access model)."""

    table: str
    shard: int  # index of the shard in its placement
    part: str  # all | hot | cold
    rows: int  # rows the member holds (local ids 0..rows-1)
    cols: tuple[int, int]  # the table's columns it holds
    bags: int
    lookups: float
    unique_rows: float
    local_ids: tuple[int, int]  # rows [a, b) of the table's id space it serves (before a hot/cold split)


@dataclass(slots=True)
class Op:
    """One op of the step program, priced.

    ``seconds`` is its time on ``stream`` (EVERY_GPU: on each GPU's stream, the sample owners' share of an
    exchange); ``traffic`` its load on shared resources, (resource, seconds). An op
    with ``once`` set is a fused group's fixed cost: however many options put a member in the group, the plan
    pays it once (its key is ``(group, kind)``). ``sizes`` records what it was priced from (lookups, bytes,
    flops, ...), for reports and the runner's per-op comparison."""

    kind: str
    phase: int
    stream: str
    seconds: float
    group: GroupKey | None = None
    table: str | None = None
    once: bool = False
    traffic: tuple[tuple[str, float], ...] = ()
    sizes: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def once_key(self) -> tuple:
        return (self.group, self.kind, self.phase, self.stream)
