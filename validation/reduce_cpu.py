"""The segment reduce's formulations timed on this CPU, uniform and zipf ids (run it alone):

    python3 validation/reduce_cpu.py [--runs 7] [--threads 1] [--out validation/results/reduce-cpu-<date>.json]

- runner (CPU):          kernels.segment_reduce on a CPU: repeat_interleave + one sequential index_add_ (unchanged)
- split runs (new GPU):  kernels.split_runs_sum, what CUDA runs now (runs cut into ~sqrt(n) pieces, two index_adds)
- torch.segment_reduce:  what CUDA ran before (on a GPU it walks each run serially; on a CPU its kernel differs)

Each cell: the median of ``--runs`` timed calls (after one warm-up) of 2^16 and 2^20 lookups, widths 16 and 128.
Prints a table and writes JSON (command, commit, machine, versions, date).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from placer.runner import kernels  # noqa: E402
from validation.common import environment, write_json  # noqa: E402
from validation.gpu_micro import BAG, zipf_ids  # noqa: E402


def _median_s(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    date = _dt.date.today().isoformat()
    out = args.out or ROOT / "validation" / "results" / f"reduce-cpu-{date}.json"
    rows = []
    print(f"{'ids':9} {'n':>8} {'c':>4} {'hottest':>8} {'runner ms':>10} {'split ms':>9} {'segred ms':>10} "
          f"{'split/runner':>12}")
    for n in (2**16, 2**20):
        for alpha in (None, 1.05, 1.2):
            ids = zipf_ids(n, alpha, seed=n)
            uniq, counts, sorted_bags = kernels.sort(ids, torch.arange(n) // BAG)
            for c in (16, 128):
                grad = torch.rand((n // BAG, c))
                t = {"runner": _median_s(lambda: kernels.segment_reduce(grad, sorted_bags, counts), args.runs),
                     "split_runs": _median_s(lambda: kernels.split_runs_sum(grad.index_select(0, sorted_bags),
                                                                            counts), args.runs),
                     "torch_segment_reduce": _median_s(lambda: torch.segment_reduce(
                         grad.index_select(0, sorted_bags), "sum", lengths=counts, axis=0), args.runs)}
                dist = "uniform" if alpha is None else f"zipf{alpha}"
                row = {"ids": dist, "lookups": n, "width": c, "distinct": uniq.numel(), "hottest": int(counts.max()),
                       **{f"{k}_s": v for k, v in t.items()}, "split_over_runner": t["split_runs"] / t["runner"],
                       "split_over_segment_reduce": t["split_runs"] / t["torch_segment_reduce"]}
                rows.append(row)
                print(f"{dist:9} {n:>8} {c:>4} {row['hottest']:>8} {t['runner'] * 1e3:>10.3f} "
                      f"{t['split_runs'] * 1e3:>9.3f} {t['torch_segment_reduce'] * 1e3:>10.3f} "
                      f"{row['split_over_runner']:>12.2f}")
    write_json(out, {"command": "python3 validation/reduce_cpu.py " + " ".join(argv or sys.argv[1:]), "date": date,
                     "threads": args.threads, "runs": args.runs, "torch": torch.__version__, **environment(),
                     "rows": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
