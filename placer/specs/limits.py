"""Hard bounds on every number a spec holds: finite, positive where physics says so, and within generous
limits, so that a value placer accepts never overflows, divides by zero or builds a graph of 1e12 devices
further on. Each bound is written once, here, with its unit and the reason for it.

Realistic ranges (values placer accepts but that look like a unit mistake) are in ``plausible.py``; these
bounds are far wider: a value outside them is an error, not a warning.

Every numeric type here refuses booleans (YAML reads ``yes``, ``no``, ``on``, ``off`` as booleans, which
pydantic would otherwise take as 1 and 0), infinities and NaN. An integer field takes integral floats
(``1e3`` written ``1.0e3``); a float field takes integers.
"""
from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

# ---- counts ---------------------------------------------------------------------------------------------
#: GPUs in one node template (the largest NVLink domain shipped is 72; leaves room for 1024-GPU racks)
MAX_GPUS_PER_NODE = 1024
#: NICs in one node template
MAX_NICS_PER_NODE = 1024
#: switches in one node template
MAX_SWITCHES_PER_NODE = 1024
MAX_TIERS_PER_NODE = 16  # memory tiers beyond HBM and host DRAM, per node
#: nodes in one group and in the whole cluster
MAX_NODES = 65_536
#: GPUs in the whole cluster. Not a physical bound (the largest training clusters have about 100,000) but what
#: placer plans in bounded time today: routes are found per GPU pair of every all-reduce ring, quadratic in
#: GPUs (1,024 GPUs: a solve at --time-limit 3 takes ~42 s on two cores; 16,000 ran past 5 minutes).
#: Raise it once routing uses the cluster's symmetry (issue 19).
MAX_TOTAL_GPUS = 1024
#: devices (GPUs, hosts, switches, NICs) in the whole cluster: what the topology graph holds
MAX_TOTAL_DEVICES = 1_048_576
#: links in the whole cluster, each glob expanded and every node counted
MAX_TOTAL_LINKS = 4_194_304
#: CPU cores of one host
MAX_CPU_CORES = 1_048_576

# ---- memory, GiB (2**30 bytes) --------------------------------------------------------------------------
#: largest capacity of one memory, GiB (1 PiB; the largest host DRAM shipped is 2 TiB)
MAX_CAPACITY_GiB = 1e6
#: smallest capacity of one memory, GiB (1 KiB)
MIN_CAPACITY_GiB = 2.0**-20

# ---- rates ----------------------------------------------------------------------------------------------
#: bandwidth of a memory or link, GB/s (1e9 bytes/s): 1 MB/s .. 1 PB/s
MIN_BANDWIDTH_GBps = 1e-3
MAX_BANDWIDTH_GBps = 1e6
#: compute peak, TFLOP/s: 1 MFLOP/s .. 100 PFLOP/s
MIN_TFLOPs = 1e-6
MAX_TFLOPs = 1e5
#: a measured op-cost rate (GB/s or TFLOP/s in ``op_costs`` tables): as small as 1 kB/s, as large as above
MIN_OP_RATE = 1e-6
#: an efficiency (achieved fraction of a peak): at least one millionth, at most 1
MIN_EFFICIENCY = 1e-6

# ---- times ----------------------------------------------------------------------------------------------
#: latency or fixed cost, microseconds (1 s)
MAX_LATENCY_us = 1e6
#: sorting cost per id, nanoseconds (1 ms per id)
MAX_SORT_ns = 1e6

# ---- workload -------------------------------------------------------------------------------------------
#: rows of one table (2**40: 1.1 trillion; the largest published tables have a few billion)
MAX_ROWS = 2**40
#: embedding dimension (elements per row)
MAX_DIM = 65_536
#: global batch, samples per step
MAX_BATCH = 2**31
#: lookups per sample per feature
MAX_POOLING = 1e5
MIN_POOLING = 1e-6
#: zipf exponent: past 100 every lookup is the hottest row to double precision
MAX_ZIPF_ALPHA = 100.0
MIN_ZIPF_ALPHA = 1e-6
#: accesses per row in a histogram bin
MAX_ACCESSES_PER_ROW = 1e15
#: width of one MLP layer, and dense features per sample
MAX_LAYER_WIDTH = 2**20
#: layers of a DCNv2 cross network
MAX_CROSS_LAYERS = 1024
#: learning rate
MAX_LEARNING_RATE = 1e6
#: bytes of one row in an op-cost table key (1 GiB)
MAX_ROW_BYTES = 2**30
#: a QR table's collisions (rows sharing a quotient row): at most what leaves 2 quotient rows is checked per table
MAX_QR_COLLISIONS = 2**40
#: a tensor-train core's rank (TT-Rec, MLSys'21, trains ranks 8-128; larger is no longer a compression)
MAX_TT_RANK = 4096


