"""Measure this machine with micro-benchmarks and write a hardware spec the planner can use.

What is measured, and which spec field it sets (every number in the written YAML carries a comment saying
"placer calibrate <date> on <device>, torch <version>" and how it was measured):

- ``hbm_bw_GBps``: a streaming device-to-device copy of a large buffer, bytes read + written per second.
- ``hbm_gather_efficiency``: ``embedding_bag`` (sum, 4 rows per bag) over random rows of a table much larger than
  the caches, for dims 16..256; inverted through cost.py's own formula (time = gathered / (bw * eff) + pooled
  output / bw); the median over the dims.
- ``cpu_gather_GBps``: the CPU ``embedding_bag`` over random rows of a host table (all torch threads), bytes of
  rows gathered per second, median over dims.
- pcie link ``bw_GBps`` / ``efficiency``: pinned host <-> device copies both ways; bw_GBps is the faster
  direction, efficiency the mean of both over it (cost.py uses bw x efficiency in both directions).
  ``latency_us``: a 4-byte copy round trip.
- ``host_read_efficiency``: GPU gathers of rows in pinned host memory through the runner's own mechanism
  (uva: the GPU kernel reads mapped host memory; else CPU gather + copy), over the link's bw x efficiency.
- ``peak_TFLOPs``: the best rate measured (MLP shapes and a large square GEMM) per dtype - a measured best,
  not a datasheet peak; ``compute_efficiency``: the geometric mean rate at DLRM MLP shapes / that peak (fp32).
- ``kernel_launch_us``: back-to-back tiny in-place adds, time per op (launch + dispatch in eager PyTorch).
- host: ``dram_bw_GBps`` a CPU streaming copy (read + write), ``cpu_peak_TFLOPs`` a large fp32 GEMM on the CPU,
  ``dram_GiB`` MemTotal, ``cpu_cores`` the CPUs this process may use.

On a CPU run the "GPU" is the CPU training process itself (the runner's --device cpu): its HBM is a share of RAM
(HBM_SHARE_OF_RAM; the host gets the rest), its bandwidths are measured on RAM, its "PCIe link" is a memcpy
between two RAM buffers (bytes moved per second, one direction), and its host reads are the same gather kernel
on a RAM tensor. The schema is unchanged, so ``placer check`` and ``placer solve`` accept the file.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import socket
import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from placer.units import GiB

DIMS = (16, 32, 64, 128, 256)
#: DLRM MLP GEMM shapes (batch rows x in -> out): MLPerf DLRM bottom/top layers at a 4096-sample micro-batch
MLP_SHAPES = ((4096, 13, 512), (4096, 512, 256), (4096, 256, 128), (4096, 479, 1024), (4096, 1024, 1024),
              (4096, 1024, 512), (4096, 512, 256))
HBM_SHARE_OF_RAM = 0.5
BAG = 4


@dataclass
class Sizes:
    copy_bytes: int
    table_bytes: int
    lookups: int
    pcie_bytes: int
    big_gemm: int
    cpu_gemm: int
    min_time_s: float
    max_reps: int


def sizes_for(device: torch.device, quick: bool) -> Sizes:
    if device.type == "cuda":
        return Sizes(copy_bytes=(256 if quick else 1024) * 2**20, table_bytes=(512 if quick else 2048) * 2**20,
                     lookups=(1 if quick else 4) * 2**20, pcie_bytes=(64 if quick else 256) * 2**20,
                     big_gemm=4096 if quick else 8192, cpu_gemm=1024 if quick else 2048,
                     min_time_s=0.05 if quick else 0.3, max_reps=20 if quick else 50)
    return Sizes(copy_bytes=(64 if quick else 256) * 2**20, table_bytes=(128 if quick else 512) * 2**20,
                 lookups=(2**16 if quick else 2**19), pcie_bytes=(32 if quick else 128) * 2**20,
                 big_gemm=768 if quick else 2048, cpu_gemm=768 if quick else 2048,
                 min_time_s=0.02 if quick else 0.2, max_reps=5 if quick else 15)


@dataclass
class Measurement:
    value: float
    how: str


@dataclass
class Calibration:
    device: torch.device
    device_name: str
    torch_version: str
    date: str
    quick: bool
    values: dict[str, Measurement] = field(default_factory=dict)
    peaks: dict[str, Measurement] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    host_read_mechanism: str = ""
    wall_s: float = 0.0

    def set(self, key: str, value: float, how: str) -> None:
        self.values[key] = Measurement(float(value), how)

    def v(self, key: str) -> float:
        return self.values[key].value


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(fn, device: torch.device, min_time_s: float, max_reps: int, warmup: int = 1) -> float:
    """Median seconds per call of ``fn`` (synchronized), at least 3 calls, more until ``min_time_s``."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times: list[float] = []
    end = time.perf_counter() + min_time_s
    while len(times) < 3 or (time.perf_counter() < end and len(times) < max_reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}, {_cores()} cores) rank"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _meminfo(key: str) -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# ---- the benchmarks -------------------------------------------------------------------------------------------

