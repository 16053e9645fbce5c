"""One group's backward on this CPU, eager vs graph-safe (issue 48: the CPU path no slower than today's). Run alone:

    python3 validation/graph_step_cpu.py [--rounds 15] [--threads 1] [--out FILE]

(default FILE: validation/results/graph-step-cpu-<date>.json)

- eager:       kernels.sort (unique_consecutive), kernels.segment_reduce, SparseRowOptimizer.update on the distinct rows
- graph-safe:  static_step.backward: sort, run heads and a cumulative sum, sums and the update over all L slots

A table of 2^20 rows x 64 fp32 with adagrad state; 2^16 lookups in 4,096 bags per step, uniform ids and zipf 1.2
ids. The two run in interleaved rounds (eager, graph-safe, eager, ...: each round times one call of each, on fresh
copies of the same tables), after one warm-up call each; the table gives each one's median over the rounds with a
distribution-free 95% interval of the median (order statistics), and graph-safe / eager. Writes JSON (command,
commit, machine, versions, date).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from placer.runner import kernels, static_step  # noqa: E402
from placer.runner.optim import SparseRowOptimizer  # noqa: E402
from validation.common import environment, write_json  # noqa: E402

ROWS, COLS, LOOKUPS, BAGS = 2**20, 64, 2**16, 4096
OPTIMIZER = "adagrad"


def median_interval(xs: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the median and a 95% interval for it from the order statistics (binomial)."""
    s = sorted(xs)
    n = len(s)
    k = max(0, int(math.floor(n / 2 - 1.96 * math.sqrt(n) / 2)))
    return statistics.median(s), s[k], s[min(n - 1, n - 1 - k)]


def _ids(kind: str, gen: torch.Generator) -> torch.Tensor:
    if kind == "uniform":
        return torch.randint(0, ROWS, (LOOKUPS,), generator=gen)
    p = torch.arange(1, ROWS + 1, dtype=torch.float64).pow_(-1.2)
    return torch.multinomial(p, LOOKUPS, replacement=True, generator=gen)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    date = _dt.date.today().isoformat()
    out = args.out or ROOT / "validation" / "results" / f"graph-step-cpu-{date}.json"
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn((ROWS + 1, COLS), generator=gen)
    state = torch.rand((ROWS + 1, COLS), generator=gen)
    rows = []
    print(f"{'ids':8} {'distinct':>8} {'eager ms (95% CI)':>24} {'graph-safe ms (95% CI)':>26} {'ratio':>6}")
    for kind in ("uniform", "zipf1.2"):
        ids = _ids("uniform" if kind == "uniform" else "zipf", gen)
        bags = torch.randint(0, BAGS, (LOOKUPS,), generator=gen)
        grad = torch.randn((BAGS, COLS), generator=gen)
        eager_opt = SparseRowOptimizer(OPTIMIZER, 0.01)
        static_opt = static_step.StaticRowOptimizer(OPTIMIZER, 0.01)

        def eager(w, s):
            uniq, counts, sorted_bags = kernels.sort(ids, bags)
            eager_opt.update(w, [s], uniq, kernels.segment_reduce(grad, sorted_bags, counts))

        def graph_safe(w, s):
            static_step.backward(w, [s], static_opt, ids, bags, grad)

        times: dict[str, list[float]] = {"eager": [], "graph_safe": []}
        for r in range(args.rounds + 1):  # round 0: warm-up
            for name, fn in (("eager", eager), ("graph_safe", graph_safe)):
                w, s = weight.clone(), state.clone()
                t0 = time.perf_counter()
                fn(w, s)
                if r:
                    times[name].append(time.perf_counter() - t0)
        e, g = median_interval(times["eager"]), median_interval(times["graph_safe"])
        distinct = int(torch.unique(ids).numel())
        rows.append({"ids": kind, "lookups": LOOKUPS, "distinct": distinct, "eager_s": e, "graph_safe_s": g,
                     "ratio": g[0] / e[0], "samples_s": times})
        print(f"{kind:8} {distinct:>8} {e[0] * 1e3:>8.2f} ({e[1] * 1e3:.2f}-{e[2] * 1e3:.2f}) "
              f"{g[0] * 1e3:>12.2f} ({g[1] * 1e3:.2f}-{g[2] * 1e3:.2f}) {g[0] / e[0]:>6.2f}")
    write_json(out, {"command": "python3 validation/graph_step_cpu.py " + " ".join(argv or sys.argv[1:]),
                     "date": date, "threads": args.threads, "rounds": args.rounds, "table": [ROWS, COLS],
                     "optimizer": OPTIMIZER, "torch": torch.__version__, **environment(), "rows": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
