"""What FBGEMM's fused embedding kernels (TBE) cost on one device: the op costs of a step priced as TorchRec runs it.

TorchRec's DistributedModelParallel looks up every table of one sharding type and compute kernel on a rank with
ONE TBE call forward and ONE fused backward (the sort, the reduction and the optimizer's update of the distinct
rows in one kernel chain), whatever the tables' widths. A TBE op costs ``fixed(kind) + work / rate``:

- ``tbe_forward``: rows gathered and pooled, ``distinct rows x row bytes`` at ``forward`` and the repeats at
  ``forward_cached`` (rows read again in the call: a skewed or tiny table's; without it every lookup at
  ``forward``), at the device's host-gather rate for rows in host memory (``fused_uvm``: every lookup crosses the
  link);
- ``tbe_backward``: ``lookups x pooled gradient row`` at ``backward_lookup`` + ``2 x distinct rows x (row +
  optimizer state) bytes`` at ``backward_row``, the workload's optimizer's; where the spec measures no split, both
  at the one rate ``backward`` (measured with nearly every lookup a distinct row: it prices a repeat as a distinct
  row); rows in host memory: the distinct rows' bytes also cross the link twice;
- a data-parallel table runs DMP's dense TBE: its lookups at ``dense_forward`` and its pooled gradient rows (one
  per bag: the kernel's cost goes with its bags, measured against 1-lookup bags) at ``dense_backward`` where
  measured (the fixed costs ``dense_forward`` / ``dense_backward``), its optimizer the
  dense one (the builder's ``update_dense``);
- ``input_dist``: the all-to-all of a sharding type's ids and lengths (TorchRec's KJTAllToAll: the splits, then the
  lengths and ids), a fixed cost per call; its bytes are priced on the links by the builder;
- ``dmp_step``: DMP's own Python per step and rank (the DDP wrapper, the awaitables), fitted on synthetic DMP steps
  by calibrate/dmp.py; 0 where not measured; with ``dmp_GBps.pooled`` (fitted there too) its work per byte of the
  pooled embeddings a rank's samples receive (the KeyedTensors joined and split, forward and backward).

The spec's ``op_costs.torchrec`` (TbeCostSpec, measured by ``placer calibrate --trainer torchrec``) gives these
where measured. DATASHEET DEFAULTS elsewhere: on a GPU, the forward at TBE_FORWARD_EFFICIENCY and the backward at
TBE_BACKWARD_EFFICIENCY of the HBM bandwidth, fixed costs at ``kernel_launch_us`` x TBE_KERNELS, an input
distribution at INPUT_DIST_COLLECTIVES of the device's collective fixed costs; on a CPU
(fbgemm-gpu-cpu on a unified-memory node) the device's own gather and update rates and fixed costs
(opcosts.OpCosts: calibrated or datasheet), a TBE's CPU kernels being the same gathers and row updates.
"""
from __future__ import annotations

from dataclasses import dataclass

from placer.program.opcosts import DTYPES, KERNELS, OpCosts, RateTable
from placer.units import GB, us_to_s

#: FBGEMM's TBE forward reaches ~2.5 TB/s of an H100 SXM's 3.35 TB/s on random rows (the GPU campaign issue's
#: production-class estimate, from FBGEMM's published benchmarks); to calibrate
TBE_FORWARD_EFFICIENCY = 0.75
#: its fused backward with the optimizer ~1.0 TB/s of the same 3.35 TB/s (same source); to calibrate
TBE_BACKWARD_EFFICIENCY = 0.30
#: kernels per call (launch costs of the datasheet defaults): forward = bounds check + the pooled lookup;
#: backward = linearize ids, radix sort (4 passes), run-length encode, offsets, the fused backward-and-update
TBE_KERNELS = {"tbe_forward": 2, "tbe_backward": 8}
#: collectives of one input distribution (KJTAllToAll: the splits, then the lengths and ids): its fixed cost is that
#: many of the device's collective fixed costs (calibrated between CPU ranks by placer calibrate --nproc)
INPUT_DIST_COLLECTIVES = 2
#: extra kernels a fused_uvm_caching TBE runs per step to keep its HBM cache (find the uncached rows, insert them,
#: write back the evicted ones)
CACHE_KERNELS = 3