def measure_copy(device: torch.device, nbytes: int, s: Sizes) -> float:
    """Streaming copy on ``device``: bytes read + written per second."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    t = bench(lambda: dst.copy_(src), device, s.min_time_s, s.max_reps)
    return 2 * nbytes / t


def measure_gather(table: torch.Tensor, lookups: int, device: torch.device, s: Sizes,
                   index_device: torch.device | None = None) -> float:
    """Seconds per embedding_bag of ``lookups`` random rows (bags of BAG) over ``table``."""
    idx_dev = index_device or table.device
    rows = table.shape[0]
    g = torch.Generator(device="cpu").manual_seed(7)
    ids = torch.randint(0, rows, (lookups,), generator=g).to(idx_dev)
    offsets = torch.arange(0, lookups, BAG, device=idx_dev)
    return bench(lambda: F.embedding_bag(ids, table, offsets, mode="sum"), device, s.min_time_s, s.max_reps)


def gather_rates(device: torch.device, bw: float, s: Sizes, lookups: int | None = None
                 ) -> dict[int, tuple[float, float]]:
    """Per dim: (hbm_gather_efficiency by cost.py's formula inverted, bytes of rows gathered per second)."""
    lookups = lookups or s.lookups
    out = {}
    for d in DIMS:
        rows = s.table_bytes // (d * 4)
        table = torch.empty((rows, d), dtype=torch.float32, device=device).uniform_(-0.1, 0.1)
        t = measure_gather(table, lookups, device, s)
        gathered = lookups * d * 4
        pooled = lookups / BAG * d * 4
        denom = bw * t - pooled
        out[d] = (min(1.0, gathered / denom) if denom > 0 else 1.0, gathered / t)
        del table
    return out


def measure_link(device: torch.device, s: Sizes) -> dict[str, float]:
    """H2D and D2H bytes/s with pinned host buffers (CUDA), or a memcpy between RAM buffers (CPU), and the
    latency of a 4-byte transfer, seconds."""
    n = s.pcie_bytes // 4
    if device.type == "cuda":
        host = torch.empty(n, dtype=torch.float32, pin_memory=True).fill_(1.0)
        dev = torch.empty(n, dtype=torch.float32, device=device)
        h2d = s.pcie_bytes / bench(lambda: dev.copy_(host, non_blocking=True), device, s.min_time_s, s.max_reps)
        d2h = s.pcie_bytes / bench(lambda: host.copy_(dev, non_blocking=True), device, s.min_time_s, s.max_reps)
        one_h = torch.ones(1, pin_memory=True)
        one_d = torch.ones(1, device=device)
        lat = bench(lambda: one_d.copy_(one_h), device, s.min_time_s / 4, 200, warmup=5)
        return {"h2d": h2d, "d2h": d2h, "latency_s": lat}
    a = torch.empty(n, dtype=torch.float32).fill_(1.0)
    b = torch.empty_like(a)
    rate = s.pcie_bytes / bench(lambda: b.copy_(a), device, s.min_time_s, s.max_reps)
    x, y = torch.ones(1), torch.ones(1)
    lat = bench(lambda: y.copy_(x), device, s.min_time_s / 4, 200, warmup=5)
    return {"h2d": rate, "d2h": rate, "latency_s": lat}


def measure_host_read(device: torch.device, s: Sizes) -> tuple[float, str]:
    """Bytes/s of rows the compute device gathers from host memory through the runner's mechanism."""
    from placer.runner.hostmem import HostMemory

    d = 64
    rows = max(s.table_bytes // 2 // (d * 4), 1024)
    mem = HostMemory(device, "auto")
    try:
        h = mem.empty((rows, d), torch.float32, gpu_readable=True)
        h.cpu.uniform_(-0.1, 0.1)
        lookups = s.lookups
        if h.dev is not None:
            t = measure_gather(h.dev, lookups, device, s, index_device=device)
        else:  # cpu_gather_copy: the runner's fallback, CPU gather into pinned memory + H2D + pool on device
            g = torch.Generator(device="cpu").manual_seed(11)
            ids = torch.randint(0, rows, (lookups,), generator=g)
            bags = torch.arange(lookups) // BAG
            bags_d = bags.to(device)
            staging = torch.empty((lookups, d), dtype=torch.float32, pin_memory=device.type == "cuda")

            def fallback():
                torch.index_select(h.cpu, 0, ids, out=staging)
                rows_d = staging.to(device, non_blocking=True)
                torch.zeros((lookups // BAG + 1, d), device=device).index_add_(0, bags_d, rows_d)

            t = bench(fallback, device, s.min_time_s, s.max_reps)
        return lookups * d * 4 / t, mem.mechanism
    finally:
        mem.close()


def _gemm_rate(m: int, k: int, n: int, dtype: torch.dtype, device: torch.device, s: Sizes) -> float:
    a = torch.randn((m, k), device=device).to(dtype)
    b = torch.randn((k, n), device=device).to(dtype)
    t = bench(lambda: a @ b, device, s.min_time_s, s.max_reps)
    return 2.0 * m * k * n / t


def measure_gemms(device: torch.device, s: Sizes) -> dict[str, dict]:
    """Per dtype: rate at each MLP shape and at a big square GEMM, FLOP/s."""
    out = {}
    if device.type == "cuda":
        plans = [("fp32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False),
                 ("fp16", torch.float16, False)]
    else:
        plans = [("fp32", torch.float32, False)]
    allow = torch.backends.cuda.matmul.allow_tf32 if device.type == "cuda" else None
    try:
        for name, dtype, tf32 in plans:
            if device.type == "cuda":
                torch.backends.cuda.matmul.allow_tf32 = tf32
            mlp = {f"{m}x{k}x{n}": _gemm_rate(m, k, n, dtype, device, s) for m, k, n in MLP_SHAPES}
            N = s.big_gemm
            big = _gemm_rate(N, N, N, dtype, device, s)
            out[name] = {"mlp": mlp, "big": big, "big_n": N}
    finally:
        if allow is not None:
            torch.backends.cuda.matmul.allow_tf32 = allow
    return out


def measure_launch(device: torch.device, quick: bool) -> float:
    """Seconds per tiny in-place add issued back to back (launch + dispatch)."""
    x = torch.zeros(1, device=device)
    n = 500 if quick else 3000
    for _ in range(50):
        x.add_(1.0)
    _sync(device)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1.0)
        _sync(device)
        best = min(best, (time.perf_counter() - t0) / n)
    return best


# ---- orchestration --------------------------------------------------------------------------------------------

def calibrate(device: torch.device, quick: bool = False, progress=None) -> Calibration:
    """Run every benchmark on ``device``; returns the measurements (see the module docstring)."""
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    s = sizes_for(device, quick)
    cal = Calibration(device=device, device_name=device_name(device), torch_version=torch.__version__,
                      date=_dt.date.today().isoformat(), quick=quick)
    cpu = torch.device("cpu")

    say("streaming copy")
    bw = measure_copy(device, s.copy_bytes, s)
    cal.set("hbm_bw_GBps", bw / 1e9, f"streaming copy of {s.copy_bytes / 2**20:.0f} MiB, read + write bytes")
    say("random row gathers")
    gathers = gather_rates(device, bw, s)
    eff = statistics.median(e for e, _ in gathers.values())
    per = ", ".join(f"d{d} {e:.2f}" for d, (e, _) in gathers.items())
    cal.set("hbm_gather_efficiency", eff, f"embedding_bag of random rows, median over dims ({per})")
    say("CPU gathers")
    if device.type == "cuda":
        host_bw = measure_copy(cpu, s.copy_bytes, s)
        cal.set("dram_bw_GBps", host_bw / 1e9, "CPU streaming copy, read + write bytes")
        cpu_gathers = gather_rates(cpu, host_bw, s, lookups=min(s.lookups, 2**19))
        rates = {d: r for d, (_, r) in cpu_gathers.items()}
    else:
        rates = {d: r for d, (_, r) in gathers.items()}
    cpu_rate = statistics.median(rates.values())
    per = ", ".join(f"d{d} {r / 1e9:.1f}" for d, r in rates.items())
    cal.set("cpu_gather_GBps", cpu_rate / 1e9, f"CPU embedding_bag over random host rows, {torch.get_num_threads()} "
                                               f"threads, median GB/s of rows over dims ({per})")
    say("host <-> device copies")
    link = measure_link(device, s)
    fast = max(link["h2d"], link["d2h"])
    mean = (link["h2d"] + link["d2h"]) / 2
    what = "pinned H2D/D2H copies" if device.type == "cuda" else "memcpy between RAM buffers (the CPU 'link')"
    cal.set("link_bw_GBps", fast / 1e9, f"{what} of {s.pcie_bytes / 2**20:.0f} MiB, faster direction "
                                        f"(H2D {link['h2d'] / 1e9:.1f}, D2H {link['d2h'] / 1e9:.1f} GB/s)")
    cal.set("link_efficiency", mean / fast, "mean of both directions over the faster one")
    cal.set("link_latency_us", link["latency_s"] * 1e6, "4-byte copy, synchronized, median")
    say("device reads of host memory")
    hr_rate, mech = measure_host_read(device, s)
    cal.host_read_mechanism = mech
    hr_eff = hr_rate / mean
    cal.set("host_read_efficiency", min(1.0, max(hr_eff, 1e-3)),
            f"gathers of random 256 B rows in host memory by the {mech} mechanism, {hr_rate / 1e9:.2f} GB/s over "
            f"the link's {mean / 1e9:.1f} GB/s" + (" (clamped to 1)" if hr_eff > 1 else ""))
    say("GEMMs")
    gemms = measure_gemms(device, s)
    for name, g in gemms.items():
        best = max(list(g["mlp"].values()) + [g["big"]])
        cal.peaks[name] = Measurement(best / 1e12, f"best measured rate (MLP shapes, {g['big_n']}^3 GEMM): "
                                                   "a measured best, not a datasheet peak")
    g32 = gemms["fp32"]
    geo = math.exp(statistics.fmean(math.log(r) for r in g32["mlp"].values()))
    cal.set("compute_efficiency", min(1.0, geo / max(list(g32["mlp"].values()) + [g32["big"]])),
            f"fp32 geometric-mean rate at DLRM MLP shapes ({geo / 1e12:.2f} TFLOP/s) / best fp32 rate")
    say("kernel launches")
    cal.set("kernel_launch_us", measure_launch(device, quick) * 1e6, "back-to-back tiny in-place adds, per op")
    say("host memory and CPU")
    mem_total = _meminfo("MemTotal") or 16 * GiB
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        cal.set("hbm_GiB", total / GiB, "torch.cuda.mem_get_info total")
        cal.set("hbm_reserve_GiB", (total - free) / GiB + 2.0, "in use at start (context) + 2 GiB workspace")
        cal.set("dram_GiB", mem_total / GiB, "MemTotal")
        cal.set("cpu_peak_TFLOPs", _gemm_rate(s.cpu_gemm, s.cpu_gemm, s.cpu_gemm, torch.float32, cpu, s) / 1e12,
                f"fp32 {s.cpu_gemm}^3 GEMM on the CPU, measured")
        del props
    else:
        cal.set("hbm_GiB", mem_total * HBM_SHARE_OF_RAM / GiB, f"{HBM_SHARE_OF_RAM:.0%} of MemTotal (the CPU run's "
                                                               "'device' share of RAM)")
        cal.set("hbm_reserve_GiB", 1.0, "chosen: Python, torch and the batch pool")
        cal.set("dram_GiB", mem_total * (1 - HBM_SHARE_OF_RAM) / GiB, "the rest of MemTotal")
        cal.set("dram_bw_GBps", bw / 1e9, "the same RAM streaming copy as hbm_bw_GBps")
        cal.set("cpu_peak_TFLOPs", cal.peaks["fp32"].value, "the best fp32 GEMM rate measured above")
    cal.set("dram_reserve_GiB", max(2.0, 0.1 * cal.v("dram_GiB")), "chosen: 10% of the host DRAM, at least 2 GiB")
    cal.set("cpu_cores", _cores(), "CPUs this process may run on (sched_getaffinity)")
    cal.wall_s = time.perf_counter() - t_start
    return cal


def _num(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 1:
        return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"
    return f"{x:.3g}"


def to_yaml(cal: Calibration, name: str | None = None, gpus: int = 1) -> str:
    """The hardware spec YAML, one source comment per number."""
    src = f"placer calibrate {cal.date} on {cal.device_name}, torch {cal.torch_version}"
    is_cpu = cal.device.type != "cuda"
    host = socket.gethostname().split(".")[0] or "local"
    name = name or f"{host}-{'cpu' if is_cpu else 'gpu'}-calibrated"
    lines = [
        f"# Hardware spec measured by `placer calibrate{' --quick' if cal.quick else ''}` "
        f"({'CPU run' if is_cpu else str(cal.device)}) in {cal.wall_s:.0f} s.",
        f"# Source of every number: {src} (per-line comments say how).",
    ]
    if is_cpu:
        lines += ["# CPU run: the 'GPU' is the CPU training process (placer run --device cpu); its HBM is a share of",
                  "# RAM, its bandwidths are RAM bandwidths, and its 'PCIe link' is a memcpy between RAM buffers."]
    else:
        lines += [f"# Host reads of the GPU measured with the {cal.host_read_mechanism} mechanism. GPU-to-GPU links are "
                  "not measured: with gpus.count > 1 their traffic routes through the host here."]
    lines += ["schema_version: 1", f"name: {name}",
              f"description: measured by placer calibrate on {cal.device_name} ({cal.date})",
              "templates:", "  local:", "    gpus:"]

    def item(indent: int, key: str, value, how: str) -> None:
        text = value if isinstance(value, str) else _num(value)
        lines.append(f"{' ' * indent}{key}: {text}".ljust(40) + f"# {src}: {how}")

    v = cal.values
    lines.append(f"      model: {json.dumps(cal.device_name)}")
    item(6, "count", gpus, "GPUs per node given with --gpus (one device measured)" if gpus > 1
         else "the one device measured")
    item(6, "hbm_GiB", v["hbm_GiB"].value, v["hbm_GiB"].how)
    item(6, "hbm_bw_GBps", v["hbm_bw_GBps"].value, v["hbm_bw_GBps"].how)
    item(6, "hbm_gather_efficiency", v["hbm_gather_efficiency"].value, v["hbm_gather_efficiency"].how)
    item(6, "hbm_reserve_GiB", v["hbm_reserve_GiB"].value, v["hbm_reserve_GiB"].how)
    lines.append("      peak_TFLOPs:")
    for k, m in cal.peaks.items():
        item(8, k, m.value, m.how)
    item(6, "compute_efficiency", v["compute_efficiency"].value, v["compute_efficiency"].how)
    item(6, "kernel_launch_us", v["kernel_launch_us"].value, v["kernel_launch_us"].how)
    item(6, "host_read_efficiency", v["host_read_efficiency"].value, v["host_read_efficiency"].how)
    lines.append("    host:")
    for key in ("dram_GiB", "dram_bw_GBps", "dram_reserve_GiB", "cpu_cores", "cpu_gather_GBps", "cpu_peak_TFLOPs"):
        val = int(v[key].value) if key == "cpu_cores" else v[key].value
        item(6, key, val, v[key].how)
    lines.append("    links:")
    lines.append("      - kind: pcie")
    lines.append("        between: [\"gpu*\", host]" if gpus > 1 else "        between: [gpu0, host]")
    item(8, "bw_GBps", v["link_bw_GBps"].value, v["link_bw_GBps"].how)
    item(8, "efficiency", min(1.0, v["link_efficiency"].value), v["link_efficiency"].how)
    item(8, "latency_us", v["link_latency_us"].value, v["link_latency_us"].how)
    lines += ["nodes:", "  - template: local", "    count: 1"]
    return "\n".join(lines) + "\n"
