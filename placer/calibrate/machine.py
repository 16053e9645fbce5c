"""``calibrate()``: every benchmark of this machine in order, and the schema's scalar fields derived from them.

The device's op costs come from OpBench (benches.py), the GEMMs (gemm.py) and, last, ``fixed_us.dense_op``
from synthetic dense steps priced with everything else (dense.py). On a GPU the host CPU is
benchmarked the same way (the CPU lookups of host tables: the host's op costs), rows in host memory are read
through the runner's HostMemory mechanism, and pinned H2D/D2H copies measure the link. On a CPU run (unified
memory) the device IS the host: one RAM, one set of cores, one stream, so there are no host op costs and the
"link" is a memcpy between RAM buffers (no copy crosses it on a unified node; ranks' exchanges route over it).

The legacy scalar fields the schema requires (hbm_bw_GBps, hbm_gather_efficiency, kernel_launch_us,
cpu_gather_GBps, peak_TFLOPs, ...) are filled from the same measurements; a spec with op_costs prices with
op_costs wherever a field is present, so these matter only to readers and to the datasheet defaults of
anything not measured (fixed_us.collective).
"""
from __future__ import annotations

import datetime as _dt
import math
import statistics
import time

import torch

from placer.calibrate import chain, dense, gemm, graph_chain
from placer.calibrate.benches import OpBench
from placer.calibrate.cold import ColdPool
from placer.calibrate.record import Calibration, Entry, Measurement, OpCostEntries
from placer.calibrate.timing import bench, bench_tiny, device_name, meminfo, sizes_for
from placer.calibrate.writer import op_costs
from placer.executor import usable_cores
from placer.runner.hostmem import keep_freed_memory
from placer.units import GiB, MiB


def calibrate(device: torch.device, quick: bool = False, progress=None, workloads=(), gpus: int = 1) -> Calibration:
    """Measure this machine on ``device``. ``workloads``: Workload objects whose dense GEMMs are timed at their
    exact shapes and whose dense step is timed as a check (``batch_size / gpus`` samples per device; never
    fitted on); ``progress``: called with a short message per stage."""
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    keep_freed_memory()  # the runner's regime: freed pages are reused, not returned to the OS
    s = sizes_for(device, quick)
    cal = Calibration(device=device, device_name=device_name(device), torch_version=torch.__version__,
                      date=_dt.date.today().isoformat(), quick=quick, threads=torch.get_num_threads(),
                      workloads=[w.name for w in workloads])
    cpu = torch.device("cpu")
    pool = ColdPool(device, s.pool_cap_bytes)
    dev = OpBench(cal, device, s, cal.device_costs, "device", say, pool)
    dev.run_all()
    if cal.unified:
        dev.unified_host_gathers()
        cal.host_read_mechanism = "cpu"
    else:
        say("device reads of host memory")
        try:
            cal.host_read_mechanism = dev.host_gathers()
        except Exception as exc:  # noqa: BLE001 - no host reads measured: the datasheet default applies
            cal.host_read_mechanism = "none"
            cal.notes.append(f"host_gather_GBps not measured ({type(exc).__name__}: {exc}): the datasheet default "
                             "(link bw x efficiency x host_read_efficiency) applies")
        cal.host_costs = OpCostEntries()
        host_pool = ColdPool(cpu, sizes_for(cpu, quick).pool_cap_bytes)
        host = OpBench(cal, cpu, sizes_for(cpu, quick), cal.host_costs, "host", say, host_pool)
        host.run_all()
        host.unified_host_gathers()
        for table in cal.host_costs.host_gather_GBps.values():
            for e in table.values():
                e.how = ("the host CPU reads its own DRAM: the host's gather_GBps entry (not priced: CPU lookups "
                         "read DRAM)")
    say("GEMMs")
    dtypes = ("fp32",) if cal.unified else ("fp32", "tf32", "bf16", "fp16")
    shapes = gemm.grid(s, dtypes) + dense.gemm_shapes(s, device.type)
    for wl in workloads:
        samples = max(1, round(wl.batch_size / gpus))
        shapes += gemm.workload_gemms(wl, samples, device.type)
    times = gemm.measure(shapes, device, s, cal.device_costs, cal.add, pool)
    say("GEMMs, warm")
    gemm.measure(shapes, device, s, cal.device_costs, cal.add, pool, warm=True)
    _peaks(cal, device, s, times, dtypes, pool)
    if not cal.unified:
        gemm.measure(gemm.grid(sizes_for(cpu, quick), ("fp32",)), cpu, sizes_for(cpu, quick), cal.host_costs,
                     cal.add, host_pool, side="host")
        cal.notes.append("host: " + host_pool.describe())
        host_pool.release()
    cal.notes.append(pool.describe())
    pool.release()
    say("links and memory")
    _legacy(cal, device, s)
    say("synthetic dense steps")
    dense.fit(cal, device, s, op_costs(cal, "device"))  # priced as the spec will price them (dense_op not yet set)
    say("synthetic chains of groups")
    chain.fit(cal, device, s, op_costs(cal, "device"))  # priced without embedding_op (not yet set)
    say("op chains replayed as CUDA graphs")
    graph_chain.fit(cal, device, s.reps)
    for wl in workloads:
        dense.check(wl, max(1, round(wl.batch_size / gpus)), device, s, cal.add)
    cal.wall_s = time.perf_counter() - t_start
    return cal


