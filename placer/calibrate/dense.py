"""``fixed_us.dense_op``: what one op of the dense step costs beyond a bare op, from SYNTHETIC dense models.

placer/program/build.py prices each op of the traced dense step (program/dense.py) as its kind's cost plus
``fixed("dense_op")``. The kinds' costs come from bare ops (fixed_us.gemm / view / elementwise from tiny ops,
GEMM rates at the step's exact shapes, stream_GBps); the real step also pays autograd's bookkeeping, module
calls, the optimizer's Python loop. So the step of a dense model is run as placer/runner/trainer.py runs it
(DenseDLRM forward under the dense dtype's autocast, BCE-with-logits loss, zero_grad, backward, the dense
optimizer's step; fresh leaf embeddings each step, as the runner detaches them from the tables' outputs) and,
for each case i (a synthetic workload at a batch size), with

    T_i = the step's median time (seconds), P_i = its traced ops priced WITHOUT dense_op (record.dense_base_s:
          GEMMs by shape and operand layout, views at fixed(view), the rest at fixed(elementwise) + bytes at
          the stream, strided or indexed rate for that op's bytes and access),
    n_i = its traced ops (the count build.py multiplies dense_op by),

    dense_op = max(0, sum_i n_i (T_i - P_i) / sum_i n_i^2)     (least squares of T_i - P_i = n_i dense_op)

On a GPU the host issues the ops while the device runs earlier ones, and a dense step lasts the longer of the
host's issuing (fixed costs + dense_op per op) and the device's work (program/dense.py dense_step_s): P_i is then the
issue part alone (record.dense_parts), the synthetic steps being host-bound (an H100: as long at
16,384 samples as at 2,048; the host issued for 98% of each step, validation/results/gpu-2026-11-27-run2).

The cases are synthetic models built here (two shapes at two batch sizes; a third shape is a check), never the
shipped workloads/*.yaml, which the fidelity campaign validates on. Their GEMM shapes are timed with the other
GEMMs (machine.py adds ``gemm_shapes``), so a GEMM missing from the table does not leak into dense_op.

The GEMM and stream rates are measured twice, on cold operands (cold.py: a big model's step meets them so)
and on the same operands every repeat (warm); a step's traffic is priced warm by the share the warm copy
table gives at the step's memory (opcosts.OpCosts.warm: within its own step a small model's operands stay in
the caches). Ops over transposed views and indexing ops have their own measured rates (strided_GBps,
indexed_GBps).

Every timed step starts cold, as in training: between two dense steps the embedding work (lookups, the
exchange, sorts, updates of table rows and their state) sweeps the caches, so the step's weights, optimizer
state and the code and bookkeeping of its ops come from memory at its start. ``time_step`` touches a buffer of
``SWEEP_LLC_TIMES`` x the last-level cache (untimed) before each step. Measured on two cores with a
32 MiB L3: the dense step of validation/ranks_workloads/ranks-skewed8 on 256 samples takes 0.90 ms back to back
and 1.77 ms after such a sweep, and 2.1 ms in the two-rank runner's dense phase; dense_op fitted on back-to-back
steps (about 3 us) priced that phase at 0.58x its time in a two-rank campaign (docs/validation-journal.md).
"""
from __future__ import annotations

import contextlib

import torch

from placer.calibrate.cold import cache_bytes
from placer.calibrate.record import Calibration, Entry, Sample, dense_base_s, dense_parts
from placer.calibrate.timing import Sizes, bench
from placer.specs.workload import Workload

TABLE_ROWS = 1000  # rows of every synthetic table (the dense step never reads them)
#: the buffer touched before each timed step, in last-level caches (module docstring)
SWEEP_LLC_TIMES = 2


def _workload(name: str, dims: list[int], dense: dict, optimizer: str, samples: int) -> Workload:
    tables = [{"name": f"t{i}", "rows": TABLE_ROWS, "dim": d} for i, d in enumerate(dims)]
    return Workload.model_validate({
        "name": name, "description": "a synthetic dense model of placer calibrate (not a shipped workload)",
        "batch_size": samples, "optimizer": {"name": optimizer, "lr": 0.01}, "tables": tables,
        "dense": {"num_dense_features": 13, "dtype": "fp32", **dense}})


def dot_sgd(samples: int) -> Workload:
    """8 features of dims 8-32, bottom MLP 13-64-16, dot interaction (9 vectors), top MLP 52-64-1, SGD."""
    return _workload("calibrate-dot-sgd", [8, 8, 16, 16, 16, 32, 32, 32],
                     {"bottom_mlp": [64, 16], "interaction": {"kind": "dot"}, "top_mlp": [64, 1]}, "sgd", samples)


