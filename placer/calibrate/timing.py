"""Timing and machine facts for ``placer calibrate``: medians of synchronized calls, sizes per mode.

Times are seconds; sizes bytes. Every benchmark times the call the runner makes, the device idle before it
as under the runner's per-op timer (runner/timing.py ``OpTimer``): on a CPU the call's wall time, on a GPU
CUDA events around it (the stream's time, launch gaps included, without the host's synchronization), and
keeps the median of its repeats.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass

import torch

from placer.executor import usable_cores
from placer.units import MiB

CHECK_WIDTHS = (12, 96)  # columns between the table's widths, timed as checks of the log2 interpolation
KiB = 1024
#: bytes read + written by the copies that define stream_GBps: 64 KiB .. 512 MiB, log-spaced (8 points)
STREAM_FULL = (64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 512 * MiB)
STREAM_QUICK = (64 * KiB, MiB, 16 * MiB)
STREAM_CHECKS = (512 * KiB, 8 * MiB, 128 * MiB)  # between the points above: checks of the interpolation


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: a benchmark whose median is this many times its fastest repeat was disturbed (a stalled thread, a busy
#: neighbour): the same call on the same sizes varies by well under 2x otherwise. Seen on an H100 machine's host
#: (validation/results/gpu-2026-11-27-run2): CPU copies of 0.5 and 8 MiB timed at 12 ms, a stream
#: rate of 0.09-1.4 GB/s against 80 GB/s on the same kind of machine an hour earlier.
STALL_RATIO = 8.0
RETIMES = 2  # times a disturbed benchmark is timed again (the lowest median is kept)


def bench(fn, device: torch.device, reps: int, warmup: int = 1, before=None) -> float:
    """Median seconds of ``fn(i)`` over ``reps`` calls (i = 0..reps-1; warm-up calls get
    i = reps.., so a benchmark that rotates its inputs by ``i`` never times an input the warm-up touched).
    ``before()``, when given, runs (untimed, synchronized) before every timed call. A disturbed benchmark
    (median over STALL_RATIO x its fastest repeat) is timed again, up to RETIMES times; the lowest median
    is kept."""
    for w in range(warmup):
        fn(reps + w)
    sync(device)
    best = _median_of_repeats(fn, device, reps, before)
    for _ in range(RETIMES):
        if best[0] <= STALL_RATIO * best[1]:
            break
        best = min(best, _median_of_repeats(fn, device, reps, before))
    return best[0]


def _median_of_repeats(fn, device: torch.device, reps: int, before) -> tuple[float, float]:
    """(median, fastest) seconds of ``reps`` timed calls of ``fn(i)``."""
    times = []
    for i in range(reps):
        if before is not None:
            before()
            sync(device)
        if device.type == "cuda":  # the stream's time from before the launch to the last kernel's end
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(i)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
            continue
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def bench_tiny(fn, device: torch.device, batches: int, per_batch: int = 20) -> float:
    """Median seconds per call of a tiny op: ``batches`` timed batches of ``per_batch`` back-to-back calls
    (one clock read per batch, so the clock's own cost stays out), synchronized at the batch ends."""
    for _ in range(per_batch):
        fn()
    sync(device)
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        sync(device)
        times.append((time.perf_counter() - t0) / per_batch)
    return statistics.median(times)


@dataclass(frozen=True)
class Sizes:
    """How large and how often, per mode (``quick``: seconds, noisier; full: minutes at most).

    ``table_bytes``: the big table random rows are gathered from (far larger than the caches);
    ``cached_table_bytes``: the small, cache-resident table; ``gather_bytes``: bytes of rows one timed gather
    reads (ids = gather_bytes / row bytes, clamped to [min_ids, max_ids]); ``widths``: columns of the rows
    that define the row tables, of each storage dtype (4..256: fp32 16..1024 B, fp16 8..512 B);
    ``check_widths``: columns timed as checks between those (both dtypes; priced by interpolation);
    ``stream_touched``: bytes read + written by the pack_grad copies that define the ``stream_GBps`` table
    (log-spaced), ``stream_check_touched``: sizes between them timed as checks of its interpolation;
    ``pool_cap_bytes``: the most memory the cold-operand pool may take (cold.py);
    ``dense_samples``: the two batch sizes (samples per device) of the synthetic dense steps that set
    ``fixed_us.dense_op`` (calibrate/dense.py), each timed as the median of ``dense_reps`` steps."""

    table_bytes: int
    cached_table_bytes: int
    gather_bytes: int
    min_ids: int
    max_ids: int
    widths: tuple[int, ...]
    check_widths: tuple[int, ...]
    sort_ids: tuple[int, ...]
    sort_check_ids: tuple[int, ...]
    update_rows: int
    stream_touched: tuple[int, ...]
    stream_check_touched: tuple[int, ...]
    pool_cap_bytes: int
    reps: int
    tiny_batches: int
    gemm_batch_rows: tuple[int, ...]
    gemm_layers: int
    big_gemm: int
    dense_samples: tuple[int, int]
    dense_reps: int


#: working sets against the cache they must defeat, per device type: a GPU's at 4 x its L2 (an H100's 50 MB, an
#: H200's 60 MB), as the GPU campaign asks: three calibrations of one H100 model read 1.2-2.4 TB/s from a 16 MiB op
#: that stayed in L2 (validation/results/gpu-2026-11-27*); a CPU's at 2 x its last-level cache (cold.py's pool)
CACHE_MULTIPLE = {"cuda": 4, "cpu": 2}


def gpu_l2_bytes(device: torch.device) -> int:
    """The GPU's L2 size in bytes as torch reports it (0 where it does not)."""
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)


