"""The op benchmarks of ``placer calibrate``: the runner's own code (runner/kernels.py, runner/optim.py) timed
at known sizes, each number obtained by inverting the formula placer/program/opcosts.py prices that op with.

T is a median measured time (seconds), f(kind) the fixed cost measured for that kind, sizes in bytes:

- fixed_us[kind] = T of the kind's smallest op (1 id, one 1 x 4 row, a 1 x 1 x 1 GEMM, ...): the dispatch,
  launch and smallest run of one op; priced as fixed(kind) alone.
- stream(2B) = 2 B / (T - f(copy)) for ``pack_grad`` of B bytes (read + written): a table keyed by the bytes
  an op touches (2B: 64 KiB .. 512 MiB), each point a copy of that size.
- gather[dtype](rb), gather_cached[dtype](rb): two lookups, one of L1 random ids in bags of BAG over a table
  far larger than the caches (U1 expected distinct rows, about L1), one of L2 ids in bags of CACHED_BAG over
  a cache-resident table (U2 about its rows, at most L2 / 256); both priced as f(lookup) + U rb / gather +
  (L - U) rb / gather_cached + out / stream(out), two equations solved for the two rates. (The cached
  lookup's larger bags keep its pooled output, priced at the cold stream rate, a small share of its time.)
- host_gather[dtype](rb) = L rb / (T - f(lookup) - out / stream): a lookup of rows in host memory by the device.
- sort_ns_per_id: (T - f(sort)) = ids x sort_ns_per_id, relative least squares over several id counts.
- segment_reduce(grb) = L grb / (T - f(segment_reduce)), grb = gradient row bytes (fp32).
- update[opt][dtype](rb) = rows rb / (T - f(update_opt)), rb = weight + optimizer state bytes of a row.

Rows: the row tables are keyed by storage dtype, then row bytes. fp32 rows (widths 4..256: 16..1024 B)
define the fp32 entries, fp16 rows of the same widths (8..512 B) the fp16 entries; rows of other widths
(``check_widths``, full mode) are timed as checks of the interpolation between keys and reported beside the
nearest entry of their dtype. Every timed input rotates between repeats (fresh random ids), so no repeat
finds the previous one's rows in a cache; the copies, segment reductions and the replica's scatter and dense
updates take their operands from the cold pool (cold.py), a fresh stretch of it each repeat. Only the cached
lookup reads the same small table on purpose (gather_cached prices rows read again within a step).
"""
from __future__ import annotations

import math
import statistics

import torch

from placer.calibrate.cold import ColdPool
from placer.calibrate.ids import skewed_ids
from placer.calibrate.record import Calibration, Entry, OpCostEntries, Sample
from placer.calibrate.timing import Sizes, bench, bench_tiny
from placer.program.opcosts import RateTable
from placer.runner import kernels
from placer.runner.optim import NAMES as OPTIMIZERS, SparseRowOptimizer, state_bytes_per_row, state_shapes
from placer.units import MiB

BAG = 4  # lookups per bag in the lookup benchmarks
LR = 0.01
DTYPES = ("fp32", "fp16")
TORCH = {"fp32": torch.float32, "fp16": torch.float16}
ESIZE = {"fp32": 4, "fp16": 2}
CACHED_DRAWS = 16  # the cached lookup draws 16 x the big lookup's ids ...
CACHED_REUSE = 256  # ... from a table of at most 1/256 as many rows
MAX_ID_SETS = 8  # random id sets a benchmark rotates through (the warm-up's included)
CACHED_BAG = 32  # lookups per bag of the cached lookup
SKEW_CHECKS = (1.05, 1.2)  # zipf exponents the sort and the segment reduce are checked on (the workloads' range)
#: a rate is inverted from T - fixed: it is kept only from an op timed at this many times its fixed cost or more,
#: else the op is timed again GROWTH x larger (at most GROWTH_STEPS times). On an H100 the segment
#: reduce of 65,536 lookups took about its fixed cost (0.24 ms), and three calibrations of the same kind of machine
#: inverted 78, 173 and 756 GB/s from the same sizes (validation/results/gpu-2026-11-27*)
CONDITIONED = 3.0
GROWTH, GROWTH_STEPS = 4, 2


def expected_unique(rows: float, draws: float) -> float:
    """Expected distinct rows among ``draws`` uniform draws (with replacement) from ``rows`` rows."""
    if rows <= 1:
        return min(1.0, draws)
    return rows * -math.expm1(draws * math.log1p(-1.0 / rows))