def dcnv2_adagrad(samples: int) -> Workload:
    """6 features of dims 16-64, bottom MLP 13-32-16, DCNv2 (2 low-rank cross layers of rank 32 over 192
    columns), top MLP 192-128-64-1, Adagrad."""
    return _workload("calibrate-dcnv2-adagrad", [16, 16, 16, 32, 32, 64],
                     {"bottom_mlp": [32, 16], "interaction": {"kind": "dcnv2", "layers": 2, "rank": 32},
                      "top_mlp": [128, 64, 1]}, "adagrad", samples)


def concat_adam(samples: int) -> Workload:
    """The check: 5 features of dims 8-64, bottom MLP 13-48-24, concat (152 columns), top MLP 152-96-1, Adam."""
    return _workload("calibrate-concat-adam", [8, 16, 16, 40, 64],
                     {"bottom_mlp": [48, 24], "interaction": {"kind": "concat"}, "top_mlp": [96, 1]}, "adam", samples)


def cases(sizes: Sizes) -> tuple[list[Workload], list[Workload]]:
    """(fitted, checks): the fitted cases are two shapes at the two ``dense_samples`` batch sizes; the check
    is a third shape at the smaller one. Each workload's batch is its samples per device."""
    small, large = sizes.dense_samples
    fitted = [make(b) for make in (dot_sgd, dcnv2_adagrad) for b in (small, large)]
    return fitted, [concat_adam(small)]


def gemm_shapes(sizes: Sizes, device_type: str) -> list:
    """The GEMMs of every synthetic case's step (gemm.Gemm), to be timed with the others."""
    from placer.calibrate.gemm import workload_gemms

    fitted, checks = cases(sizes)
    return [g for wl in fitted + checks for g in workload_gemms(wl, wl.batch_size, device_type)]


def step_sizes(workload: Workload, samples: int, device_type: str) -> dict:
    """What a dense step is priced from (record.price / dense_base_s): its traced GEMMs [batch, m, k, n,
    layout], counts of views and of other ops, the bytes each of those reads and writes ([bytes, ops of that
    size] pairs: the stream rate depends on an op's size), and the number of ops."""
    from collections import Counter

    from placer.program.dense import trace

    traced = trace(workload, samples, device_type)
    ops = traced.ops
    def by_size(access: str) -> list[list[float]]:
        sizes = Counter(op.bytes for op in ops if op.kind == "elementwise" and op.access == access)
        return sorted([b, n] for b, n in sizes.items())

    return {"dtype": workload.dense.dtype, "asynchronous": device_type == "cuda",
            "gemms": [[*op.shape, op.layout] for op in ops if op.kind == "gemm"],
            "views": sum(op.kind == "view" for op in ops), "elementwise": sum(op.kind == "elementwise" for op in ops),
            "elementwise_bytes": by_size("stream"), "strided_bytes": by_size("strided"),
            "indexed_bytes": by_size("indexed"), "ops": len(ops),
            "memory_bytes": traced.memory_bytes(workload.resolved_dense_optimizer.name)}


@contextlib.contextmanager
def _dense_precision(device: torch.device, dtype: str):
    """The runner's precision context for the dense part (trainer.dense_autocast), the global TF32 flags it
    sets restored afterwards."""
    from placer.runner.trainer import dense_autocast

    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        ctx, _ = dense_autocast(device, dtype)
        yield ctx
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


