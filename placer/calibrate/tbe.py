"""``op_costs.torchrec``: FBGEMM's fused embedding kernels (TorchRec's TBE) timed on this device, for steps priced
as TorchRec's DistributedModelParallel runs them (program/tbe_costs.py; ``placer calibrate --trainer torchrec``).

Each number inverts the formula tbe_costs.TbeCosts prices with; T is a median time (seconds), sizes in bytes:

- fixed_us.tbe_forward = T of a forward of one lookup (a 1,024-row table); fixed_us.tbe_backward = T(forward and
  backward) - T(forward) of that lookup; dense_forward / dense_backward the same of a dense TBE (DMP's kernel of
  data-parallel tables);
- forward_GBps[dtype][rb] = L rb / (T_f - fixed_forward - out / stream) for L random lookups (bags of BAG) of rows
  of rb bytes from a table far larger than the caches (Sizes.table_bytes; nearly every lookup a distinct row), out
  the pooled output; forward_cached_GBps[dtype][rb] = (L - U_h) rb / (T_h - fixed - out / stream - U_h rb /
  forward) for the same L lookups drawn from HOT_ROWS rows (U_h distinct: every other lookup a repeat);
- backward_GBps[optimizer][dtype][rb] = (L g + 2 U m) / (T_fb - T_f - fixed_backward), g the pooled gradient row
  (fp32), U the expected distinct rows, m a row's weights and optimizer state (one rate for both parts);
- the same split by the hot lookups' backward B_h (U_h distinct rows) against the cold one's B_c (U): a distinct
  row costs (B_c - B_h) / (U - U_h) seconds (backward_row_GBps = 2 m over it), the lookups the rest of B_h
  (backward_lookup_GBps = L g over it): skewed and tiny tables repeat most rows, and one rate priced their
  repeats as distinct rows;
- dense_forward_GBps[rb] = L rb / (T - fixed - out / stream) of a dense TBE of HOT_ROWS fp32 rows;
  dense_backward_GBps[rb] = (L / BAG) g / its backward: its work goes with the pooled gradient rows (a table of
  one-lookup bags, FBGEMM's CPU kernel: ~20 ns a bag of 64 B rows at 1 and at 4 lookups a bag).

The backward is timed per optimizer of the workloads given (EXACT_ROWWISE_ADAGRAD, TorchRec's usual, without any);
one without a TBE on this device (Adam on a CPU) keeps its default, said in the notes. On a CPU the TBE runs its
host kernels (fbgemm-gpu-cpu), on CUDA its device kernels with the rows in HBM. Where fbgemm_gpu does not import,
``missing`` says why (the command exits 2 before measuring anything).
"""
from __future__ import annotations

import warnings

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
HOT_ROWS = 1024  # the hot rows' benchmark: every lookup drawn from this many rows (in the caches), most repeats


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


def _dense_tbe(rows: int, dim: int, device: torch.device):
    """DMP's dense compute kernel (a data-parallel table): FBGEMM's DenseTableBatchedEmbeddingBagsCodegen, fp32."""
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import DenseTableBatchedEmbeddingBagsCodegen

    cuda = device.type == "cuda"
    return DenseTableBatchedEmbeddingBagsCodegen([(rows, dim)], use_cpu=not cuda).to(device)


