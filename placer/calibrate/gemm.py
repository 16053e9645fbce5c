"""GEMM rates for ``placer calibrate``: a grid of DLRM-like shapes and the exact GEMMs of given workloads.

A workload's dense step is traced as the runner issues it (placer/program/dense.py ``trace``: mm / addmm /
bmm / baddbmm with their (batch, m, k, n) and operand layout: "nt" for a Linear's forward, x @ W.t(); "nn"
for its input gradient; "tn" for its weight gradient, grad.t() @ x). Each distinct (op, shape, layout) is
timed with that ATen op on operands of the dense dtype in that layout (a 't' operand a transposed view of a
row-major tensor, as the backward's are), every repeat on a fresh operand set from the cold pool (cold.py:
in the step, a GEMM's weight and activations come from memory, not from the cache the last repeat warmed),
and the rate inverted from the price build.py gives it:

    time = fixed(gemm) + 2 batch m k n / rate(batch m, k, n, layout)   =>   rate = 2 batch m k n / (T - f(gemm))

written under ``op_costs.gemm_TFLOPs[dtype]["(batch m)xKxN"]`` for nn, ``"(batch m)xKxN:nt"`` (":tn", ":tt")
otherwise (the keys GemmTable looks a shape and layout up by). Where several timed GEMMs share a key (an
addmm and an mm of one shape), the rate is their FLOPs over their summed variable times, so the GEMMs of that
key together price at their measured total.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from placer.calibrate.cold import ColdPool
from placer.calibrate.record import Entry, OpCostEntries, Sample
from placer.calibrate.timing import Sizes, bench

#: DLRM MLP layers (in, out): MLPerf DLRM's bottom and top MLPs
DLRM_LAYERS = ((13, 512), (512, 256), (256, 128), (479, 1024), (1024, 1024), (1024, 512), (512, 256), (256, 1))
INTERACTION = (27, 128)  # dot interaction of MLPerf DLRM: 26 embeddings + the bottom MLP's output, width 128
GEMM_OPS = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default")


@dataclass(frozen=True)
class Gemm:
    """One GEMM to time: the ATen op, (batch, m, k, n), the dense dtype, where the shape came from, and the
    operand layout ("nn", "nt", "tn", "tt": whether a, then b, is a transposed view)."""

    op: str
    batch: int
    m: int
    k: int
    n: int
    dtype: str
    source: str
    layout: str = "nn"

    @property
    def key(self) -> str:
        dims = f"{self.batch * self.m}x{self.k}x{self.n}"
        return dims if self.layout == "nn" else f"{dims}:{self.layout}"

    @property
    def label(self) -> str:
        return f"{self.op.split('.')[1]} {self.batch}x{self.m}x{self.k}x{self.n} {self.layout}"

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.k * self.n


def grid(sizes: Sizes, dtypes: tuple[str, ...]) -> list[Gemm]:
    """DLRM-like shapes in the layouts the traced step multiplies them in: every layer's forward (addmm, x @
    W.t(): nt), input gradient (mm, grad @ W: nn) and weight gradient (mm, grad.t() @ x: tn) at each batch in
    ``gemm_batch_rows``, and the dot interaction's batched GEMMs (forward nt, backward tn and nn)."""
    out = []
    for dtype in dtypes:
        for M in sizes.gemm_batch_rows:
            for i, o in DLRM_LAYERS[:sizes.gemm_layers]:
                out += [Gemm("aten.addmm.default", 1, M, i, o, dtype, "grid", "nt"),
                        Gemm("aten.mm.default", 1, M, o, i, dtype, "grid", "nn"),
                        Gemm("aten.mm.default", 1, o, M, i, dtype, "grid", "tn")]
            f, d = INTERACTION
            out += [Gemm("aten.bmm.default", M, f, d, f, dtype, "grid", "nt"),
                    Gemm("aten.bmm.default", M, d, f, f, dtype, "grid", "tn"),
                    Gemm("aten.bmm.default", M, f, f, d, dtype, "grid", "nn")]
    return out


def workload_gemms(workload, samples: int, device_type: str) -> list[Gemm]:
    """The GEMMs of ``workload``'s dense step on ``samples`` samples, as the runner issues them."""
    from placer.program.dense import trace

    return [Gemm(op.name, *op.shape, workload.dense.dtype, workload.name, op.layout)
            for op in trace(workload, samples, device_type).ops if op.kind == "gemm"]


