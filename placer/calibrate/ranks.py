"""The collectives between the ranks of ``placer run --device cpu --nproc N``: gloo all-to-all and all-reduce
between N local processes, timed the way a training step meets them.

A step reaches each collective after a stretch of compute (lookups, the dense model), not back to back, and on
a small machine a collective that follows work costs more than one that follows another collective (on two
cores: 0.36 ms against 0.23 ms at 64 B; the ranks' gloo threads wake on busy cores).
So every timed collective here follows a burst of GEMMs of about ``BURST_S`` (untimed), all ranks released
together by a barrier before the burst; the time is the collective alone, the maximum over the ranks (the
collective ends when the slowest rank has its data), the median over the repeats.

Fitted per collective: T(S) = L + S / bw by least squares over every size (S: bytes one rank sends to the
others in the all-to-all; the all-reduced buffer's bytes for the all-reduce), L clamped at >= 0.

``placer calibrate --device cpu --nproc N`` measures the per-rank op costs with N - 1 busy neighbours
(``BusyNeighbours``: processes doing a rank's kind of work, GEMMs and gathers, on one thread each, so that
memory bandwidth and caches are shared as in a step), then these collectives, and writes (``apply``) the
all-to-all's fit as the link between the ranks: every GPU-to-GPU route of the spec goes gpu -> host -> gpu,
so bw_GBps = the all-to-all's bw and latency_us = L / 2 (two hops; cost.py's exchange latency is the
farthest path). The all-reduce's fit goes into the header and the results: the cost model prices it as a
ring over the same links (2 hops of latency per ring step), and ``fixed_us.all_reduce`` as what its fitted
latency exceeds those hops' (gloo's all-reduce runs more steps than the all-to-all, each a wake-up of its
threads: on two cores 250 us against 57 us). ``fixed_us.collective`` (charged on a rank's
stream per collective) becomes the wake-up cost: a rank's work right after a collective (it waited, its core
idled) runs slower than the same work back to back (on two cores: 0.05-0.4 ms per collective).

Seconds and bytes throughout; rates in bytes per second.
"""
from __future__ import annotations

import json
import math
import multiprocessing
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from placer.calibrate.record import Entry

#: bytes per peer (all-to-all) and per buffer (all-reduce) timed: the plans' exchanges (KiBs to MiBs)
SIZES = [4, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20]
QUICK_SIZES = [4, 64 << 10, 1 << 20]
#: untimed compute before each timed collective, s (a step's lookups or dense part: a millisecond or so)
BURST_S = 0.0005
#: rounds x repeats samples per size (full, quick); each round times every size once, so that a slow moment of
#: the machine (they last seconds on a small machine) hits every size alike
REPS, QUICK_REPS = 12, 6
ROUNDS = 4


@dataclass
class Fit:
    """T(S) = latency_s + S / bw_Bps over the timed sizes; ``rows``: (bytes, median s) as timed."""
    latency_s: float
    bw_Bps: float
    rows: list[tuple[int, float]] = field(default_factory=list)

    def seconds(self, n_bytes: float) -> float:
        return self.latency_s + n_bytes / self.bw_Bps

    def describe(self) -> str:
        pts = ", ".join(f"{_size(b)} {t * 1e3:.3f} ms" for b, t in self.rows)
        return f"T = {self.latency_s * 1e6:.0f} us + S / {self.bw_Bps / 1e9:.3f} GB/s over {pts}"


@dataclass
class Collectives:
    """The fitted all-to-all and all-reduce between ``world`` processes (each with one torch thread)."""
    world: int
    all_to_all: Fit
    all_reduce: Fit
    how: str
    #: what a rank's work right after a collective costs beyond the same work back to back, s (the max over
    #: ranks of median(woken) - median(hot) of ``wake_burst_s`` of _RankWork)
    wake_s: float = 0.0
    wake_burst_s: float = 0.0

    def to_json(self) -> dict:
        return {"world": self.world, "how": self.how, "wake_s": self.wake_s, "wake_burst_s": self.wake_burst_s,
                **{k: {"latency_s": f.latency_s, "bw_Bps": f.bw_Bps, "rows": f.rows}
                   for k, f in (("all_to_all", self.all_to_all), ("all_reduce", self.all_reduce))}}


