"""``op_costs.torchrec``: FBGEMM's fused embedding kernels (TorchRec's TBE) timed on this device, for steps priced
as TorchRec's DistributedModelParallel runs them (program/tbe_costs.py; ``placer calibrate --trainer torchrec``).

Each number inverts the formula tbe_costs.TbeCosts prices with; T is a median time (seconds), sizes in bytes:

- fixed_us.tbe_forward = T of a forward of one lookup (a 1,024-row table); fixed_us.tbe_backward = T(forward and
  backward) - T(forward) of that lookup;
- forward_GBps[dtype][rb] = L rb / (T_f - fixed_forward - out / stream) for L random lookups (bags of BAG) of rows
  of rb bytes from a table far larger than the caches (Sizes.table_bytes), out the pooled output;
- backward_GBps[optimizer][dtype][rb] = (L g + 2 U m) / (T_fb - T_f - fixed_backward), g the pooled gradient row
  (fp32), U the expected distinct rows, m a row's weights and optimizer state.

The backward is timed per optimizer of the workloads given (EXACT_ROWWISE_ADAGRAD, TorchRec's usual, without any);
one without a TBE on this device (Adam on a CPU) keeps its default, said in the notes. On a CPU the TBE runs its
host kernels (fbgemm-gpu-cpu), on CUDA its device kernels with the rows in HBM. Where fbgemm_gpu does not import,
``missing`` says why (the command exits 2 before measuring anything).
"""
from __future__ import annotations

import torch

from placer.calibrate.benches import BAG, expected_unique
from placer.calibrate.record import Calibration, Entry
from placer.calibrate.timing import Sizes, bench
from placer.runner.optim import state_bytes_per_row

DTYPES = ("fp32", "fp16")
ESIZE = {"fp32": 4, "fp16": 2}
OPTIMIZERS = {"sgd": "EXACT_SGD", "adagrad": "EXACT_ADAGRAD", "rowwise_adagrad": "EXACT_ROWWISE_ADAGRAD",
              "adam": "ADAM"}
CPU_OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")  # fbgemm-gpu-cpu's TBE has no Adam
FIXED_ROWS = 1024
MIN_EXCESS = 0.05  # a rate is inverted from at least this share of its op's time above the fixed costs


def missing() -> str | None:
    """Why FBGEMM's TBE cannot be timed here (None when it can)."""
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # noqa: F401
            SplitTableBatchedEmbeddingBagsCodegen)
    except Exception as exc:  # noqa: BLE001 - any import failure means no TBE here
        return (f"fbgemm_gpu does not import here ({type(exc).__name__}: {str(exc)[:200]}): install fbgemm-gpu "
                "(CUDA) or fbgemm-gpu-cpu to calibrate the torchrec trainer")
    return None


def _tbe(rows: int, dim: int, dtype: str, device: torch.device, optimizer: str):
    from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice, EmbeddingLocation,
                                                                       SplitTableBatchedEmbeddingBagsCodegen)

    cuda = device.type == "cuda"
    where = (EmbeddingLocation.DEVICE, ComputeDevice.CUDA) if cuda else (EmbeddingLocation.HOST, ComputeDevice.CPU)
    return SplitTableBatchedEmbeddingBagsCodegen(
        [(rows, dim, *where)], optimizer=getattr(EmbOptimType, OPTIMIZERS[optimizer]),
        weights_precision=SparseType.FP32 if dtype == "fp32" else SparseType.FP16, learning_rate=0.01,
        **({"device": device} if cuda else {}))


def _timed(tbe, ids: list[torch.Tensor], offsets: torch.Tensor, device: torch.device, reps: int
           ) -> tuple[float, float]:
    """(T forward, T forward + backward), medians, the ids rotating between repeats."""
    def fwd(i: int):
        return tbe(ids[i % len(ids)], offsets)

    def fwd_bwd(i: int):
        out = fwd(i)
        out.backward(torch.ones_like(out))

    return bench(lambda i: fwd(i), device, reps), bench(fwd_bwd, device, reps)


def fit(cal: Calibration, device: torch.device, sizes: Sizes, opcosts, optimizers=("rowwise_adagrad",),
        widths: tuple[int, ...] | None = None) -> None:
    """Fill ``cal.device_costs``'s torchrec entries (module docstring): the fixed costs and the forward once, the
    backward per optimizer of ``optimizers`` that has a TBE here (on a CPU: not Adam, said in the notes).
    ``opcosts``: the device's OpCosts measured so far (the pooled output's write is priced at its stream rate, as
    tbe_costs prices it)."""
    costs = cal.device_costs
    timed = [o for o in dict.fromkeys(optimizers) if device.type == "cuda" or o in CPU_OPTIMIZERS]
    for o in dict.fromkeys(optimizers):
        if o not in timed:
            cal.notes.append(f"torchrec: fbgemm-gpu-cpu's TBE has no {o}: its backward keeps the default "
                             "(program/tbe_costs.py)")
    timed = timed or ["rowwise_adagrad"]
    gen = torch.Generator(device="cpu").manual_seed(11)
    dev_ids = lambda high, n: torch.randint(0, high, (n,), generator=gen).to(device)
    first = timed[0]
    small = _tbe(FIXED_ROWS, 4, "fp32", device, first)
    one = [dev_ids(FIXED_ROWS, 1) for _ in range(4)]
    t_f, t_fb = _timed(small, one, torch.tensor([0, 1], device=device), device, sizes.reps)
    fixed_f, fixed_b = t_f, max(t_fb - t_f, 0.0)
    what = f"{first}, median of {sizes.reps}"
    costs.torchrec_fixed_us["tbe_forward"] = Entry(fixed_f * 1e6, f"a TBE forward of one lookup ({what})")
    costs.torchrec_fixed_us["tbe_backward"] = Entry(fixed_b * 1e6, f"its fused backward ({what})")
    for dt in DTYPES:
        for c in widths or sizes.widths:
            rb = c * ESIZE[dt]
            rows = max(FIXED_ROWS, int(sizes.table_bytes // (rb * 2)))
            L = max(BAG, min(sizes.max_ids, max(sizes.min_ids, int(sizes.gather_bytes // rb))) // BAG * BAG)
            ids = [dev_ids(rows, L) for _ in range(3)]
            offsets = torch.arange(0, L + 1, BAG, device=device)
            u = expected_unique(rows, L)
            for o in timed:
                tbe = _tbe(rows, c, dt, device, o)
                t_f, t_fb = _timed(tbe, ids, offsets, device, sizes.reps)
                how = f"{L} lookups of {rb} B rows from {rows} rows ({dt} x{c}, {o}): forward {t_f * 1e3:.4g} " \
                      f"ms, with backward {t_fb * 1e3:.4g} ms"
                if o == first:
                    excess_f = max(t_f - fixed_f - opcosts.stream_s(L // BAG * c * 4), MIN_EXCESS * t_f)
                    costs.torchrec_forward_GBps.setdefault(dt, {})[rb] = Entry(L * rb / excess_f / 1e9, how)
                m = rb + state_bytes_per_row(o, c)
                excess_b = max(t_fb - t_f - fixed_b, MIN_EXCESS * max(t_fb - t_f, 1e-9))
                costs.torchrec_backward_GBps.setdefault(o, {}).setdefault(dt, {})[rb] = Entry(
                    (L * c * 4 + 2 * u * m) / excess_b / 1e9, how + f", {u:.0f} expected distinct rows")
                del tbe