class DenseStep:
    """The dense step of ``workload`` on ``samples`` samples as placer/runner/trainer.py runs it (DenseDLRM forward
    under ``autocast``, BCE-with-logits loss; zero_grad and backward; the dense optimizer's step), on random
    inputs, in its three parts; validation/gpu_profile.py times the parts apart."""

    def __init__(self, workload: Workload, samples: int, device: torch.device, autocast):
        from placer.program.dense_model import DenseDLRM, make_dense_optimizer

        dims = {t.name: t.dim for t in workload.tables}
        self.model = DenseDLRM(workload).to(device)
        opt = workload.resolved_dense_optimizer
        self.opt = make_dense_optimizer(self.model, opt.name, opt.lr, foreach=device.type == "cuda")
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.dense = torch.randn(samples, workload.dense.num_dense_features, device=device)
        self.labels = torch.rand(samples, device=device).round()
        self.pooled = [torch.randn(samples, dims[f.table], device=device) for f in workload.resolved_features]
        self.autocast = autocast
        self.loss = None

    def leaves(self) -> list[torch.Tensor]:
        """Fresh leaf embeddings (the runner's are detached from each step's table outputs)."""
        return [p.detach().requires_grad_(True) for p in self.pooled]

    def forward(self, leaves: list[torch.Tensor] | None = None) -> None:
        with self.autocast:
            logits = self.model(self.dense, self.leaves() if leaves is None else leaves)
        self.loss = self.loss_fn(logits.float(), self.labels)

    def backward(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        self.loss.backward()

    def optimizer(self) -> None:
        self.opt.step()

    def whole(self, leaves: list[torch.Tensor] | None = None) -> None:
        self.forward(leaves)
        self.backward()
        self.optimizer()


def time_step(workload: Workload, samples: int, device: torch.device, reps: int) -> float:
    """Median seconds of the dense step of ``workload`` on ``samples`` samples, run as the runner runs it."""
    warmup = 3
    with _dense_precision(device, workload.dense.dtype) as autocast:
        step = DenseStep(workload, samples, device, autocast)
        leaves = [step.leaves() for _ in range(reps + warmup)]  # fresh per step, made before the clock
        sweep = cache_sweep(device)
        return bench(lambda i: step.whole(leaves[i]), device, reps, warmup=warmup, before=sweep)


def cache_sweep(device: torch.device):
    """A function that evicts the caches the way a training step's embedding work does between two dense steps:
    it reads and writes a buffer of SWEEP_LLC_TIMES x the last-level cache (cold.cache_bytes: the GPU's L2 on
    CUDA)."""
    llc, _ = cache_bytes(device)
    buf = torch.ones(SWEEP_LLC_TIMES * llc // 4, device=device)
    return lambda: buf.mul_(1.0)


def _case(wl: Workload, base: float, t: float, n: int) -> str:
    return f"{wl.name} on {wl.batch_size} samples: {t * 1e3:.4g} ms measured vs {base * 1e3:.4g} ms priced, {n} ops"


def fit(cal: Calibration, device: torch.device, sizes: Sizes, costs) -> None:
    """Time the synthetic cases' steps, set ``cal.device_costs.fixed_us["dense_op"]`` by least squares (see the
    module docstring) and record a sample per case. ``costs``: the OpCosts measured so far (opcosts.OpCosts;
    its dense_op is not used)."""
    fitted, checks = cases(sizes)
    rows = []
    for wl in fitted + checks:
        z = step_sizes(wl, wl.batch_size, device.type)
        # on a GPU the step is the host's issuing of its ops (dense_parts' issue) when that is the longer part,
        # as in every synthetic step measured: dense_op is what each op adds to the host's time
        base = dense_parts(z, costs)[0] if z["asynchronous"] else dense_base_s(z, costs)
        rows.append((wl, z, time_step(wl, wl.batch_size, device, sizes.dense_reps), base))
    fit_rows = rows[:len(fitted)]
    num = sum(z["ops"] * (t - base) for _, z, t, base in fit_rows)
    den = sum(z["ops"] ** 2 for _, z, _, _ in fit_rows)
    clamped = num <= 0
    x = 0.0 if clamped else num / den
    parts = "; ".join(_case(wl, base, t, z["ops"]) for wl, z, t, base in fit_rows)
    priced = ("the host's issue time without dense_op (fixed costs; a GPU works while its host issues)"
              if device.type == "cuda" else "priced without dense_op")
    how = (f"least squares over {len(fit_rows)} synthetic dense steps (forward, BCE loss, backward, dense optimizer "
           f"step, as the runner runs them; median of {sizes.dense_reps}) of (measured - {priced}) "
           f"= ops x dense_op, priced as build.py prices the traced ops: {parts}"
           + (" (the steps priced above their times: clamped to 0)" if clamped else ""))
    cal.device_costs.fixed_us["dense_op"] = Entry(x * 1e6, how)
    for i, (wl, z, t, base) in enumerate(rows):
        defining = i < len(fitted)
        what = f"the dense step of {wl.name} (synthetic) on {wl.batch_size} samples ({z['ops']} ops)"
        cal.add(Sample("dense_step", z, t, what, "device", defines=("fixed_us.dense_op",) if defining else (),
                       about="" if defining else "fixed_us.dense_op", exact=False))


def check(workload: Workload, samples: int, device: torch.device, sizes: Sizes, add) -> None:
    """A check of the dense ops' pricing on a given workload (``--workload``): its dense step on ``samples``
    samples, timed whole, next to the price of its traced ops as build.py sums them (dense_op included)."""
    z = step_sizes(workload, samples, device.type)
    t = time_step(workload, samples, device, sizes.dense_reps)
    add(Sample("dense_step", z, t, f"the dense step of {workload.name} on {samples} samples ({z['ops']} ops)",
               about="fixed_us.dense_op"))
