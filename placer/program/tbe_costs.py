"""What FBGEMM's fused embedding kernels (TBE) cost on one device: the op costs of a step priced as TorchRec runs it.

TorchRec's DistributedModelParallel looks up every table of one sharding type and compute kernel on a rank with
ONE TBE call forward and ONE fused backward (the sort, the reduction and the optimizer's update of the distinct
rows in one kernel chain), whatever the tables' widths. A TBE op costs ``fixed(kind) + work / rate``:

- ``tbe_forward``: rows gathered and pooled, ``lookups x row bytes`` at ``forward`` (rows in HBM), at the device's
  host-gather rate for rows in host memory (``fused_uvm``: every lookup crosses the link);
- ``tbe_backward``: ``lookups x pooled gradient row + 2 x distinct rows x (row + optimizer state) bytes`` at
  ``backward``, the workload's optimizer's (rows in host memory: the distinct rows' bytes also cross the link
  twice);
- ``input_dist``: the all-to-all of a sharding type's ids and lengths (TorchRec's KJTAllToAll: the splits, then the
  lengths and ids), a fixed cost per call; its bytes are priced on the links by the builder;
- ``dmp_step``: DMP's own Python per step and rank (the DDP wrapper, the awaitables), fitted on synthetic DMP steps
  by calibrate/dmp.py; 0 where not measured.

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
    bytes (bytes/s), and the device's OpCosts for host gathers and streams."""

    fixed_s: dict[str, float]
    forward: dict[str, RateTable]
    backward: dict[str, RateTable]
    device: OpCosts

    def fixed(self, kind: str) -> float:
        return self.fixed_s[kind]

    def forward_s(self, dtype: str, row_bytes: float, lookups: float, out_bytes: float, from_host: bool) -> float:
        """Seconds of the rows a member looks up and pools (``out_bytes`` of pooled output written)."""
        rate = self.device.host_gather[dtype](row_bytes) if from_host else self.forward[dtype](row_bytes)
        return lookups * row_bytes / rate + self.device.stream_s(out_bytes)

    def backward_s(self, dtype: str, row_bytes: float, grad_row_bytes: float, lookups: float, rows: float,
                   rmw_bytes: float, in_host: bool) -> float:
        """Seconds of a member's share of the fused backward: its lookups' gradient rows, its ``rows`` distinct
        rows read and written (``rmw_bytes`` each: weights + state); rows in host memory across the link too."""
        work = (lookups * grad_row_bytes + 2 * rows * rmw_bytes) / self.backward[dtype](row_bytes)
        if in_host:
            work = max(work, 2 * rows * rmw_bytes / self.device.host_gather[dtype](row_bytes))
        return work


def _tables(points: dict | None, default) -> dict[str, RateTable]:
    """A rate table per storage dtype from ``points`` (GB/s) where given, else ``default(dtype)``."""
    points = points or {}
    if points.get("fp16") and not points.get("bf16"):  # bf16 rows: fp16's measured rates (the same bytes)
        points = {**points, "bf16": points["fp16"]}
    return {dt: RateTable({rb: v * GB for rb, v in points[dt].items()}) if points.get(dt) else default(dt)
            for dt in DTYPES}


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
    fixed["input_dist"] = (us_to_s(measured["input_dist"]) if "input_dist" in measured
                           else INPUT_DIST_COLLECTIVES * costs.fixed("collective"))
    fixed["dmp_step"] = us_to_s(measured.get("dmp_step", 0.0))  # no datasheet figure: measured, else none
    fixed["cache"] = per_kernel * CACHE_KERNELS
    measured_backward = (spec.backward_GBps or {}).get(optimizer) if spec else None  # this optimizer's, if timed
    return TbeCosts(fixed_s=fixed, forward=_tables(spec.forward_GBps if spec else None, forward),
                    backward=_tables(measured_backward, backward), device=costs)