def _peaks(cal: Calibration, device: torch.device, s, times: dict, dtypes, pool: ColdPool) -> None:
    """``peak_TFLOPs`` per dtype (the best rate measured, a large square GEMM included: a measured best, not a
    datasheet peak) and ``compute_efficiency`` (geometric mean of the fp32 grid's rates over that best)."""
    for dtype in dtypes:
        n = s.big_gemm
        big = gemm.Gemm("aten.mm.default", 1, n, n, n, dtype, "peak")
        rates = [g.flops / t for g, t in times.items() if g.dtype == dtype]
        rates.append(big.flops / gemm.time_gemm(big, device, 3, pool))
        cal.peaks[dtype] = Measurement(max(rates) / 1e12, f"best rate measured over {len(rates)} GEMMs ({n}^3 "
                                                          "included): a measured best, not a datasheet peak")
    grid = [g.flops / t for g, t in times.items() if g.dtype == "fp32" and g.source == "grid"]
    geo = math.exp(statistics.fmean(math.log(r) for r in grid))
    cal.set("compute_efficiency", min(1.0, geo / (cal.peaks["fp32"].value * 1e12)),
            f"geometric-mean fp32 rate over the {len(grid)} grid GEMMs ({geo / 1e12:.3g} TFLOP/s) / peak_TFLOPs.fp32")


def measure_link(device: torch.device, nbytes: int, reps: int) -> dict[str, float]:
    """H2D and D2H bytes/s with pinned host buffers (CUDA), or a memcpy between RAM buffers (CPU), and the
    seconds of a 4-byte copy."""
    n = nbytes // 4
    if device.type == "cuda":
        host = torch.empty(n, dtype=torch.float32, pin_memory=True).fill_(1.0)
        dev = torch.empty(n, dtype=torch.float32, device=device)
        h2d = nbytes / bench(lambda i: dev.copy_(host, non_blocking=True), device, reps)
        d2h = nbytes / bench(lambda i: host.copy_(dev, non_blocking=True), device, reps)
        one_h, one_d = torch.ones(1, pin_memory=True), torch.ones(1, device=device)
        lat = bench(lambda i: one_d.copy_(one_h), device, 50, warmup=5)
        return {"h2d": h2d, "d2h": d2h, "latency_s": lat}
    a = torch.empty(n, dtype=torch.float32).fill_(1.0)
    b = torch.empty_like(a)
    rate = nbytes / bench(lambda i: b.copy_(a), device, reps)
    x, y = torch.ones(1), torch.ones(1)
    lat = bench_tiny(lambda: y.copy_(x), device, 20)
    return {"h2d": rate, "d2h": rate, "latency_s": lat}


def _median_rate(tables: dict[str, dict[int, Entry]]) -> float:
    """Median GB/s of a row table's fp32 entries (of any dtype's where there are none)."""
    table = tables.get("fp32") or next(iter(tables.values()))
    return statistics.median(e.value for e in table.values())


