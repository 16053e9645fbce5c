"""``fixed_us.embedding_op``: what one ATen op of a fused group's ops costs the host in a step beyond the
tight-loop fixed costs (GPU; program/issue.py prices it), fitted from SYNTHETIC chains of groups.

Each op kind's fixed cost is timed as 20 identical calls back to back (timing.bench_tiny): the host's dispatch
path stays hot. A step issues each group's ops once among many others; on an H100 (validation/
gpu_micro.py ``groups``) G groups' chains of lookup, pack_grad, sort, segment_reduce and update took 1.5-2.3x
their price (10-14 us per ATen op more), as the dense steps did (``dense_op``). Here G = CHAIN_GROUPS[i] groups
of LOOKUPS lookups each run as the runner runs a step (every lookup, every pack_grad, then each group's sort,
segment_reduce and update: runner/trainer.py), timed whole (CUDA events, median of ``reps``); with

    T_i = the chain's median seconds, P_i = its ops priced as build.py prices them without embedding_op
    (record.price of each op), n_i = G_i x issue.group_aten_ops(OPTIMIZER),

    embedding_op = max(0, sum_i n_i (T_i - P_i) / sum_i n_i^2)

On a CPU the chain is not timed and embedding_op is 0: the CPU campaign's per-op misses are not a per-op
overhead (docs/validation.md, measured / priced: lookup 1.02, sort 0.97), so CPU prices stay as they were.
"""
from __future__ import annotations

import torch

from placer.calibrate.benches import BAG, expected_unique
from placer.calibrate.record import Calibration, Entry, Sample, price
from placer.calibrate.timing import Sizes, bench
from placer.program.issue import group_aten_ops
from placer.runner import kernels
from placer.runner.optim import SparseRowOptimizer

CHAIN_GROUPS = (2, 8)  # groups per synthetic chain (the campaign's plans have 1-6 groups per GPU)
LOOKUPS = 4096  # lookups per group, in bags of BAG (the tiny workload's groups: 4,096-36,864)
COLS, ROWS = 16, 2**16  # fp32 columns and rows of each group's table
OPTIMIZER = "sgd"
LR = 0.01


def chain_parts(groups: int) -> list[dict]:
    """The chain's ops as record.price prices them: (kind, sizes) of every op, groups x 5."""
    u = expected_unique(ROWS, LOOKUPS)
    one = [("lookup", {"dtype": "fp32", "row_bytes": 4 * COLS, "lookups": LOOKUPS, "unique": u,
                       "out_bytes": LOOKUPS // BAG * 4 * COLS}),
           ("copy", {"bytes": LOOKUPS // BAG * 4 * COLS}), ("sort", {"ids": LOOKUPS}),
           ("segment_reduce", {"row_bytes": 4 * COLS, "lookups": LOOKUPS}),
           ("update", {"optimizer": OPTIMIZER, "row_bytes": 4 * COLS, "rows": u, "dtype": "fp32"})]
    return [{"kind": k, "sizes": z} for k, z in one] * groups


def time_chain(groups: int, device: torch.device, reps: int) -> float:
    """Median seconds of ``groups`` groups' ops run as a step runs them (timing.bench: CUDA events on a GPU)."""
    gen = torch.Generator(device="cpu").manual_seed(7)
    weights = [torch.zeros((ROWS, COLS), device=device) for _ in range(groups)]
    ids = [torch.randint(0, ROWS, (LOOKUPS,), generator=gen).to(device) for _ in range(groups)]
    offsets = torch.arange(0, LOOKUPS, BAG, device=device)
    bags = torch.arange(LOOKUPS, device=device) // BAG
    grads = [[torch.rand((LOOKUPS // BAG, COLS), generator=gen).to(device)] for _ in range(groups)]
    packed = [torch.empty((LOOKUPS // BAG, COLS), device=device) for _ in range(groups)]
    opt = SparseRowOptimizer(OPTIMIZER, LR)
    opt.new_step()

    def step(_i: int) -> None:
        for g in range(groups):
            kernels.lookup(weights[g], ids[g], offsets)
        for g in range(groups):
            kernels.pack_grad(grads[g], packed[g])
        for g in range(groups):
            uniq, counts, sorted_bags = kernels.sort(ids[g], bags)
            summed = kernels.segment_reduce(packed[g], sorted_bags, counts)
            opt.update(weights[g], [], uniq, summed)
    return bench(step, device, reps)


def fit(cal: Calibration, device: torch.device, sizes: Sizes, costs) -> None:
    """Set ``cal.device_costs.fixed_us["embedding_op"]`` (see the module docstring) and record a sample per
    chain. ``costs``: the OpCosts measured so far (opcosts.OpCosts; its embedding_op is not used)."""
    if device.type != "cuda":
        cal.device_costs.fixed_us["embedding_op"] = Entry(0.0, "not fitted on a CPU (calibrate/chain.py): a CPU's "
                                                               "groups are priced at their tight-loop fixed costs")
        return
    rows = []
    for groups in CHAIN_GROUPS:
        parts = chain_parts(groups)
        base = sum(price(Sample(p["kind"], p["sizes"], 0.0, ""), costs) for p in parts)
        rows.append((groups, parts, time_chain(groups, device, sizes.reps), base))
    n = lambda groups: groups * group_aten_ops(OPTIMIZER)
    num = sum(n(g) * (t - base) for g, _, t, base in rows)
    den = sum(n(g) ** 2 for g, _, _, _ in rows)
    x = max(0.0, num / den)
    cases = "; ".join(f"{g} groups {t * 1e3:.4g} ms measured vs {base * 1e3:.4g} ms priced, {n(g)} ATen ops"
                      for g, _, t, base in rows)
    how = (f"least squares over synthetic chains of groups ({LOOKUPS} lookups each, {COLS}-column fp32 rows, "
           f"{OPTIMIZER}; lookups, pack_grads, then sort, segment_reduce, update per group, as the runner's step; "
           f"median of {sizes.reps}) of (measured - priced without embedding_op) = ATen ops x embedding_op: "
           f"{cases}" + (" (the chains priced above their times: clamped to 0)" if num <= 0 else ""))
    cal.device_costs.fixed_us["embedding_op"] = Entry(x * 1e6, how)
    for g, parts, t, _ in rows:
        cal.add(Sample("group_chain", {"groups": g, "aten_ops": n(g), "parts": parts}, t,
                       f"{g} synthetic groups' ops as a step runs them", "device",
                       defines=("fixed_us.embedding_op",), exact=False))