@dataclass
class TbeCosts:
    """One device's TBE op costs (module docstring): fixed seconds per call, rates per storage dtype keyed by row
    bytes (bytes/s), and the device's OpCosts for host gathers and streams. The split rates (``forward_cached``,
    ``backward_lookup`` with ``backward_row``, ``dense_forward``, ``dense_backward``) are None where the spec does
    not measure them; the single rates then price every lookup alike."""

    fixed_s: dict[str, float]
    forward: dict[str, RateTable]
    backward: dict[str, RateTable]
    device: OpCosts
    forward_cached: dict[str, RateTable] | None = None
    backward_lookup: dict[str, RateTable] | None = None
    backward_row: dict[str, RateTable] | None = None
    dense_forward: RateTable | None = None
    dense_backward: RateTable | None = None
    dmp_pooled: float | None = None  # bytes/s of DMP's own work per pooled-embedding byte a rank receives

    def dmp_pooled_s(self, pooled_bytes: float) -> float:
        """Seconds of DMP's own work on ``pooled_bytes`` of a rank's pooled embeddings (0 where not fitted)."""
        return pooled_bytes / self.dmp_pooled if self.dmp_pooled else 0.0

    def fixed(self, kind: str) -> float:
        return self.fixed_s[kind]

    def forward_s(self, dtype: str, row_bytes: float, lookups: float, unique: float, out_bytes: float,
                  from_host: bool) -> float:
        """Seconds of the rows a member looks up (``unique`` of them distinct) and pools (``out_bytes`` of pooled
        output written)."""
        if from_host:
            read = lookups * row_bytes / self.device.host_gather[dtype](row_bytes)
        elif self.forward_cached is not None:
            repeats = max(lookups - unique, 0.0)
            read = (min(unique, lookups) * row_bytes / self.forward[dtype](row_bytes)
                    + repeats * row_bytes / self.forward_cached[dtype](row_bytes))
        else:
            read = lookups * row_bytes / self.forward[dtype](row_bytes)
        return read + self.device.stream_s(out_bytes)

    def backward_s(self, dtype: str, row_bytes: float, grad_row_bytes: float, lookups: float, rows: float,
                   rmw_bytes: float, in_host: bool) -> float:
        """Seconds of a member's share of the fused backward: its lookups' gradient rows, its ``rows`` distinct
        rows read and written (``rmw_bytes`` each: weights + state); rows in host memory across the link too."""
        if self.backward_lookup is not None and self.backward_row is not None:
            work = (lookups * grad_row_bytes / self.backward_lookup[dtype](row_bytes)
                    + 2 * rows * rmw_bytes / self.backward_row[dtype](row_bytes))
        else:
            work = (lookups * grad_row_bytes + 2 * rows * rmw_bytes) / self.backward[dtype](row_bytes)
        if in_host:
            work = max(work, 2 * rows * rmw_bytes / self.device.host_gather[dtype](row_bytes))
        return work

    def dense_forward_s(self, dtype: str, row_bytes: float, lookups: float, unique: float,
                        out_bytes: float) -> float:
        """Seconds of a data-parallel member's lookups in DMP's dense TBE (forward_s where not measured)."""
        if self.dense_forward is None:
            return self.forward_s(dtype, row_bytes, lookups, unique, out_bytes, False)
        return lookups * row_bytes / self.dense_forward(row_bytes) + self.device.stream_s(out_bytes)

    def dense_backward_s(self, dtype: str, row_bytes: float, grad_row_bytes: float, lookups: float, bags: float,
                         rows: float, rmw_bytes: float) -> float:
        """Seconds of a data-parallel member's dense TBE backward: each pooled gradient row (one per bag) added
        into the table's dense gradient, for every lookup of its bag (the optimizer is the dense one, priced by
        the builder); backward_s where not measured."""
        if self.dense_backward is None:
            return self.backward_s(dtype, row_bytes, grad_row_bytes, lookups, rows, rmw_bytes, False)
        return bags * grad_row_bytes / self.dense_backward(row_bytes)


