"""``graph_fixed_us`` and ``graph_kernel_us``: what each op kind costs where the step replays as a CUDA graph.

Tight loops (``fixed_us``) time an op's host dispatch and launch; replayed from a graph (runner/graph_step.py)
the host issues nothing and an op costs its kernels' device time. For each kind the smallest op the graph step
runs (one id, one 1 x 4 row; the graph-safe sort, segment sum and update of runner/static_step.py) is captured
CHAIN and 2 x CHAIN times back to back in two graphs, each replayed ``reps`` times between CUDA events:

    graph_fixed_us[kind] = (median(T_2N) - median(T_N)) / N

(the graph's launch and the first kernel's ramp cancel in the difference). ``graph_kernel_us`` is the same for
a one-element in-place add: one kernel. program/graph_price.py prices a graph step with them.

On a device that is not CUDA there is no graph: ``fit`` records nothing unless ``plain`` (tests) asks it to time
the same chains as plain calls, which checks the code path, not a graph's numbers.
"""
from __future__ import annotations

import statistics
import time

import torch

from placer.calibrate.record import Calibration, Entry, Measurement
from placer.runner import kernels, static_step
from placer.runner.optim import NAMES as OPTIMIZERS, state_shapes

CHAIN = 20  # ops per captured chain (the longer chain has twice as many)
ROWS, COLS = 1024, 4  # the smallest ops' table


def replay_s(fn, device: torch.device, reps: int) -> float:
    """Median seconds of one replay of ``fn``'s ops captured as one CUDA graph (warmed up on a side stream); on
    another device the median of plain calls."""
    if device.type != "cuda":
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()
        fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in events:
        a.record()
        graph.replay()
        b.record()
    torch.cuda.synchronize(device)
    return statistics.median(a.elapsed_time(b) / 1e3 for a, b in events)


def smallest_ops(device: torch.device) -> dict[str, object]:
    """Per fixed-cost kind, a call of the graph step's smallest op of that kind (one id, one 1 x COLS row)."""
    weight = torch.zeros((ROWS + 1, COLS), device=device)
    ids = torch.zeros((1,), dtype=torch.int64, device=device)
    offsets = torch.zeros((1,), dtype=torch.int64, device=device)
    grad = torch.ones((2, COLS), device=device)
    run, rows, sorted_bags = static_step.runs(ids, ids, ROWS)
    summed = static_step.segment_sums(grad, run, sorted_bags)
    x = torch.zeros((1,), device=device)
    a, b, out = torch.ones((1, 1), device=device), torch.ones((1, 1), device=device), torch.empty((1, 1), device=device)
    parts = [torch.ones((1, COLS), device=device)]
    packed = torch.empty((1, COLS), device=device)
    ops = {"elementwise": lambda: x.add_(1.0),
           "copy": lambda: kernels.pack_grad(parts, packed),
           "lookup": lambda: kernels.lookup(weight, ids, offsets),
           "sort": lambda: static_step.runs(ids, ids, ROWS),
           "segment_reduce": lambda: static_step.segment_sums(grad, run, sorted_bags),
           "gemm": lambda: torch.mm(a, b, out=out)}
    for name in OPTIMIZERS:
        opt = static_step.StaticRowOptimizer(name, 0.01, device)
        states = [torch.zeros(s, device=device) for s in state_shapes(name, ROWS + 1, COLS)]
        ops[f"update_{name}"] = (lambda o=opt, st=states: o.update(weight, st, rows, summed))
    return ops


def per_op_s(op, device: torch.device, reps: int) -> float:
    """Seconds one more op adds to a replayed chain: (T_2N - T_N) / N, at least 0."""
    def chain(n: int):
        return lambda: [op() for _ in range(n)]
    return max(0.0, (replay_s(chain(2 * CHAIN), device, reps) - replay_s(chain(CHAIN), device, reps)) / CHAIN)


def fit(cal: Calibration, device: torch.device, reps: int, plain: bool = False) -> None:
    """Set ``cal.device_costs.graph_fixed_us`` and ``cal.values["graph_kernel_us"]`` (module docstring); on a
    device that is not CUDA a note says why they are left to their defaults (``plain``: time plain calls)."""
    if device.type != "cuda" and not plain:
        cal.notes.append("graph_fixed_us and graph_kernel_us not measured: CUDA graphs are CUDA's "
                         "(graph_kernel_us keeps its default, program/opcosts.GRAPH_KERNEL_US)")
        return
    how = (f"replayed as a CUDA graph, chains of {CHAIN} and {2 * CHAIN} of the graph step's smallest op "
           f"(median of {reps} replays each), (T_2N - T_N) / N" if device.type == "cuda" else
           f"plain calls (no graph on {device.type}), chains of {CHAIN} and {2 * CHAIN}, (T_2N - T_N) / N")
    for kind, op in smallest_ops(device).items():
        cal.device_costs.graph_fixed_us[kind] = Entry(per_op_s(op, device, reps) * 1e6, how)
    kernel = cal.device_costs.graph_fixed_us["elementwise"]
    cal.values["graph_kernel_us"] = Measurement(kernel.value, "a one-element in-place add (one kernel), " + how)