def _no_bool(value: Any) -> Any:
    """Refuse booleans, and name infinities and NaN as what they are (not as 'greater than 0')."""
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean (YAML reads yes/no/on/off/true/false as booleans)")
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    return value


def _floor(minimum: float, unit: str):
    def check(value: float) -> float:
        if value < minimum:
            raise ValueError(f"{value:g} {unit} is below the smallest value placer accepts, {minimum:g} {unit}")
        return value
    return check


NoBool = BeforeValidator(_no_bool)


def positive_float(maximum: float, minimum: float | None = None, unit: str = "") -> Any:
    """A finite float > 0 and <= ``maximum`` (and >= ``minimum`` when given, with its own message)."""
    parts: list[Any] = [NoBool, Field(gt=0, le=maximum, allow_inf_nan=False)]
    if minimum is not None:
        parts.append(AfterValidator(_floor(minimum, unit)))
    return Annotated[(float, *parts)]


def nonnegative_float(maximum: float) -> Any:
    """A finite float >= 0 and <= ``maximum``."""
    return Annotated[float, NoBool, Field(ge=0, le=maximum, allow_inf_nan=False)]


def count(maximum: int, minimum: int = 1) -> Any:
    """An integer in [``minimum``, ``maximum``] (booleans refused)."""
    low = {"gt": 0} if minimum == 1 else {"ge": minimum}  # "greater than 0" reads better for counts
    return Annotated[int, NoBool, Field(le=maximum, **low)]


CapacityGiB = positive_float(MAX_CAPACITY_GiB, MIN_CAPACITY_GiB, "GiB")
ReserveGiB = nonnegative_float(MAX_CAPACITY_GiB)
BandwidthGBps = positive_float(MAX_BANDWIDTH_GBps, MIN_BANDWIDTH_GBps, "GB/s")
TFLOPs = positive_float(MAX_TFLOPs, MIN_TFLOPs, "TFLOP/s")
OpRate = positive_float(MAX_BANDWIDTH_GBps, MIN_OP_RATE, "GB/s or TFLOP/s")
LatencyUs = nonnegative_float(MAX_LATENCY_us)
SortNs = nonnegative_float(MAX_SORT_ns)
Efficiency = Annotated[float, NoBool, Field(gt=0, le=1, allow_inf_nan=False),
                       AfterValidator(_floor(MIN_EFFICIENCY, "(fraction)"))]
#: a fraction in [0, 1] (coverage points)
UnitInterval = Annotated[float, NoBool, Field(ge=0, le=1, allow_inf_nan=False)]

# ---- text -----------------------------------------------------------------------------------------------
#: characters of a name (spec, workload, table, feature, template, switch): names are identifiers that every
#: report, plan and export repeats, so a name of megabytes would make each of them that large. Descriptions are
#: free text of any length; reports print their start (placer/shown_text.py).
MAX_NAME_CHARS = 256
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
NonEmptyName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
RowFraction = Annotated[float, NoBool, Field(gt=0, le=1, allow_inf_nan=False)]

GpuCount = count(MAX_GPUS_PER_NODE)
NicCount = count(MAX_NICS_PER_NODE)
NodeCount = count(MAX_NODES)
CpuCores = count(MAX_CPU_CORES)
Rows = count(MAX_ROWS)
Dim = count(MAX_DIM)
Batch = count(MAX_BATCH)
LayerWidth = count(MAX_LAYER_WIDTH)
DenseFeatures = count(MAX_LAYER_WIDTH, minimum=0)
CrossLayers = count(MAX_CROSS_LAYERS)
RowBytes = count(MAX_ROW_BYTES)
QrCollisions = count(MAX_QR_COLLISIONS, minimum=2)
TtRank = count(MAX_TT_RANK)
Pooling = positive_float(MAX_POOLING, MIN_POOLING, "lookups per sample")
ZipfAlpha = positive_float(MAX_ZIPF_ALPHA, MIN_ZIPF_ALPHA, "")
AccessesPerRow = nonnegative_float(MAX_ACCESSES_PER_ROW)
LearningRate = positive_float(MAX_LEARNING_RATE)