def _legacy(cal: Calibration, device: torch.device, s) -> None:
    """The schema's scalar fields, from the measurements above (and the link and memory facts)."""
    d = cal.device_costs
    top = max(d.stream_GBps)
    stream = d.stream_GBps[top].value
    cal.set("hbm_bw_GBps", stream, f"= op_costs.stream_GBps at its largest size, {top // MiB} MiB touched (pack_grad, "
                                   "bytes read + written, cold)")
    gather = _median_rate(d.gather_GBps)
    eff = gather / stream
    cal.set("hbm_gather_efficiency", min(1.0, eff), f"median of op_costs.gather_GBps over the fp32 rows "
            f"({gather:.3g} GB/s) / hbm_bw_GBps" + (" (clamped to 1)" if eff > 1 else ""))
    link_bytes = (256 if not cal.quick else 64) * MiB if device.type == "cuda" else (64 if not cal.quick else 16) * MiB
    link = measure_link(device, link_bytes, s.reps)
    fast, mean = max(link["h2d"], link["d2h"]), (link["h2d"] + link["d2h"]) / 2
    if device.type == "cuda":
        what = f"pinned H2D/D2H copies of {link_bytes // MiB} MiB"
    else:
        what = (f"memcpy between two {link_bytes // MiB} MiB RAM buffers (the CPU 'link': on a unified node no copy "
                "crosses it; exchanges between ranks route over it)")
    cal.set("link_bw_GBps", fast / 1e9, f"{what}, faster direction (H2D {link['h2d'] / 1e9:.3g}, D2H "
                                        f"{link['d2h'] / 1e9:.3g} GB/s), bytes moved per second")
    cal.set("link_efficiency", mean / fast, "mean of both directions over the faster one")
    cal.set("link_latency_us", link["latency_s"] * 1e6, "a 4-byte copy, median")
    host_read = _median_rate(d.host_gather_GBps) if d.host_gather_GBps else None
    if host_read is None:
        cal.set("host_read_efficiency", 0.5, "not measured (see the header): assumption")
    else:
        hr = host_read * 1e9 / mean
        cal.set("host_read_efficiency", min(1.0, hr), f"median of op_costs.host_gather_GBps over the fp32 rows "
                f"({host_read:.3g} GB/s) / the link's {mean / 1e9:.3g} GB/s" + (" (clamped to 1)" if hr > 1 else ""))
    mem_total = meminfo("MemTotal") or 16 * GiB
    cal.set("cpu_cores", usable_cores(), "CPUs this process may run on (sched_getaffinity)")
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        cal.set("hbm_GiB", total / GiB, "torch.cuda.mem_get_info total")
        cal.set("hbm_reserve_GiB", (total - free) / GiB + 2.0, "in use at start (context) + 2 GiB workspace")
        cal.set("dram_GiB", mem_total / GiB, "MemTotal")
        h = cal.host_costs
        htop = max(h.stream_GBps)
        cal.set("dram_bw_GBps", h.stream_GBps[htop].value, f"= host op_costs.stream_GBps at its largest size, "
                                                           f"{htop // MiB} MiB touched (CPU pack_grad, read + write)")
        if h.stream_GBps[htop].value * 1e9 < link["h2d"]:  # pinned H2D copies read this same DRAM
            cal.warn(f"the host's streaming copies measured {h.stream_GBps[htop].value:.3g} GB/s, below the "
                     f"{link['h2d'] / 1e9:.3g} GB/s at which pinned host-to-device copies read the same DRAM: the "
                     "host's timings were disturbed (a busy or stalled CPU); its op costs price host rows too slow. "
                     "Calibrate again on a quiet machine")
        cal.set("cpu_gather_GBps", _median_rate(h.gather_GBps),
                "median of the host's op_costs.gather_GBps over the fp32 rows")
        rates = [e.value for e in h.gemm_TFLOPs.get("fp32", {}).values()]
        cal.set("cpu_peak_TFLOPs", max(rates), "best fp32 rate of the host's GEMM grid (host op_costs.gemm_TFLOPs)")
    else:
        cal.set("hbm_GiB", mem_total / GiB, "MemTotal; ignored: on a unified-memory node host.dram_GiB holds both "
                                            "device and host rows (the schema requires the field)")
        cal.set("hbm_reserve_GiB", 1.0, "chosen: Python, torch and the batch pool of one rank (on a unified node "
                                        "added to the host's reserve per rank)")
        cal.set("dram_GiB", mem_total / GiB, "MemTotal: one RAM for device and host rows (unified memory)")
        cal.set("dram_bw_GBps", stream, "= hbm_bw_GBps (op_costs.stream_GBps at its largest size): the same RAM")
        cal.set("cpu_gather_GBps", gather, "= the median of op_costs.gather_GBps over the fp32 rows: the same cores")
        cal.set("cpu_peak_TFLOPs", cal.peaks["fp32"].value, "= peak_TFLOPs.fp32: the same cores")
    cal.set("dram_reserve_GiB", max(2.0, 0.1 * cal.v("dram_GiB")), "chosen: 10% of the host DRAM, at least 2 GiB")