def _torch_dtype(dtype: str) -> torch.dtype:
    return {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def operands(g: Gemm) -> list[tuple[torch.dtype, tuple[int, ...], bool]]:
    """The GEMM's operands as the cold pool makes them (dtype, shape, transposed): a and b in ``g.layout``,
    then addmm's bias or baddbmm's base."""
    dt = _torch_dtype(g.dtype)
    ta, tb = g.layout[0] == "t", g.layout[1] == "t"
    if g.batch == 1 and g.op in ("aten.mm.default", "aten.addmm.default"):
        ab = [(dt, (g.m, g.k), ta), (dt, (g.k, g.n), tb)]
        return ab + ([(dt, (g.n,), False)] if g.op == "aten.addmm.default" else [])
    ab = [(dt, (g.batch, g.m, g.k), ta), (dt, (g.batch, g.k, g.n), tb)]
    return ab + ([(dt, (g.batch, g.m, g.n), False)] if g.op == "aten.baddbmm.default" else [])


def time_gemm(g: Gemm, device: torch.device, reps: int, pool: ColdPool, warm: bool = False) -> float:
    """Median seconds of the GEMM's ATen op on operands of its layout, a fresh set from the cold ``pool`` per
    call (``warm``: one set for every call, as a small model's step finds its operands in the caches; tf32
    allowed for dtype tf32)."""
    sets = pool.sets(operands(g), 1) * (reps + 1) if warm else pool.sets(operands(g), reps + 1)
    if g.op == "aten.addmm.default":
        fn = lambda i: torch.addmm(sets[i][2], sets[i][0], sets[i][1])
    elif g.op == "aten.baddbmm.default":
        fn = lambda i: torch.baddbmm(sets[i][2], sets[i][0], sets[i][1])
    elif g.op == "aten.bmm.default" or g.batch > 1:
        fn = lambda i: torch.bmm(sets[i][0], sets[i][1])
    else:
        fn = lambda i: torch.mm(sets[i][0], sets[i][1])
    allow = None
    if device.type == "cuda":
        allow = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = g.dtype == "tf32"
    try:
        return bench(fn, device, reps)
    finally:
        if allow is not None:
            torch.backends.cuda.matmul.allow_tf32 = allow


def measure(gemms: list[Gemm], device: torch.device, sizes: Sizes, entries: OpCostEntries, add, pool: ColdPool,
            side: str = "device", warm: bool = False) -> dict[Gemm, float]:
    """Time each distinct GEMM (op, shape, layout) once, cold, write ``entries.gemm_TFLOPs`` and a sample per
    GEMM; returns the times. ``add``: the calibration's sample recorder. ``warm``: the same operands every
    repeat, written to ``entries.gemm_warm_TFLOPs``."""
    field_name = "gemm_warm_TFLOPs" if warm else "gemm_TFLOPs"
    table = entries.gemm_warm_TFLOPs if warm else entries.gemm_TFLOPs
    f = entries.fixed_us["gemm"].value * 1e-6
    times: dict[Gemm, float] = {}
    distinct: dict[tuple, Gemm] = {}
    for g in gemms:
        distinct.setdefault((g.op, g.batch, g.m, g.k, g.n, g.dtype, g.layout), g)
    for g in distinct.values():
        times[g] = time_gemm(g, device, sizes.reps, pool, warm)
    by_key: dict[tuple[str, str], list[Gemm]] = {}
    for g in distinct.values():
        by_key.setdefault((g.dtype, g.key), []).append(g)
    for (dtype, key), gs in by_key.items():
        var = sum(times[g] - f for g in gs)
        exact = var > 0 and all(times[g] > f for g in gs)
        clamped = var <= 0
        var = var if not clamped else 0.01 * sum(times[g] for g in gs)
        flops = sum(g.flops for g in gs)
        parts = "; ".join(f"{g.label} ({g.source}) {times[g] * 1e3:.4g} ms" for g in gs)
        set_bytes = max(ColdPool.set_bytes(operands(g)) for g in gs)
        how = (f"{dtype} {parts}, inverted: 2 b m k n / (T - fixed gemm)"
               + (" summed over the GEMMs of this key" if len(gs) > 1 else "")
               + (" (faster than the fixed cost: rate clamped)" if clamped else "")
               + ("; the same operands every repeat (warm)" if warm else f"; {pool.note(set_bytes)}"))
        table.setdefault(dtype, {})[key] = Entry(flops / var / 1e12, how)
        for g in gs:
            z = {"dtype": dtype, "batch": g.batch, "m": g.m, "k": g.k, "n": g.n, "layout": g.layout}
            add(Sample("gemm", {**z, "warm": True} if warm else z, times[g],
                       f"{g.op} {g.batch}x{g.m}x{g.k}x{g.n} {g.layout} {dtype} ({g.source})"
                       + (", warm" if warm else ""),
                       side, defines=(f"{field_name}.{dtype}.{key}",), exact=exact and len(gs) == 1))
    return times