def _timed_dense(tbe, ids, offsets, device, reps: int) -> tuple[float, float]:
    """_timed of a dense TBE, without the warning its op's autograd fallback prints (its gradient is computed: the
    op's CPU autograd function runs, as under DMP)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*autograd kernel was not registered.*")
        return _timed(tbe, ids, offsets, device, reps)


def fit(cal: Calibration, device: torch.device, sizes: Sizes, opcosts, optimizers=("rowwise_adagrad",),
        widths: tuple[int, ...] | None = None) -> None:
    """Fill ``cal.device_costs``'s torchrec entries (module docstring): the fixed costs and the forward once, the
    backward per optimizer of ``optimizers`` that has a TBE here (on a CPU: not Adam, said in the notes), each
    from cold rows and from hot ones, and the dense TBE of data-parallel tables. ``opcosts``: the device's OpCosts
    measured so far (the pooled output's write is priced at its stream rate, as tbe_costs prices it)."""
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
    one = [dev_ids(FIXED_ROWS, 1) for _ in range(4)]
    one_offsets = torch.tensor([0, 1], device=device)
    t_f, t_fb = _timed(_tbe(FIXED_ROWS, 4, "fp32", device, first), one, one_offsets, device, sizes.reps)
    fixed = {"tbe_forward": t_f, "tbe_backward": max(t_fb - t_f, 0.0)}
    t_f, t_fb = _timed_dense(_dense_tbe(FIXED_ROWS, 4, device), one, one_offsets, device, sizes.reps)
    fixed.update(dense_forward=t_f, dense_backward=max(t_fb - t_f, 0.0))
    what = f"{first}, median of {sizes.reps}"
    for kind, how in (("tbe_forward", f"a TBE forward of one lookup ({what})"),
                      ("tbe_backward", f"its fused backward ({what})"),
                      ("dense_forward", f"a dense TBE's forward of one lookup (median of {sizes.reps})"),
                      ("dense_backward", f"its backward (median of {sizes.reps})")):
        costs.torchrec_fixed_us[kind] = Entry(fixed[kind] * 1e6, how)
    for dt in DTYPES:
        for c in widths or sizes.widths:
            _fit_width(cal, device, sizes, opcosts, timed, fixed, dt, c, dev_ids)


def _fit_width(cal: Calibration, device, sizes: Sizes, opcosts, timed: list[str], fixed: dict[str, float],
               dt: str, c: int, dev_ids) -> None:
    """The rates of one storage dtype and width: lookups of cold rows (a table far larger than the caches, nearly
    every lookup a distinct row) and of hot ones (HOT_ROWS rows, each looked up many times), per optimizer; the
    dense TBE's at fp32 once (module docstring)."""
    costs = cal.device_costs
    rb = c * ESIZE[dt]
    rows = max(FIXED_ROWS, int(sizes.table_bytes // (rb * 2)))
    L = max(BAG, min(sizes.max_ids, max(sizes.min_ids, int(sizes.gather_bytes // rb))) // BAG * BAG)
    cold_ids, hot_ids = [dev_ids(rows, L) for _ in range(3)], [dev_ids(HOT_ROWS, L) for _ in range(3)]
    offsets = torch.arange(0, L + 1, BAG, device=device)
    u, u_hot = expected_unique(rows, L), expected_unique(HOT_ROWS, L)
    out_s = opcosts.stream_s(L // BAG * c * 4)
    g = c * 4  # the pooled gradient row, fp32
    for o in timed:
        tbe = _tbe(rows, c, dt, device, o)
        t_f, t_fb = _timed(tbe, cold_ids, offsets, device, sizes.reps)
        h_f, h_fb = _timed(tbe, hot_ids, offsets, device, sizes.reps)
        del tbe
        how = f"{L} lookups of {rb} B rows from {rows} rows ({dt} x{c}, {o}): forward {t_f * 1e3:.4g} " \
              f"ms, with backward {t_fb * 1e3:.4g} ms"
        hot = f"; the same lookups of {HOT_ROWS} hot rows: forward {h_f * 1e3:.4g} ms, with backward " \
              f"{h_fb * 1e3:.4g} ms"
        if o == timed[0]:
            excess_f = max(t_f - fixed["tbe_forward"] - out_s, MIN_EXCESS * t_f)
            cold_rate = L * rb / excess_f
            costs.torchrec_forward_GBps.setdefault(dt, {})[rb] = Entry(cold_rate / 1e9, how)
            excess_h = max(h_f - fixed["tbe_forward"] - out_s - u_hot * rb / cold_rate, MIN_EXCESS * h_f)
            costs.torchrec_forward_cached_GBps.setdefault(dt, {})[rb] = Entry((L - u_hot) * rb / excess_h / 1e9,
                                                                              how + hot)
        m = rb + state_bytes_per_row(o, c)
        b_cold = max(t_fb - t_f - fixed["tbe_backward"], MIN_EXCESS * max(t_fb - t_f, 1e-9))
        b_hot = max(h_fb - h_f - fixed["tbe_backward"], MIN_EXCESS * max(h_fb - h_f, 1e-9))
        costs.torchrec_backward_GBps.setdefault(o, {}).setdefault(dt, {})[rb] = Entry(
            (L * g + 2 * u * m) / b_cold / 1e9, how + f", {u:.0f} expected distinct rows")
        # b = L g / lookup_rate + 2 U m / row_rate at U = u (cold) and u_hot: the rows' part from the difference
        row_s = max(b_cold - b_hot, MIN_EXCESS * b_cold) / max(u - u_hot, 1.0)  # seconds per distinct row
        lookup_s = max(b_hot - u_hot * row_s, MIN_EXCESS * b_hot)
        said = how + hot + f" ({u:.0f} and {u_hot:.0f} expected distinct rows; the difference is the rows' part)"
        costs.torchrec_backward_row_GBps.setdefault(o, {}).setdefault(dt, {})[rb] = Entry(2 * m / row_s / 1e9, said)
        costs.torchrec_backward_lookup_GBps.setdefault(o, {}).setdefault(dt, {})[rb] = Entry(
            L * g / lookup_s / 1e9, said)
    if dt == "fp32":
        dense = _dense_tbe(HOT_ROWS, c, device)
        d_f, d_fb = _timed_dense(dense, hot_ids, offsets, device, sizes.reps)
        del dense
        how = f"{L} lookups of {rb} B rows of a {HOT_ROWS}-row dense TBE: forward {d_f * 1e3:.4g} ms, with " \
              f"backward {d_fb * 1e3:.4g} ms"
        costs.torchrec_dense_forward_GBps[rb] = Entry(
            L * rb / max(d_f - fixed["dense_forward"] - out_s, MIN_EXCESS * d_f) / 1e9, how)
        costs.torchrec_dense_backward_GBps[rb] = Entry(  # per pooled gradient row: L / BAG of them
            L // BAG * g / max(d_fb - d_f - fixed["dense_backward"], MIN_EXCESS * max(d_fb - d_f, 1e-9)) / 1e9,
            how + f" ({L // BAG} bags: the backward's work goes with its pooled gradient rows)")