def sizes_for(device: torch.device, quick: bool) -> Sizes:
    widths_full = (4, 8, 16, 32, 64, 128, 256)
    if device.type == "cuda":
        l2_set = CACHE_MULTIPLE["cuda"] * gpu_l2_bytes(device)  # one timed gather's rows: beyond the L2
        return Sizes(table_bytes=(1024 if quick else 4096) * MiB, cached_table_bytes=2 * MiB,
                     gather_bytes=max((16 if quick else 64) * MiB, l2_set), min_ids=2**16, max_ids=2**22,
                     widths=(4, 16, 64, 256) if quick else widths_full, check_widths=() if quick else CHECK_WIDTHS,
                     sort_ids=(2**18, 2**20) if quick else (2**16, 2**18, 2**20, 2**22),
                     sort_check_ids=() if quick else (2**23,), update_rows=2**20,
                     stream_touched=STREAM_QUICK if quick else STREAM_FULL,
                     stream_check_touched=() if quick else STREAM_CHECKS, pool_cap_bytes=(512 if quick else 2048) * MiB,
                     reps=5 if quick else 15, tiny_batches=20 if quick else 100,
                     gemm_batch_rows=(2048,) if quick else (512, 4096, 32768), gemm_layers=4 if quick else 8,
                     big_gemm=4096 if quick else 8192, dense_samples=(2048, 16384), dense_reps=10 if quick else 30)
    return Sizes(table_bytes=(256 if quick else _big_table_bytes()) * MiB, cached_table_bytes=256 * 1024,
                 gather_bytes=(1 if quick else 16) * MiB, min_ids=2**11 if quick else 2**14,
                 max_ids=2**16 if quick else 2**20, widths=(4, 16, 64, 256) if quick else widths_full,
                 check_widths=() if quick else CHECK_WIDTHS,
                 sort_ids=(2**12, 2**15) if quick else (2**10, 2**12, 2**14, 2**16, 2**18, 2**20),
                 sort_check_ids=() if quick else (2**11, 2**21), update_rows=2**12 if quick else 2**16,
                 stream_touched=STREAM_QUICK if quick else STREAM_FULL,
                 stream_check_touched=() if quick else STREAM_CHECKS, pool_cap_bytes=(256 if quick else 2048) * MiB,
                 reps=3 if quick else 9, tiny_batches=30 if quick else 50,
                 gemm_batch_rows=(256,) if quick else (256, 2048), gemm_layers=3 if quick else 8,
                 big_gemm=512 if quick else 1536, dense_samples=(128, 1024), dense_reps=10 if quick else 30)


def _big_table_bytes() -> int:
    """MiB of the CPU's big table: 4 x the last-level cache, at least 1 GiB, at most a quarter of what is
    available."""
    llc = last_level_cache_bytes() or 64 * MiB
    avail = meminfo("MemAvailable") or 8 * 2**30
    return int(max(1024 * MiB, min(4 * llc, avail / 4)) // MiB)


def last_level_cache_bytes() -> int | None:
    """Size of the largest CPU cache Linux reports (sysfs), bytes."""
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            if not entry.startswith("index"):
                continue
            with open(os.path.join(base, entry, "size"), encoding="ascii") as fh:
                text = fh.read().strip()
            scale = {"K": 1024, "M": MiB, "G": 2**30}.get(text[-1:], 1)
            value = int(text.rstrip("KMG")) * scale
            best = value if best is None else max(best, value)
    except (OSError, ValueError):
        return best
    return best


def meminfo(key: str) -> float | None:
    """A /proc/meminfo field, bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}, {usable_cores()} cores) rank"