def _mib(n: float) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB"


def _ms(t: float) -> str:
    return f"{t * 1e3:.4g} ms"


class OpBench:
    """Times the runner's ops on ``device`` and fills ``entries`` (the device's or the host CPU's op costs)."""

    def __init__(self, cal: Calibration, device: torch.device, sizes: Sizes, entries: OpCostEntries,
                 side: str = "device", say=None, pool: ColdPool | None = None):
        self.cal, self.device, self.s, self.entries, self.side = cal, device, sizes, entries, side
        self.pool = pool or ColdPool(device, sizes.pool_cap_bytes)
        self.say = say or (lambda _msg: None)
        self.gen = torch.Generator(device="cpu").manual_seed(1234)
        self._buf: torch.Tensor | None = None
        self.sets = min(sizes.reps + 1, MAX_ID_SETS)  # inputs rotated between repeats

    # ---- helpers ------------------------------------------------------------------------------------------

    @property
    def buf(self) -> torch.Tensor:
        """The big table's bytes (``table_bytes``), filled with fp16 1.0 (read as fp32: 0.0078), allocated once."""
        if self._buf is None:
            half = torch.empty(self.s.table_bytes // 2, dtype=torch.float16, device=self.device)
            half.fill_(1.0)
            self._buf = half.view(torch.uint8)
        return self._buf

    def release(self) -> None:
        self._buf = None

    def region(self, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        return self.buf[offset:offset + n].view(dtype).view(*shape)

    def ids(self, high: int, n: int) -> torch.Tensor:
        return torch.randint(0, int(high), (int(n),), generator=self.gen).to(self.device)

    def fixed_s(self, kind: str) -> float:
        return self.entries.fixed_us[kind].value * 1e-6

    def stream_s(self, touched: float) -> float:
        """Seconds of ``touched`` bytes at the stream table's rate for that size (as opcosts prices it)."""
        table = RateTable({b: e.value * 1e9 for b, e in self.entries.stream_GBps.items()})
        return touched / table(touched) if touched > 0 else 0.0

    def stream_key(self, touched: float) -> int:
        """The stream table's point nearest ``touched`` bytes (log2): where a check's ratio is reported."""
        return min(self.entries.stream_GBps, key=lambda b: abs(math.log2(b / max(touched, 1.0))))

    def cold_sets(self, operands) -> list[list[torch.Tensor]]:
        """One operand set from the cold pool per call ``bench`` makes (its repeats and its warm-up)."""
        return self.pool.sets(operands, self.s.reps + 1)

    def add(self, kind, sizes, seconds, what, defines=(), about="", exact=True) -> Sample:
        return self.cal.add(Sample(kind, sizes, seconds, what, self.side, tuple(defines), about, exact))

    def _count(self, bytes_per_item: float, lo: int | None = None, hi: int | None = None) -> int:
        """Items (ids, rows) one timed op handles: ``gather_bytes`` worth, clamped, a multiple of BAG."""
        lo, hi = lo or self.s.min_ids, hi or self.s.max_ids
        n = int(min(max(self.s.gather_bytes // bytes_per_item, lo), hi))
        return max(BAG, n - n % BAG)

    # ---- fixed costs --------------------------------------------------------------------------------------

    def fixed_costs(self) -> None:
        """``fixed_us`` of every kind the runner times, from its smallest op; also ``kernel_launch_us``."""
        dev, batches = self.device, self.s.tiny_batches
        z = lambda *shape, dtype=torch.float32: torch.zeros(shape, dtype=dtype, device=dev)
        w, g1, out = z(16, 4), z(1, 4), z(1, 4)
        one = torch.tensor([3], device=dev)
        zero = z(1, dtype=torch.int64)
        runs = kernels.sort(one, zero)
        m1 = z(1, 1)
        a, b = torch.ones((1, 4), device=dev), torch.ones((1, 4), device=dev)
        plain = {
            "lookup": (lambda: kernels.lookup(w, one, zero),
                       "kernels.lookup of 1 id in 1 bag over a 16 x 4 fp32 table"),
            "sort": (lambda: kernels.sort(one, zero), "kernels.sort of 1 id"),
            "segment_reduce": (lambda: kernels.segment_reduce(g1, runs[2], runs[1]),
                               "kernels.segment_reduce of 1 lookup of a 4-column gradient"),
            "copy": (lambda: kernels.pack_grad([g1], out), "kernels.pack_grad of one 1 x 4 part"),
            "gemm": (lambda: torch.mm(m1, m1), "torch.mm of 1 x 1 by 1 x 1, fp32"),
        }
        for kind, (fn, what) in plain.items():
            self._fixed(kind, bench_tiny(fn, dev, batches), what)
        groups = {
            "elementwise": {"add": lambda: torch.add(a, b), "mul": lambda: torch.mul(a, b),
                            "relu": lambda: torch.relu(a), "sum": lambda: a.sum()},
            "view": {"t": lambda: a.t(), "view": lambda: a.view(-1), "select": lambda: a.select(0, 0),
                     "detach": lambda: a.detach(), "unsqueeze": lambda: a.unsqueeze(0)},
        }
        for kind, ops in groups.items():
            times = {name: bench_tiny(fn, dev, batches) for name, fn in ops.items()}
            per = ", ".join(f"{n} {t * 1e6:.2f}" for n, t in times.items())
            self._fixed(kind, statistics.median(times.values()),
                        f"median over tiny 1 x 4 fp32 ops ({per} us)")
        for opt in OPTIMIZERS:
            o = SparseRowOptimizer(opt, LR)
            o.new_step()
            states = [z(*shape) for shape in state_shapes(opt, 16, 4)]
            self._fixed(f"update_{opt}", bench_tiny(lambda: o.update(w, states, one, g1), dev, batches),
                        f"SparseRowOptimizer('{opt}').update of 1 row of a 16 x 4 fp32 table")
        x = z(1)
        launch = bench_tiny(lambda: x.add_(1.0), dev, batches)
        if self.side == "device":
            self.cal.set("kernel_launch_us", launch * 1e6, "a tiny in-place add (1 element), per op, median of "
                                                          f"{batches} batches of 20 back to back")

    def _fixed(self, kind: str, seconds: float, what: str) -> None:
        what = f"{what}: median of {self.s.tiny_batches} batches of 20 back to back"
        self.entries.fixed_us[kind] = Entry(seconds * 1e6, what)
        self.add("fixed", {"kind": kind}, seconds, what, defines=(f"fixed_us.{kind}",))

    # ---- streaming copies -----------------------------------------------------------------------------------

    def _pack(self, touched: int, warm: bool = False) -> tuple[float, int]:
        """(median seconds, bytes copied) of pack_grad of two 64-column fp32 parts, ``touched`` / 2 bytes in
        all, each repeat on a fresh set of parts and output from the cold pool (``warm``: the same set every
        repeat, as a small model's step meets its operands)."""
        c = 64
        rows = max(2, touched // 2 // (4 * c))
        f32 = torch.float32
        operands = [(f32, (rows // 2, c), False), (f32, (rows - rows // 2, c), False), (f32, (rows, c), False)]
        sets = self.pool.sets(operands, 1) * (self.s.reps + 1) if warm else self.cold_sets(operands)
        t = bench(lambda i: kernels.pack_grad(sets[i][:2], sets[i][2]), self.device, self.s.reps)
        return t, rows * c * 4

    def stream(self) -> None:
        """The ``stream_GBps`` table: at each of ``stream_touched`` bytes, ``pack_grad`` of half as many
        (two parts into one buffer, read + written), cold; ``stream_check_touched`` sizes are checks."""
        self.entries.stream_GBps = {}
        for touched in self.s.stream_touched:
            t, n = self._pack(touched)
            var = t - self.fixed_s("copy")
            exact = var > 0
            var = var if exact else 0.5 * t
            what = f"kernels.pack_grad of two 64-column fp32 parts, {_mib(n)} in all ({_ms(t)})"
            how = f"{what}, inverted: 2 x bytes / (T - fixed copy); {self.pool.note(2 * n)}"
            self.entries.stream_GBps[2 * n] = Entry(2 * n / var / 1e9, how)
            self.add("copy", {"bytes": n}, t, what, defines=(f"stream_GBps.{2 * n}",), exact=exact)
        for touched in self.s.stream_check_touched:
            t, n = self._pack(touched)
            self.add("copy", {"bytes": n}, t, f"pack_grad of {_mib(n)} ({_mib(2 * n)} touched)",
                     about=f"stream_GBps.{self.stream_key(2 * n)}")
        self.stream_warm()
        self.strided_and_indexed()

    def stream_warm(self) -> None:
        """``stream_warm_GBps``: the same copies with one operand set reused by every repeat (the operands in
        whichever cache holds that many bytes; at DRAM sizes as cold as the cold copies)."""
        self.entries.stream_warm_GBps = {}
        f = self.fixed_s("copy")
        for touched in self.s.stream_touched:
            t, n = self._pack(touched, warm=True)
            var = t - f
            exact = var > 0
            var = var if exact else 0.5 * t
            what = f"kernels.pack_grad of two 64-column fp32 parts, {_mib(n)} in all, the same buffers every repeat"
            self.entries.stream_warm_GBps[2 * n] = Entry(2 * n / var / 1e9, f"{what} ({_ms(t)}), inverted: "
                                                                             "2 x bytes / (T - fixed copy)")
            self.add("copy_warm", {"bytes": n}, t, what, defines=(f"stream_warm_GBps.{2 * n}",), exact=exact)

    def strided_and_indexed(self) -> None:
        """``strided_GBps`` and ``indexed_GBps`` at the stream table's sizes up to 64 MiB, as the dense step
        meets them (cold operands): a [N, 9, 32] tensor added to the transpose of a [N, 32, 9] one (the dot
        interaction's gradient added to its transpose), and the strictly lower triangle of [N, 9, 9] taken by
        two index tensors (its forward, ``Z[:, li, lj]``). Bytes moved as the trace counts them (every operand,
        index tensors included, and the output); rate = moved / (T - fixed elementwise)."""
        f32, f = torch.float32, self.fixed_s("elementwise")
        li, lj = (t.to(self.device) for t in torch.tril_indices(9, 9, offset=-1))
        self.entries.strided_GBps, self.entries.indexed_GBps = {}, {}
        for touched in [b for b in self.s.stream_touched if b <= 64 * MiB]:
            n = max(1, touched // (3 * 9 * 32 * 4))
            sets = self.cold_sets([(f32, (n, 9, 32), False), (f32, (n, 9, 32), True)])
            t = bench(lambda i: torch.add(sets[i][0], sets[i][1]), self.device, self.s.reps)
            moved = 3 * n * 9 * 32 * 4
            self._rate(self.entries.strided_GBps, "strided", moved, t, f,
                       f"torch.add of a [{n}, 9, 32] fp32 tensor and the transpose of a [{n}, 32, 9] one")
            n = max(1, touched // ((81 + 36) * 4))
            sets = self.cold_sets([(f32, (n, 9, 9), False)])
            t = bench(lambda i: sets[i][0][:, li, lj], self.device, self.s.reps)
            moved = n * (81 + 36) * 4 + li.numel() * li.element_size() * 2
            self._rate(self.entries.indexed_GBps, "indexed", moved, t, f,
                       f"Z[:, li, lj] of a [{n}, 9, 9] fp32 Z, the 36 pairs of its strict lower triangle")

    def _rate(self, table: dict, kind: str, moved: int, t: float, f: float, what: str) -> None:
        """One point of a bytes-moved table: moved / (T - fixed elementwise), and its defining sample."""
        var = t - f
        exact = var > 0
        var = var if exact else 0.5 * t
        table[moved] = Entry(moved / var / 1e9, f"{what} ({_ms(t)}), cold operands, inverted: bytes moved / "
                                                "(T - fixed elementwise)")
        self.add(kind, {"bytes": moved}, t, what, defines=(f"{kind}_GBps.{moved}",), exact=exact)

    # ---- lookups --------------------------------------------------------------------------------------------

    def _rows(self, checks: bool) -> list[tuple[str, int, bool]]:
        """(dtype, width, defines) of the rows timed: every dtype at ``widths`` (defining its own entries),
        then, with ``checks``, at ``check_widths`` (checks)."""
        out = [(dt, c, True) for dt in DTYPES for c in self.s.widths]
        if checks:
            out += [(dt, c, False) for dt in DTYPES for c in self.s.check_widths]
        return out

    def _nearest(self, dtype: str, rb: int, state=lambda c: 0) -> int:
        """The defining row bytes of ``dtype`` nearest ``rb`` in log2 (rows of ``state(c)`` extra bytes)."""
        return min((c * ESIZE[dtype] + state(c) for c in self.s.widths), key=lambda k: abs(math.log2(k / rb)))

    def _lookup_time(self, table: torch.Tensor, L: int, rotate: bool = True, bag: int = BAG) -> float:
        rows = table.shape[0]
        sets = [self.ids(rows, L) for _ in range(self.sets if rotate else 1)]
        offsets = torch.arange(0, L, bag, device=self.device)
        return bench(lambda i: kernels.lookup(table, sets[i % len(sets)], offsets), self.device, self.s.reps)

    def gathers(self) -> None:
        """``gather_GBps`` and ``gather_cached_GBps`` per row bytes (see the module docstring). The cached
        lookup draws CACHED_DRAWS x as many ids from a table of at most 1/CACHED_REUSE of them, so that its
        distinct rows (priced at the miss rate) are a small share of its time and the two equations stay
        well apart."""
        f = self.fixed_s("lookup")
        for dt, c, defines in self._rows(True):
            rb = c * ESIZE[dt]
            L1 = self._count(rb)
            L2 = max(L1, min(CACHED_DRAWS * L1, self.s.max_ids * 4))
            n_big = self.s.table_bytes // rb
            n_small = int(max(16, min(self.s.cached_table_bytes // rb, L2 // CACHED_REUSE)))
            big = self.buf.view(TORCH[dt])[:n_big * c].view(n_big, c)
            t1 = self._lookup_time(big, L1)
            t2 = self._lookup_time(big[:n_small], L2, rotate=False, bag=CACHED_BAG)  # cache-resident on purpose
            u1, u2 = expected_unique(n_big, L1), expected_unique(n_small, L2)
            out1, out2 = L1 // BAG * c * 4, -(-L2 // CACHED_BAG) * c * 4
            r1, r2 = t1 - f - self.stream_s(out1), t2 - f - self.stream_s(out2)
            det = rb * (u1 * (L2 - u2) - u2 * (L1 - u1))
            x = (r1 * (L2 - u2) - r2 * (L1 - u1)) / det  # s per byte of distinct (missed) rows
            y = (u1 * r2 - u2 * r1) / det  # s per byte of repeated rows
            exact = x > 0 and y > 0
            if not exact:  # noise: all of the big lookup's rows as misses, the small one's rest as hits
                x = max(r1, 1e-3 * t1) / (L1 * rb)
                y = max(r2 - u2 * rb * x, 1e-3 * t2) / ((L2 - u2) * rb)
            what = (f"{dt} x{c} rows ({rb} B): kernels.lookup of {L1} random ids in bags of {BAG} over a "
                    f"{_mib(n_big * rb)} table ({_ms(t1)}, {u1:.0f} expected distinct rows) and of {L2} in bags of "
                    f"{CACHED_BAG} over a {_mib(n_small * rb)} one ({_ms(t2)}, {u2:.0f} distinct)")
            sizes = lambda L, u, out: {"row_bytes": rb, "lookups": L, "unique": u, "out_bytes": out, "dtype": dt}
            if defines:
                how = (f"{what}; the two rates solved from lookup = fixed + U rb / gather + (L - U) rb / "
                       "gather_cached + out / stream" + ("" if exact else " (noisy: clamped)"))
                self.entries.gather_GBps.setdefault(dt, {})[rb] = Entry(1 / x / 1e9, how)
                self.entries.gather_cached_GBps.setdefault(dt, {})[rb] = Entry(1 / y / 1e9, how)
                paths = (f"gather_GBps.{dt}.{rb}", f"gather_cached_GBps.{dt}.{rb}")
                self.add("lookup", sizes(L1, u1, out1), t1, what + " [big table]", defines=paths, exact=exact)
                self.add("lookup", sizes(L2, u2, out2), t2, what + " [cached table]", defines=paths, exact=exact)
            else:
                near = self._nearest(dt, rb)
                self.add("lookup", sizes(L1, u1, out1), t1, f"{dt} x{c} ({rb} B) big table",
                         about=f"gather_GBps.{dt}.{near}")
                self.add("lookup", sizes(L2, u2, out2), t2, f"{dt} x{c} ({rb} B) cached table",
                         about=f"gather_cached_GBps.{dt}.{near}")

    def unified_host_gathers(self) -> None:
        """A CPU run: rows "in host memory" are the same RAM, read in place by the same lookup (HostMemory's
        mechanism "cpu"), so host_gather_GBps is gather_GBps; a unified node never prices it."""
        for dt, table in self.entries.gather_GBps.items():
            for rb, e in table.items():
                self.entries.host_gather_GBps.setdefault(dt, {})[rb] = Entry(
                    e.value, "unified memory: host rows are this RAM, read in place by the same kernels.lookup "
                             "(HostMemory mechanism 'cpu'): the gather_GBps entry; not priced on a unified node")

    def host_gathers(self) -> str:
        """``host_gather_GBps`` on a GPU: lookups of rows in host memory through the runner's HostMemory (uva:
        the GPU gathers mapped pinned rows; else the CPU gathers and copies the pooled rows over). Returns the
        mechanism."""
        from placer.runner.hostmem import HostMemory

        mem = HostMemory(self.device, "auto")
        try:
            nbytes = self.s.table_bytes // 2
            h = mem.empty((nbytes,), torch.uint8, gpu_readable=True)
            h.cpu.view(torch.float16).fill_(1.0)
            f = self.fixed_s("lookup")
            for dt, c, defines in self._rows(False):
                rb = c * ESIZE[dt]
                L = self._count(rb)
                out = L // BAG * c * 4
                n = nbytes // rb
                if h.dev is not None:
                    table = h.dev[:n * rb].view(TORCH[dt]).view(n, c)
                    t = self._lookup_time(table, L)
                else:  # cpu_gather_copy: the CPU pools the rows, the pooled rows cross to the GPU
                    table = h.cpu[:n * rb].view(TORCH[dt]).view(n, c)
                    sets = [torch.randint(0, n, (L,), generator=self.gen) for _ in range(self.sets)]
                    offsets = torch.arange(0, L, BAG)
                    t = bench(lambda i: kernels.lookup(table, sets[i % len(sets)], offsets).to(self.device),
                              self.device, self.s.reps)
                var = t - f - self.stream_s(out)
                exact = var > 0
                var = var if exact else 0.5 * t
                what = (f"{dt} x{c} rows ({rb} B) in host memory ({mem.mechanism}: {mem.detail}): kernels.lookup of "
                        f"{L} random ids in bags of {BAG} over a {_mib(n * rb)} table ({_ms(t)})")
                self.entries.host_gather_GBps.setdefault(dt, {})[rb] = Entry(
                    L * rb / var / 1e9, what + ", inverted: L rb / (T - fixed lookup - out / stream)")
                self.add("lookup", {"row_bytes": rb, "lookups": L, "unique": L, "out_bytes": out, "from_host": True,
                                    "dtype": dt}, t, what, defines=(f"host_gather_GBps.{dt}.{rb}",), exact=exact)
            return f"{mem.mechanism} ({mem.detail})"
        finally:
            mem.close()

    # ---- backward ops --------------------------------------------------------------------------------------

    def sort(self) -> None:
        """``sort_ns_per_id`` per id count: kernels.sort of each of ``sort_ids`` random id counts, inverted as
        (T - fixed sort) / ids (a sort's cost per id changes with the count, and not smoothly: torch.sort on a
        CPU runs a comparison sort below 32,768 ids and a radix sort above; the cost model interpolates in log2
        of the ids); ``sort_check_ids`` counts are checks."""
        span = 2**26

        def timed(n: int) -> float:
            sets = [self.ids(span, n) for _ in range(self.sets)]
            bags = torch.arange(n, device=self.device) // BAG
            return bench(lambda i: kernels.sort(sets[i % len(sets)], bags), self.device, self.s.reps)

        f = self.fixed_s("sort")
        per_id: dict[int, Entry] = {}
        for n in self.s.sort_ids:
            t = timed(n)
            exact = t > 2 * f  # a sort within twice its fixed cost is priced at half its time per id
            x = (t - f) / n if exact else 0.5 * t / n
            per_id[n] = Entry(x * 1e9, f"kernels.sort of {n} random ids of a {span}-row id space, bags of {BAG}: "
                                       f"{_ms(t)}, inverted: (T - fixed sort) / ids" + ("" if exact else
                                       " (T within 2x the fixed cost: T / 2 / ids)"))
            self.add("sort", {"ids": n}, t, f"kernels.sort of {n} random ids", defines=(f"sort_ns_per_id.{n}",),
                     exact=exact)
        self.entries.sort_ns_per_id = per_id
        # each check written beside the timed count nearest in log2 of the ids
        near = lambda m: min(per_id, key=lambda n: abs(math.log2(n / m)))
        for m in self.s.sort_check_ids:
            self.add("sort", {"ids": m}, timed(m), f"{m} ids", about=f"sort_ns_per_id.{near(m)}")
        n = max(self.s.sort_ids)
        bags = torch.arange(n, device=self.device) // BAG
        for alpha in SKEW_CHECKS:  # the workloads' skew: many repeats of the hottest ids
            sets = [skewed_ids(n, alpha, seed=k, space=span).to(self.device) for k in range(min(self.sets, 3))]
            t = bench(lambda i: kernels.sort(sets[i % len(sets)], bags), self.device, self.s.reps)
            self.add("sort", {"ids": n}, t, f"{n} zipf {alpha} ids", about=f"sort_ns_per_id.{n}")

    def conditioned(self, n: int, f: float, measure, bytes_per_item: float, n_max: int | None = None
                    ) -> tuple[int, float, object]:
        """(n, seconds, what ``measure`` returned) of an op on ``n`` items timed at CONDITIONED x its fixed cost
        ``f`` or more: ``measure(n) -> (seconds, anything)`` is called again with GROWTH x the items while the op
        is shorter, at most GROWTH_STEPS times, while the items' bytes fit in the cold pool's cap and the items
        stay within ``n_max``."""
        t, extra = measure(n)
        for _ in range(GROWTH_STEPS):
            grown = GROWTH * n
            if t >= CONDITIONED * f or grown * bytes_per_item > self.s.pool_cap_bytes or grown > (n_max or grown):
                break
            n *= GROWTH
            t, extra = measure(n)
        return n, t, extra

    def segment_reduces(self) -> None:
        """``segment_reduce_GBps`` per gradient row bytes (fp32, widths as the fp32 rows), each from lookups enough
        for the reduce to take CONDITIONED x its fixed cost (``conditioned``)."""
        f = self.fixed_s("segment_reduce")

        def measure(c: int, L: int):
            ids = self.ids(L, L)  # a table of L rows: about 63% of the lookups distinct
            runs = kernels.sort(ids, torch.arange(L, device=self.device) // BAG)
            grads = self.cold_sets([(torch.float32, (L // BAG, c), False)])
            t = bench(lambda i: kernels.segment_reduce(grads[i][0], runs[2], runs[1]), self.device, self.s.reps)
            return t, (runs, grads)

        for c in self.s.widths:
            grb = 4 * c
            L, t, (runs, grads) = self.conditioned(self._count(grb), f, lambda n: measure(c, n), grb + 3 * 8)
            var = t - f
            exact = var > 0
            var = var if exact else 0.5 * t
            what = (f"kernels.segment_reduce of {L} lookups ({runs[0].numel()} distinct rows) of {c}-column fp32 "
                    f"gradients ({grb} B rows) pooled in bags of {BAG} ({_ms(t)})")
            self.entries.segment_reduce_GBps[grb] = Entry(L * grb / var / 1e9,
                                                          f"{what}, inverted: L grb / (T - fixed segment_reduce)")
            self.add("segment_reduce", {"row_bytes": grb, "lookups": L}, t, what,
                     defines=(f"segment_reduce_GBps.{grb}",), exact=exact)
            for alpha in SKEW_CHECKS:  # the same lookups on zipf ids: a hot row's long run must not cost more
                skewed = kernels.sort(skewed_ids(L, alpha, seed=c, space=L).to(self.device),
                                      torch.arange(L, device=self.device) // BAG)
                t = bench(lambda i: kernels.segment_reduce(grads[i][0], skewed[2], skewed[1]), self.device,
                          self.s.reps)
                self.add("segment_reduce", {"row_bytes": grb, "lookups": L}, t,
                         f"{L} zipf {alpha} lookups (hottest row {int(skewed[1].max())})",
                         about=f"segment_reduce_GBps.{grb}")

    def updates(self) -> None:
        """``update_GBps[opt][dtype]`` per row bytes (weights + fp32 state) for every optimizer and dtype."""
        for opt in OPTIMIZERS:
            f = self.fixed_s(f"update_{opt}")
            for dt, c, defines in self._rows(True):
                e = ESIZE[dt]
                rb = c * e + state_bytes_per_row(opt, c)
                n = self.s.table_bytes // rb
                weight = self.region(0, TORCH[dt], (n, c))
                states, off = [], n * c * e
                for shape in state_shapes(opt, n, c):
                    states.append(self.region(off, torch.float32, shape))
                    off += math.prod(shape) * 4
                o = SparseRowOptimizer(opt, LR)
                o.new_step()

                def measure(u: int):
                    sets = [torch.unique(self.ids(n, u)) for _ in range(self.sets)]
                    grads = [torch.rand((s.numel(), c), device=self.device).mul_(1e-3) for s in sets]
                    t = bench(lambda i: o.update(weight, states, sets[i % len(sets)], grads[i % len(sets)]),
                              self.device, self.s.reps)
                    return t, statistics.median(s.numel() for s in sets)

                u = self._count(rb, lo=max(BAG, self.s.min_ids // 4), hi=self.s.update_rows)
                _, t, rows = self.conditioned(u, f if defines else 0.0, measure, (c * 4 + 8) * self.sets,
                                              n_max=n // 2)  # distinct rows stay a minority of the table's
                path = f"update_GBps.{opt}.{dt}.{rb}"
                what = (f"{dt} x{c} rows ({rb} B with state): SparseRowOptimizer('{opt}').update of {rows:.0f} "
                        f"distinct random rows (sorted) of a {_mib(n * rb)} table ({_ms(t)})")
                sizes = {"optimizer": opt, "row_bytes": rb, "rows": rows, "dtype": dt}
                if not defines:
                    near = self._nearest(dt, rb, lambda w: state_bytes_per_row(opt, w))
                    self.add("update", sizes, t, f"{dt} x{c} ({rb} B)", about=f"update_GBps.{opt}.{dt}.{near}")
                    continue
                var = t - f
                exact = var > 0
                var = var if exact else 0.5 * t
                self.entries.update_GBps.setdefault(opt, {}).setdefault(dt, {})[rb] = Entry(
                    rows * rb / var / 1e9, f"{what}, inverted: rows rb / (T - fixed update_{opt})")
                self.add("update", sizes, t, what, defines=(path,), exact=exact)

    def replica_checks(self) -> None:
        """A replica's scatter and dense update (priced at the stream rate for the bytes they touch): checks of
        stream_GBps, each repeat on a fresh gradient, weight and state from the cold pool."""
        rows, c = (2**12 if self.s.reps <= 3 else 2**16), 64
        dev, f32 = self.device, torch.float32
        uniq = torch.unique(self.ids(rows, rows // 4))
        sets = self.cold_sets([(f32, (rows, c), False), (f32, (uniq.numel(), c), False)])
        t = bench(lambda i: kernels.scatter(sets[i][0], uniq, sets[i][1]), dev, self.s.reps)
        sizes = {"bytes": rows * c * 4, "unique": uniq.numel(), "grad_row_bytes": 4 * c}
        touched = sizes["bytes"] + 2 * sizes["unique"] * sizes["grad_row_bytes"]
        self.add("scatter", sizes, t, f"kernels.scatter into a {rows} x {c} gradient",
                 about=f"stream_GBps.{self.stream_key(touched)}")
        for opt in OPTIMIZERS:
            shapes = [(rows, c)] + list(state_shapes(opt, rows, c)) + [(rows, c)]  # weight, states, gradient
            sets = self.cold_sets([(f32, tuple(shape), False) for shape in shapes])
            o = SparseRowOptimizer(opt, LR)
            o.new_step()
            t = bench(lambda i: o.update_dense(sets[i][0], sets[i][1:-1], sets[i][-1]), dev, self.s.reps)
            sizes = {"rows": rows, "row_bytes": 4 * c, "state_bytes": state_bytes_per_row(opt, c),
                     "grad_row_bytes": 4 * c}
            touched = rows * (2 * sizes["row_bytes"] + 2 * sizes["state_bytes"] + sizes["grad_row_bytes"])
            self.add("update_dense", sizes, t, f"update_dense ({opt}) of {rows} x {c} fp32",
                     about=f"stream_GBps.{self.stream_key(touched)}")

    def run_all(self) -> None:
        """Every embedding op, in dependency order (rates need the fixed costs and the stream rate)."""
        self.say(f"{self.side}: fixed costs of tiny ops")
        self.fixed_costs()
        self.say(f"{self.side}: streaming copies")
        self.stream()
        self.say(f"{self.side}: lookups of random and cached rows")
        self.gathers()
        self.say(f"{self.side}: sorts and segment reductions")
        self.sort()
        self.segment_reduces()
        self.say(f"{self.side}: optimizer updates")
        self.updates()
        self.release()
        self.say(f"{self.side}: replica scatter and dense updates")
        self.replica_checks()
