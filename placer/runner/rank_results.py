"""A distributed run's result: every rank's record merged on rank 0, in the one-process result's schema (runner/
run.py) plus ``nproc``, ``backend``, ``ranks`` (per-rank numbers) and ``measured.exchange``.

Merging (seconds, bytes):
- step time: each rank's median over its own timed steps, the slowest rank's (its statistics are reported).
  Free-running ranks meet only at the collectives, so where one rank's step ends differs from the other's:
  a step one rank spends waiting at its start is one the other ends early, and the max over ranks step by step
  counts that jitter as time (on two cores: 8.0 ms against per-rank medians of 7.6 ms). Phases are timed
  between barriers that line the ranks up: per phase the max over ranks of step i, the median over steps
  (``_median_of_max``);
- ``measured.exchange``: the all_to_all_single call alone (after a barrier, device synchronized before and
  after), max over ranks, median over the instrumented steps; bytes each rank sends to / receives from the
  others per step (fp32);
- ``measured.ops``: the op pass's seconds per step of each (op kind, stream) (runner/opcompare.py), over ALL
  ranks, beside the whole plan's priced program (``plan_ops``). A stream is measured on the rank that runs its
  plan device, so the ranks' keys do not overlap (where they would, the max is kept: ranks run side by side).
  Not restricted to the ranks' streams: with folding (several plan GPUs per rank) a rank's own work (dense
  model, exchange, assembly) is measured once, under its first plan GPU's stream, and priced on every GPU's,
  so those rows show the folding rather than a calibration miss; the groups' rows are per plan device either way;
- memory: device bytes the max over ranks, host bytes summed over ranks.
"""
from __future__ import annotations

import statistics

import numpy as np
import torch

from placer.cost import PHASES
from placer.program.build import ProgramBuilder, plan_ops
from placer.runner.opcompare import compare
from placer.runner.ranks import RankMap, node_needs
from placer.runner.timing import step_measurements, summarize


def _median_of_max(per_rank: list[list[float]]) -> float:
    """Per index the max over ranks, then the median over indices (0 when there is none)."""
    n = min((len(x) for x in per_rank), default=0)
    if n == 0:
        return 0.0
    return statistics.median(max(x[i] for x in per_rank) for i in range(n))


def merged_ops(records: list[dict]) -> dict[tuple[str, str], float]:
    """Seconds per step of each (kind, stream) over the ranks (max where two ranks have the same key)."""
    out: dict[tuple[str, str], float] = {}
    for r in records:
        for key, seconds in r["ops"]:
            out[tuple(key)] = max(out.get(tuple(key), 0.0), seconds)
    return out


def distributed_result(records: list[dict], topo, wl, plan, predicted: dict, config, rmap: RankMap, backend: str,
                       losses: list[float], pool: int, dense_dtype: str, builder: ProgramBuilder) -> dict:
    """The run's result from every rank's record (worker.py's ``rank_record``), on rank 0."""
    stats = max((summarize(r["times"]) for r in records), key=lambda st: st["median"])  # the slowest rank's
    step = stats["median"]
    measured_phases = {ph: _median_of_max([[s.get(ph, 0.0) for s in r["phases"]] for r in records])
                       for ph in PHASES}
    pred_step = predicted["step_time_s"]
    first = losses[: max(1, min(5, len(losses) // 4))]
    last = losses[-max(1, min(5, len(losses) // 4)):]
    peak_dev = [r["peak_device_bytes"] for r in records if r["peak_device_bytes"] is not None]
    a2a = {name: _median_of_max([r["a2a"].get(name, []) for r in records])
           for name in ("forward_all_to_all", "backward_all_to_all")}
    r0 = records[0]
    return {
        "hardware": topo.spec.name,
        "workload": wl.name,
        "plan_method": plan.method,
        "device": r0["device"],
        "device_name": r0["device_name"],
        "torch_version": torch.__version__,
        "steps": config.steps,
        "warmup": config.warmup,
        "phase_steps": min(len(r["phases"]) for r in records),
        "scale": config.scale,
        "seed": config.seed,
        "batch_size": wl.batch_size,
        "host_read_mechanism": r0["host_read_mechanism"],
        "host_read_detail": r0["host_read_detail"],
        "devices_folded": rmap.gpus_per_rank,
        "dense_dtype": dense_dtype,
        "pool_batches": pool,
        "torch_threads": r0["torch_threads"],
        "nproc": rmap.world,
        "backend": backend,
        "measured": {
            **step_measurements(wl.batch_size, step, stats, measured_phases),
            "peak_device_bytes": max(peak_dev) if peak_dev else None,
            "peak_host_bytes": sum(r["peak_host_bytes"] for r in records),
            "host_rss_at_start_bytes": sum(r["host_rss_at_start_bytes"] for r in records),
            "device_table_bytes": sum(r["device_tables"] for r in records),
            "host_table_bytes": sum(r["host_tables"] for r in records),
            "build_s": max(r["build_s"] for r in records),
            "loss_first": float(np.mean(first)) if losses else None,
            "loss_last": float(np.mean(last)) if losses else None,
            "loss_history": losses,
            "exchange": {
                "forward_all_to_all_s": a2a["forward_all_to_all"],
                "backward_all_to_all_s": a2a["backward_all_to_all"],
                "bytes_out_per_rank_max": max(r["bytes_out"] for r in records),
                "bytes_in_per_rank_max": max(r["bytes_in"] for r in records),
                "how": "the all_to_all_single call alone, after a barrier, device synchronized before and after, "
                       "max over ranks, median over the instrumented steps; bytes to/from other ranks per step "
                       "(fp32)",
            },
            "ops": compare(merged_ops(records), plan_ops(builder, plan.placements), builder.expand),
        },
        "predicted": {k: v for k, v in predicted.items() if k != "devices"},
        "relative_error": step / pred_step - 1 if pred_step > 0 else None,
        "phase_ratio": {p: (measured_phases[p] / predicted["phases_s"][p]) if predicted["phases_s"].get(p) else None
                        for p in PHASES},
        "memory_check": r0["mem_report"],
        "memory_estimate_bytes": _estimate_totals(plan, wl, topo, rmap, r0["device"], pool),
        "ranks": [{
            "rank": r["rank"], "device": r["device"], "plan_devices": r["plan_devices"], "samples": r["samples"],
            "groups": r["groups"], "shards": r["shards"], "replicas": r["replicas"],
            "step_time_median_s": statistics.median(r["times"]) if r["times"] else None,
            "phases_s": {ph: statistics.median([s.get(ph, 0.0) for s in r["phases"]]) if r["phases"] else 0.0
                         for ph in PHASES},
            "exchange_bytes_out": r["bytes_out"], "exchange_bytes_in": r["bytes_in"],
            "device_table_bytes": r["device_tables"], "host_table_bytes": r["host_tables"],
            "peak_host_bytes": r["peak_host_bytes"], "peak_device_bytes": r["peak_device_bytes"],
        } for r in records],
    }


def _estimate_totals(plan, wl, topo, rmap: RankMap, device: str, pool: int) -> dict:
    """The memory check's estimate, bytes: the largest rank's device part, host parts summed over the ranks."""
    needs = node_needs(plan, wl, topo, rmap, list(range(rmap.world)), torch.device(device).type, pool)
    return {"device": max(n.device_total for n in needs.values()),
            "host": sum(n.host_total for n in needs.values()),
            "per_rank_device": [needs[r].device_total for r in range(rmap.world)]}