def _size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


def fit(rows: list[tuple[int, float]]) -> Fit:
    """Least squares T = L + S / bw over (S bytes, T s); L clamped at >= 0, bw at a positive slope."""
    xs, ys = [float(b) for b, _ in rows], [t for _, t in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    slope = max(slope, 1e-15)
    return Fit(latency_s=max(0.0, my - slope * mx), bw_Bps=1.0 / slope, rows=list(rows))


def _burst(a, b, seconds: float, per_mm: float) -> None:
    for _ in range(max(1, round(seconds / per_mm))):
        a @ b


def _worker(rank: int, world: int, port: int, out_path: str, sizes: list[int], reps: int) -> None:
    import torch
    import torch.distributed as dist

    from placer.runner import waiting

    torch.set_num_threads(1)
    waiting.configure(waiting.spin_wanted("cpu", world, 1))  # the ranks wait as the runner's will
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    t0 = time.perf_counter()
    for _ in range(50):
        a @ b
    per_mm = (time.perf_counter() - t0) / 50
    work = _RankWork()
    hot, woken = [], []
    for _ in range(ROUNDS * reps):  # the same work back to back, and right after a barrier (the rank woken)
        t0 = time.perf_counter()
        work()
        hot.append(time.perf_counter() - t0)
        waiting.barrier()
        t0 = time.perf_counter()
        work()
        woken.append(time.perf_counter() - t0)
    bufs = {s: (torch.ones(max(1, s // 4) * world), torch.empty(max(1, s // 4) * world), torch.ones(max(1, s // 4)))
            for s in sizes}
    times: dict[tuple[str, int], list[float]] = {(k, s): [] for k in ("all_to_all", "all_reduce") for s in sizes}
    for r in range(ROUNDS * reps + 1):  # one of each (size, kind) per round: every size meets the same moments
        for s in sizes:
            send, recv, flat = bufs[s]
            for kind in ("all_to_all", "all_reduce"):
                waiting.barrier()
                _burst(a, b, BURST_S, per_mm)
                t = time.perf_counter()
                if kind == "all_to_all":
                    waiting.wait(dist.all_to_all_single(recv, send, async_op=True))
                else:
                    waiting.wait(dist.all_reduce(flat, async_op=True))
                if r:  # the first round warms the buffers and gloo's pairs
                    times[(kind, s)].append(time.perf_counter() - t)
    wake = torch.tensor([statistics.median(woken) - statistics.median(hot)], dtype=torch.float64)
    dist.all_reduce(wake, op=dist.ReduceOp.MAX)
    out = {"wake_s": max(0.0, float(wake)), "burst_s": statistics.median(hot), "spin": waiting.spinning()}
    for (kind, s), ts in times.items():
        t = torch.tensor(ts, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        n = max(1, s // 4) * 4
        out.setdefault(kind, []).append((n * (world - 1) if kind == "all_to_all" else n, float(t.median())))
    if rank == 0:
        Path(out_path).write_text(json.dumps(out), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def measure_collectives(world: int, quick: bool = False) -> Collectives:
    """Spawn ``world`` local processes (gloo over loopback, one torch thread each) and fit their all-to-all
    and all-reduce (module docstring)."""
    import torch.multiprocessing as mp

    from placer.runner.distributed import free_port

    sizes, reps = (QUICK_SIZES, QUICK_REPS) if quick else (SIZES, REPS)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "collectives.json")
        mp.start_processes(_worker, args=(world, free_port(), out, sizes, reps), nprocs=world, join=True,
                           start_method="spawn")
        got = json.loads(Path(out).read_text(encoding="utf-8"))
    how = (f"gloo between {world} local processes (1 torch thread each, waiting "
           f"{'spinning' if got['spin'] else 'asleep'} as the runner's ranks do), each timed collective after "
           f"{BURST_S * 1e3:.1f} ms of GEMMs on every rank (as a step meets it), max over ranks, median of "
           f"{ROUNDS} x {reps} repeats")
    return Collectives(world, fit([tuple(r) for r in got["all_to_all"]]), fit([tuple(r) for r in got["all_reduce"]]),
                       how, wake_s=got["wake_s"], wake_burst_s=got["burst_s"])


# ---- busy neighbours --------------------------------------------------------------------------------------

#: the neighbours' working set: a table of this many bytes gathered from (above the last-level cache)
NEIGHBOUR_TABLE_BYTES = 64 << 20


class _RankWork:
    """A rank's kind of work, about a millisecond of it: a gather of random rows from a table larger than the
    last-level cache, a few small GEMMs and many small elementwise ops (a dense model's, dispatch-bound)."""

    def __init__(self, dim: int = 64, lookups: int = 4096):
        import torch

        self.table = torch.randn(NEIGHBOUR_TABLE_BYTES // (4 * dim), dim)
        self.ids = torch.randint(0, self.table.shape[0], (lookups,))
        self.offsets = torch.arange(0, lookups, 4)
        self.x, self.w = torch.randn(256, 128), torch.randn(128, 128)

    def __call__(self) -> None:
        import torch
        import torch.nn.functional as F

        pooled = F.embedding_bag(self.ids, self.table, self.offsets, mode="sum")
        h = self.x
        for _ in range(4):
            h = torch.relu(h @ self.w)
            for _ in range(10):  # a dense step's many small ops (dispatch-bound)
                h = h * 0.5 + 0.1
        (pooled.sum() + h.sum()).item()


def _neighbour(stop) -> None:
    import torch

    torch.set_num_threads(1)
    work = _RankWork()
    while not stop.is_set():
        work()


class BusyNeighbours:
    """``count`` processes that work like a rank (gathers from a large table, GEMMs; one thread each) while the
    ``with`` block runs; stopped and joined on leaving it."""

    def __init__(self, count: int):
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.procs = [ctx.Process(target=_neighbour, args=(self.stop,), daemon=True) for _ in range(count)]

    def __enter__(self) -> "BusyNeighbours":
        for p in self.procs:
            p.start()
        time.sleep(0.5 if self.procs else 0.0)  # their imports and tables ready before the first timing
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def apply(cal, col: Collectives) -> None:
    """The collectives into ``cal`` (a placer.calibrate.Calibration of one rank): the link between the ranks
    from the all-to-all's fit (module docstring); the all-reduce's fit in a note."""
    a2a, ar = col.all_to_all, col.all_reduce
    memcpy = cal.v("link_bw_GBps")
    cal.set("link_bw_GBps", a2a.bw_Bps / 1e9, f"the all-to-all between the {col.world} rank processes (gloo over "
            f"loopback): {a2a.describe()}; {col.how} (the in-process memcpy: {memcpy:.3g} GB/s)")
    cal.set("link_efficiency", 1.0, "bw_GBps is the measured all-to-all rate itself")
    cal.set("link_latency_us", a2a.latency_s / 2 * 1e6, f"half the all-to-all's fitted latency ("
            f"{a2a.latency_s * 1e6:.0f} us): rank -> host -> rank is two hops")
    cal.device_costs.fixed_us["collective"] = Entry(col.wake_s * 1e6, (
        f"what a rank's work right after a collective costs beyond the same work back to back (it waited, its "
        f"core idled): {col.wake_burst_s * 1e3:.2f} ms of gathers, GEMMs and small ops after a barrier, minus the "
        f"same back to back, medians, max over the {col.world} ranks"))
    hops = 2 * min(col.world - 1, math.ceil(math.log2(col.world))) if col.world > 1 else 0
    extra = max(0.0, ar.latency_s - hops * a2a.latency_s)
    cal.device_costs.fixed_us["all_reduce"] = Entry(extra * 1e6, (
        f"the all-reduce's fitted latency ({ar.latency_s * 1e6:.0f} us) beyond the latency of its ring's {hops} "
        f"rank -> rank hops ({a2a.latency_s * 1e6:.0f} us each: the all-to-all's), clamped at >= 0"))
    cal.ranks = col
    cal.notes.append(f"all-reduce between the {col.world} ranks (priced as a ring over the link above): "
                     f"{ar.describe()}")