def _tables(points: dict | None, default) -> dict[str, RateTable]:
    """A rate table per storage dtype from ``points`` (GB/s) where given, else ``default(dtype)``."""
    points = points or {}
    if points.get("fp16") and not points.get("bf16"):  # bf16 rows: fp16's measured rates (the same bytes)
        points = {**points, "bf16": points["fp16"]}
    return {dt: RateTable({rb: v * GB for rb, v in points[dt].items()}) if points.get(dt) else default(dt)
            for dt in DTYPES}


def _measured(points: dict | None, fallback: dict[str, RateTable]) -> dict[str, RateTable] | None:
    """Rate tables of a split rate the spec measures (a dtype it lacks: ``fallback``'s), None where it measures
    none."""
    return _tables(points, lambda dt: fallback[dt]) if points else None


def tbe_costs(topo, device: str, optimizer: str) -> TbeCosts:
    """The TBE op costs of ``device`` (a GPU, or a unified-memory node's CPU process): module docstring."""
    costs = topo.op_costs(device)
    gpu = topo.gpu_spec(device)
    spec = gpu.op_costs.torchrec if gpu.op_costs is not None else None
    measured = dict(spec.fixed_us) if spec is not None else {}
    if topo.is_unified(device):
        forward = lambda dt: costs.gather[dt]
        backward = lambda dt: costs.update[optimizer][dt]
        per_kernel = costs.fixed("lookup") / max(KERNELS["lookup"], 1)
    else:
        hbm = gpu.hbm_bw_GBps * GB
        forward = lambda dt: RateTable.flat(hbm * TBE_FORWARD_EFFICIENCY)
        backward = lambda dt: RateTable.flat(hbm * TBE_BACKWARD_EFFICIENCY)
        per_kernel = us_to_s(gpu.kernel_launch_us)
    fixed = {k: us_to_s(measured[k]) if k in measured else per_kernel * n for k, n in TBE_KERNELS.items()}
    for dense, fused in (("dense_forward", "tbe_forward"), ("dense_backward", "tbe_backward")):
        fixed[dense] = us_to_s(measured[dense]) if dense in measured else fixed[fused]
    fixed["input_dist"] = (us_to_s(measured["input_dist"]) if "input_dist" in measured
                           else INPUT_DIST_COLLECTIVES * costs.fixed("collective"))
    fixed["dmp_step"] = us_to_s(measured.get("dmp_step", 0.0))  # no datasheet figure: measured, else none
    fixed["cache"] = per_kernel * CACHE_KERNELS
    of = lambda field: (getattr(spec, field) or {}).get(optimizer) if spec else None  # this optimizer's, if timed
    fwd = _tables(spec.forward_GBps if spec else None, forward)
    bwd = _tables(of("backward_GBps"), backward)
    split = of("backward_lookup_GBps") and of("backward_row_GBps")
    flat = lambda points: RateTable({rb: v * GB for rb, v in points.items()}) if points else None
    return TbeCosts(fixed_s=fixed, forward=fwd, backward=bwd, device=costs,
                    forward_cached=_measured(spec.forward_cached_GBps if spec else None, fwd),
                    backward_lookup=_measured(of("backward_lookup_GBps"), bwd) if split else None,
                    backward_row=_measured(of("backward_row_GBps"), bwd) if split else None,
                    dense_forward=flat(spec.dense_forward_GBps if spec else None),
                    dense_backward=flat(spec.dense_backward_GBps if spec else None),
                    dmp_pooled=spec.dmp_GBps["pooled"] * GB if spec and "pooled" in spec.dmp_GBps else None)
