"""What one op of each kind costs on one device: fixed seconds per op and rates keyed by size.

Every op's time on its stream is ``fixed(kind) + work / rate(kind, size)`` (an alpha-beta model): a fused
group's op pays the fixed part once and each member its own work, so an option's load stays linear. The
numbers come from the spec's ``op_costs`` (measured by ``placer calibrate``); where a spec has none, the
DATASHEET DEFAULTS below derive them from the spec's other fields (which carry their own sources):

GPU (a template's ``gpus``), with L = kernel_launch_us, H = hbm_bw_GBps, e = hbm_gather_efficiency:
- fixed cost of a kind = L x KERNELS[kind] (kernels the runner's op launches, counted in runner/groups.py);
  dense_op and embedding_op 0 (an op is priced as the kernels it launches); all_reduce 0 (the ring's hops
  price its latency)
- gather (rows from device memory, random and cache hits alike) = H x e, every row size; an fp16 row at the time of
  an fp32 row of its width (FP16_GATHER_PER_ROW)
- host gather (rows in pinned host memory read by the GPU) = the link's bw x efficiency x host_read_efficiency
- stream (copies, elementwise; bytes read + written) = H; strided (elementwise over transposed views) = H
- indexed (index / index_put of elements) = H x e
- sort = 4 radix passes reading and writing 16 B (id + position) per id at H: 128 B / H per id
- segment reduce = H x e / 2 (pooled gradient rows gathered per lookup, then read again to sum)
- update = H x e / 2 for every optimizer (each distinct row and its state read and written back)
- gemm = peak_TFLOPs[dtype] x compute_efficiency, every shape
- no cache model: warm rates are the cold ones (every dense step priced cold); calibrated specs price a
  share of a dense step's traffic warm by where its memory sits in the caches (OpCosts.warm)

Host CPU (a template's ``host``), with G = cpu_gather_GBps, D = dram_bw_GBps:
- fixed cost of a kind = HOST_OP_US x KERNELS[kind] (HOST_OP_US: dispatch of one eager PyTorch CPU op);
  dense_op 0
- gather = G; stream = strided = D; indexed = G; sort = HOST_SORT_NS per id; segment reduce and update = G / 2; gemm =
  cpu_peak_TFLOPs.

On a unified-memory template (CPU processes standing in for GPUs) the host's CPU work runs on the same cores
as the device's, so the host's op costs ARE the device's, and rows "in host memory" are read at the device's
own gather rates (one RAM).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from placer.specs.hardware import FIXED_COST_KINDS, OPTIMIZERS, GpuSpec, HostSpec, NodeTemplate, OpCostSpec
from placer.specs.kinds import DEVICE_KINDS, GPU, HOST
from placer.units import GB, us_to_s

#: kernels (GPU) or eager ops (CPU) one op of each kind runs, for the datasheet defaults of the fixed costs
KERNELS = {"lookup": 2, "sort": 6, "segment_reduce": 3, "copy": 1, "elementwise": 1, "view": 0.2, "gemm": 1,
           "collective": 1, "all_reduce": 0, "dense_op": 0, "embedding_op": 0,
           "update_sgd": 4, "update_adagrad": 9, "update_rowwise_adagrad": 10,
           "update_adam": 15}
DTYPES = ("fp32", "fp16", "bf16")
#: the 16-bit storage precisions: a bf16 row has an fp16 row's bytes and is priced as one unless measured (calibrate
#: times fp32 and fp16 rows; a spec may give bf16 rates of its own)
HALF = ("fp16", "bf16")
HOST_OP_US = 5.0  # assumption: one eager PyTorch CPU op dispatches in ~5 us (5.5 us measured for a tiny
#                   embedding_bag on two cores of a cloud x86 VM)
GRAPH_KERNEL_US = 2.5  # assumption: a small kernel replayed from a CUDA graph, its run plus the gap to the next
#                       (NVIDIA's "Getting Started with CUDA Graphs": ~3 us per short kernel in a graph against ~4 us
#                       launched from a stream); placer calibrate --device cuda replaces it (graph_kernel_us)
HOST_SORT_NS = 30.0  # assumption: torch.sort on one CPU core, ~25-45 ns per int64 id at 1e4-1e6 ids (same machine)
#: where a spec does not measure fp16 rows, price an fp16 row's gather and update at the time of an fp32 row of the
#: same width (not at half its bytes): on an H100 the runner's fp16 lookups measured 1.06-1.4x fp32's time per row and
#: its fp16 updates 1.15-1.7x (adagrad, rowwise_adagrad; placer calibrate's synthetic benchmarks,
#: validation/results/gpu-2026-11-27-run3/calibrated.yaml), on this project's CPUs about equal
#: (hardware_specs/measured-cpu-2026-11-23.yaml), so the ILP chooses fp16 for the memory it saves, never for a
#: speed the runner does not deliver; a calibrated spec prices fp16 as measured
FP16_GATHER_PER_ROW = True
GPU_SORT_BYTES_PER_ID = 128  # 4 radix passes x (8 B id + 8 B position) read and written


class RateTable:
    """size -> rate (bytes/s or FLOP/s), piecewise linear in log2(size), constant beyond the ends."""

    def __init__(self, points: dict[float, float]):
        if not points:
            raise ValueError("a rate table needs at least one point")
        self.sizes = sorted(float(s) for s in points)
        self.rates = [float(points[s] if s in points else points[int(s)]) for s in self.sizes]
        self._cache: dict[float, float] = {}

    @classmethod
    def flat(cls, rate: float) -> "RateTable":
        return cls({1.0: rate})

    def __call__(self, size: float) -> float:
        if size in self._cache:
            return self._cache[size]
        s, r = self.sizes, self.rates
        if size <= s[0] or len(s) == 1:
            out = r[0]
        elif size >= s[-1]:
            out = r[-1]
        else:
            i = next(j for j in range(1, len(s)) if s[j] >= size)
            w = (math.log2(size) - math.log2(s[i - 1])) / (math.log2(s[i]) - math.log2(s[i - 1]))
            out = r[i - 1] + w * (r[i] - r[i - 1])
        self._cache[size] = out
        return out

    @property
    def best(self) -> float:
        """The fastest rate of the table."""
        return max(self.rates)

    def scaled(self, factor: float) -> "RateTable":
        return RateTable({s: r * factor for s, r in zip(self.sizes, self.rates)})


class GemmTable:
    """GEMM rates (FLOP/s) measured at shapes (m, k, n) and operand layouts ("nn", "tn", ...: whether each
    operand is a transposed view); a shape not measured takes the rate of the nearest measured one of the same
    layout (any layout if none has it; distance: summed |log2| of the three ratios); with no shapes,
    ``default``."""

    def __init__(self, shapes: dict[tuple[int, int, int, str], float], default: float):
        self.shapes = dict(shapes)
        self.default = default
        self._cache: dict[tuple, float] = {}

    def rate(self, m: float, k: float, n: float, layout: str = "nn") -> float:
        key = (m, k, n, layout)
        if key not in self._cache:
            same = [s for s in self.shapes if s[3] == layout] or list(self.shapes)
            if not same:
                self._cache[key] = self.default
            else:
                logs = [math.log2(max(v, 1.0)) for v in key[:3]]
                best = min(same, key=lambda s: sum(abs(math.log2(v) - x) for v, x in zip(s[:3], logs)))
                self._cache[key] = self.shapes[best]
        return self._cache[key]


def gemm_key(shape: str) -> tuple[int, int, int, str]:
    """'MxKxN' or 'MxKxN:tn' (the spec's keys) -> (m, k, n, layout)."""
    dims, _, layout = shape.partition(":")
    m, k, n = (int(x) for x in dims.split("x"))
    return m, k, n, layout or "nn"


@dataclass
class OpCosts:
    """Fixed seconds per op kind and rates of one stream's device (see the module docstring)."""

    fixed_s: dict[str, float]
    gather: dict[str, RateTable]  # storage dtype -> row bytes -> bytes/s, rows read from this device's memory
    gather_cached: dict[str, RateTable]  # storage dtype -> row bytes -> bytes/s, rows read again within the step
    host_gather: dict[str, RateTable]  # storage dtype -> row bytes -> bytes/s, host rows read by this device
    stream: RateTable  # bytes an op touches -> bytes read + written per second, operands cold
    stream_warm: RateTable  # the same with operands in the caches
    strided: RateTable  # bytes an op moves -> bytes/s of elementwise ops over transposed views
    indexed: RateTable  # bytes an op moves -> bytes/s of elements read or written at indexed positions
    sort: RateTable  # ids sorted -> seconds per id
    segment_reduce: RateTable  # gradient row bytes -> bytes/s of per-lookup gradient rows
    update: dict[str, dict[str, RateTable]]  # optimizer -> storage dtype -> (weights + state) row bytes -> bytes/s
    gemm: dict[str, GemmTable]  # dense dtype -> rates by shape, operands cold
    gemm_warm: dict[str, GemmTable]  # the same with operands in the caches
    calibrated: set[str] = field(default_factory=set)  # fields measured (the rest are datasheet defaults)
    fp16_updates_measured: frozenset = frozenset()  # optimizers whose fp16-row update the spec measures

    # ---- op prices: variable seconds (work / rate); the fixed part is fixed(kind) --------------------------

    def fixed(self, kind: str) -> float:
        return self.fixed_s[kind]

    def lookup_s(self, dtype: str, row_bytes: float, lookups: float, unique: float, out_bytes: float,
                 from_host: bool) -> float:
        """Gather ``lookups`` rows of ``dtype`` (``unique`` of them distinct) and write ``out_bytes`` of pooled
        output. Rows in host memory are read at the host-gather rate, every lookup (no cache in front of PCIe)."""
        if from_host:
            read = lookups * row_bytes / self.host_gather[dtype](row_bytes)
        else:
            repeats = max(lookups - unique, 0.0)
            read = (unique * row_bytes / self.gather[dtype](row_bytes)
                    + repeats * row_bytes / self.gather_cached[dtype](row_bytes))
        return read + self.stream_s(out_bytes)

    def sort_s(self, ids: float) -> float:
        return ids * self.sort(ids)

    def segment_reduce_s(self, grad_row_bytes: float, lookups: float) -> float:
        return lookups * grad_row_bytes / self.segment_reduce(grad_row_bytes)

    def update_s(self, optimizer: str, dtype: str, row_bytes: float, rows: float, in_host: bool,
                 width: float | None = None) -> float:
        """Read, update and write back ``rows`` distinct rows of ``row_bytes`` (``dtype`` weights + fp32 state);
        rows in host memory also cross the link twice (read and write) at the host-gather rate. ``width``
        (columns): fp16 rows whose update the spec does not measure take the time of fp32 rows of that width
        (FP16_GATHER_PER_ROW), their link bytes stay their own."""
        if (dtype in HALF and width and FP16_GATHER_PER_ROW and optimizer not in self.fp16_updates_measured):
            as_fp32 = row_bytes + 2 * width
            work = rows * as_fp32 / self.update[optimizer]["fp32"](as_fp32)
        else:
            work = rows * row_bytes / self.update[optimizer][dtype](row_bytes)
        return max(work, rows * row_bytes / (self.host_gather[dtype](row_bytes) / 2)) if in_host else work

    def stream_s(self, touched_bytes: float, warm: float = 0.0) -> float:
        """Seconds to read + write ``touched_bytes`` at the rate of an op that size: a ``warm`` share (0..1)
        of it at the rate with the operands in the caches, the rest at the cold rate."""
        if touched_bytes <= 0:
            return 0.0
        cold = touched_bytes / self.stream(touched_bytes)
        return cold if not warm else warm * touched_bytes / self.stream_warm(touched_bytes) + (1 - warm) * cold

    def strided_s(self, moved_bytes: float) -> float:
        """Seconds of an elementwise op over a transposed view (elements a stride apart), ``moved_bytes`` read
        + written."""
        return moved_bytes / self.strided(moved_bytes) if moved_bytes > 0 else 0.0

    def indexed_s(self, moved_bytes: float) -> float:
        """Seconds of an indexing op (index, index_put, gather, scatter of elements), ``moved_bytes`` read +
        written."""
        return moved_bytes / self.indexed(moved_bytes) if moved_bytes > 0 else 0.0

    def gemm_s(self, dtype: str, m: float, k: float, n: float, batch: float = 1.0, layout: str = "nn",
               warm: float = 0.0) -> float:
        """Seconds of the GEMM's FLOPs, a ``warm`` share (0..1) at the rate with its operands in the caches."""
        flops = 2.0 * batch * m * k * n
        cold = flops / self.gemm[dtype].rate(batch * m, k, n, layout)
        return cold if not warm else warm * flops / self.gemm_warm[dtype].rate(batch * m, k, n, layout) + \
            (1 - warm) * cold

    def warm(self, footprint_bytes: float) -> float:
        """The share (0..1) of a dense step's operand traffic served as if warm, for a step whose memory is
        ``footprint_bytes``. Between two uses of an operand the step touches at most its footprint, so the
        operand sits in the cache level that holds the footprint; the warm copies' rate at that size says
        which level that is. With per-byte times t = 1 / rate at size F: w = (t_cold(F) - t_warm(F)) /
        (t_cold(F) - t_best), t_best the fastest warm point: 1 in the innermost cache, 0 where a copy of F
        bytes reused runs no faster than a cold one (DRAM; and on a spec without warm rates)."""
        if footprint_bytes <= 0:
            return 1.0
        t_cold = 1.0 / self.stream(footprint_bytes)
        t_warm = 1.0 / self.stream_warm(footprint_bytes)
        t_best = 1.0 / self.stream_warm.best
        if t_cold - t_best <= 0:
            return 0.0
        return min(1.0, max(0.0, (t_cold - t_warm) / (t_cold - t_best)))


# ---- construction from a spec -------------------------------------------------------------------------------

def _table(points: dict | None, default: float, scale: float = GB) -> RateTable:
    return RateTable({s: v * scale for s, v in points.items()}) if points else RateTable.flat(default)


def _by_dtype(points: dict | None, default: float, fp16_per_row: bool = False) -> dict[str, RateTable]:
    """A rate table per storage dtype; a dtype the spec does not give takes the other's table, else the
    default. ``fp16_per_row`` (the device's row gathers): fp16 rows the spec does not measure cost what fp32 rows
    of the same width do, not half (FP16_GATHER_PER_ROW)."""
    points = points or {}
    tables = {dt: _table(points[dt], default) for dt in DTYPES if points.get(dt)}
    fallback = next(iter(tables.values()), RateTable.flat(default))
    out = {dt: tables.get(dt, fallback) for dt in ("fp32", "fp16")}
    if fp16_per_row and "fp16" not in tables:
        fp32 = out["fp32"]  # an fp16 row of b bytes: the time of an fp32 row of 2b bytes
        out["fp16"] = RateTable({s / 2: r / 2 for s, r in zip(fp32.sizes, fp32.rates)})
    out["bf16"] = tables.get("bf16", out["fp16"])  # bf16 rows: priced as fp16 rows of the same bytes (HALF)
    return out


def peak_for(peaks: dict[str, float], dtype: str) -> float:
    """Peak TFLOP/s for ``dtype``; a missing 16-bit or tf32 entry falls back to the next slower format."""
    for key in {"bf16": ("bf16", "fp16", "tf32", "fp32"), "fp16": ("fp16", "bf16", "tf32", "fp32"),
                "tf32": ("tf32", "fp32")}.get(dtype, ("fp32",)):
        if key in peaks:
            return peaks[key]
    return min(peaks.values())


def _gemm_tables(spec: OpCostSpec | None, peaks: dict[str, float], efficiency: float, warm: bool = False
                 ) -> dict[str, GemmTable]:
    out = {}
    measured = ((spec.gemm_warm_TFLOPs or spec.gemm_TFLOPs if warm else spec.gemm_TFLOPs) or {}) if spec else {}
    for dtype in ("fp32", "tf32", "bf16", "fp16"):
        peak = peak_for(peaks, dtype)
        shapes = {gemm_key(s): v * 1e12 for s, v in measured.get(dtype, {}).items()}
        out[dtype] = GemmTable(shapes, peak * 1e12 * efficiency)
    return out


def _build(spec: OpCostSpec | None, *, fixed_default, gather: float, host_gather: float, stream: float,
           sort_s: float, reduce: float, update: float, gemm: tuple[dict[str, GemmTable], dict[str, GemmTable]]
           ) -> OpCosts:
    s = spec or OpCostSpec()
    fixed = {k: us_to_s(s.fixed_us[k]) if k in s.fixed_us else fixed_default(k) for k in FIXED_COST_KINDS}
    upd = {o: _by_dtype((s.update_GBps or {}).get(o), update) for o in OPTIMIZERS}
    calibrated = {name for name in OpCostSpec.model_fields if getattr(s, name)}
    cold = (_table(s.stream_GBps, stream) if isinstance(s.stream_GBps, dict) else
            RateTable.flat(s.stream_GBps * GB if s.stream_GBps else stream))
    return OpCosts(
        fixed_s=fixed,
        gather=_by_dtype(s.gather_GBps, gather, fp16_per_row=FP16_GATHER_PER_ROW),
        gather_cached=_by_dtype(s.gather_cached_GBps or s.gather_GBps, gather, fp16_per_row=FP16_GATHER_PER_ROW),
        host_gather=_by_dtype(s.host_gather_GBps, host_gather),
        stream=cold,
        stream_warm=_table(s.stream_warm_GBps, 0.0) if s.stream_warm_GBps else cold,
        strided=_table(s.strided_GBps, 0.0) if s.strided_GBps else cold,
        indexed=_table(s.indexed_GBps, gather),
        sort=(RateTable({n: v * 1e-9 for n, v in s.sort_ns_per_id.items()}) if isinstance(s.sort_ns_per_id, dict)
              else RateTable.flat(s.sort_ns_per_id * 1e-9 if s.sort_ns_per_id is not None else sort_s)),
        segment_reduce=_table(s.segment_reduce_GBps, reduce),
        update=upd, gemm=gemm[0], gemm_warm=gemm[1], calibrated=calibrated,
        fp16_updates_measured=frozenset(o for o in OPTIMIZERS if ((s.update_GBps or {}).get(o) or {}).get("fp16")))


def gpu_op_costs(g: GpuSpec, host_link_Bps: float, dense_dtypes=()) -> OpCosts:
    """A GPU's op costs: its ``op_costs`` where measured, datasheet defaults elsewhere. ``host_link_Bps``:
    the GPU's path to its host (bytes/s, bw x efficiency), for the host-gather default."""
    hbm = g.hbm_bw_GBps * GB
    gather = hbm * g.hbm_gather_efficiency
    launch = us_to_s(g.kernel_launch_us)
    return _build(g.op_costs, fixed_default=lambda k: launch * KERNELS[k], gather=gather,
                  host_gather=host_link_Bps * g.host_read_efficiency, stream=hbm,
                  sort_s=GPU_SORT_BYTES_PER_ID / hbm, reduce=gather / 2, update=gather / 2,
                  gemm=(_gemm_tables(g.op_costs, dict(g.peak_TFLOPs), g.compute_efficiency),
                        _gemm_tables(g.op_costs, dict(g.peak_TFLOPs), g.compute_efficiency, warm=True)))


def host_op_costs(h: HostSpec) -> OpCosts:
    """A host CPU's op costs (CPU lookups of host tables): ``op_costs`` where measured, else defaults."""
    g = h.cpu_gather_GBps * GB
    return _build(h.op_costs, fixed_default=lambda k: us_to_s(HOST_OP_US) * KERNELS[k], gather=g, host_gather=g,
                  stream=h.dram_bw_GBps * GB, sort_s=HOST_SORT_NS * 1e-9, reduce=g / 2, update=g / 2,
                  gemm=(_gemm_tables(h.op_costs, {"fp32": h.cpu_peak_TFLOPs}, 1.0),
                        _gemm_tables(h.op_costs, {"fp32": h.cpu_peak_TFLOPs}, 1.0, warm=True)))


#: The op costs of each device kind that runs ops (specs/kinds.py ``runs_ops``), from its node's template and its
#: path to its host (bytes/s): a new kind of device that runs ops is an entry here beside its entry there.
OP_COSTS_OF_KIND = {
    GPU: lambda t, host_link_Bps: gpu_op_costs(t.gpus, host_link_Bps),
    HOST: lambda t, host_link_Bps: host_op_costs(t.host),
}
assert {k for k, v in DEVICE_KINDS.items() if v.runs_ops} == set(OP_COSTS_OF_KIND), "specs/kinds.py runs_ops"


def op_costs_of_kind(kind: str, template: NodeTemplate, host_link_Bps: float) -> OpCosts:
    """The op costs of a device of ``kind`` on a node of ``template``: a unified-memory node's host runs its
    "GPUs'" costs (they are CPU processes sharing its DRAM). ``host_link_Bps``: the path to the host, bytes/s."""
    return OP_COSTS_OF_KIND[GPU if template.unified_memory else kind](template, host_link_Bps)


def reading_at(costs: OpCosts, rate_Bps: float) -> OpCosts:
    """``costs`` with rows outside the device's own memory read at ``rate_Bps`` (bytes/s, every dtype): the op
    costs of a GPU reading a memory tier (Topology.read_costs), whose reads calibrate does not measure."""
    return replace(costs, host_gather=_by_dtype(None, rate_Bps), calibrated=costs.calibrated - {"host_gather_GBps"})

