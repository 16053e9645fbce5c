"""Speed checks that used to be wall-clock asserts in unit tests (they flaked on a loaded machine): each is
timed here alone, repeated, and its median printed beside the budget it is meant to meet.

    python3 validation/perf_checks.py [--runs 5] [--out validation/results/perf-checks-<date>.json]

Checks (budget in seconds, the median must be below it):
- zipf coverage of 1,000 fractions on a 40M-row table (0.05 s)
- loading and `placer check` of a 20,000-table workload (20 s: linear in the tables)
- building the Topology of dgx-h100-16node, 128 GPUs (1.0 s)
- the aggregate locality of production-856 (20 s)
- the quick CPU calibration: its sort samples priced within a factor 3 of their times by the fitted rate, and
  fixed_us.dense_op fitted above 0 in every run (quality checks on timings, so they live here: the unit test
  failed when noise clamped the fit to 0), and its wall time (30 s)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validation.common import environment, write_json  # noqa: E402


def _zipf_coverage() -> float:
    import numpy as np

    from placer.specs.access import ZipfAccess

    fractions = np.geomspace(1e-8, 1.0, 1000)
    ZipfAccess(40_000_000, 1.1).coverage(fractions)  # warm-up: imports, caches
    start = time.perf_counter()
    ZipfAccess(40_000_000, 1.1).coverage(fractions)
    return time.perf_counter() - start


def _wide_workload() -> float:
    from placer.cli import main
    from placer.specs.workload import load_workload

    n = 20000
    doc = {"name": "wide", "batch_size": 4096, "optimizer": {"name": "rowwise_adagrad"},
           "tables": [{"name": f"t{i}", "rows": 1000 + i, "dim": 64, "pooling_factor": 2.0,
                       "access": {"kind": "zipf", "alpha": 1.05}} for i in range(n)],
           "features": [{"name": f"f{i}", "table": f"t{i}"} for i in range(n)],
           "dense": {"bottom_mlp": [64], "top_mlp": [64, 1]}}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wide.json"
        path.write_text(json.dumps(doc))
        start = time.perf_counter()
        load_workload(path).total_bytes()
        code = main(["check", str(path)])
        took = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"placer check exited {code}")
    return took


def _topology_16node() -> float:
    from placer.specs import load_hardware
    from placer.topology import Topology

    spec = load_hardware(ROOT / "hardware_specs" / "dgx-h100-16node.yaml")
    start = time.perf_counter()
    Topology(spec)
    return time.perf_counter() - start


def _locality_856() -> float:
    from placer.specs.locality import workload_locality
    from placer.specs.workload import load_workload

    wl = load_workload(ROOT / "workloads" / "production-856.yaml")
    start = time.perf_counter()
    workload_locality(wl).as_dict()
    return time.perf_counter() - start


def _calibrate_quick() -> tuple[float, float, float]:
    """(wall s, worst factor between a sort sample's time and its price under the fitted rate, fixed_us.dense_op
    as fitted, us: a least-squares fit on timed dense steps, clamped at 0 when noise prices them above their
    times)."""
    from placer.calibrate import calibrate, price, to_yaml
    from placer.specs import load_hardware
    from placer.topology import Topology

    import torch

    from placer.specs import load_workload

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.perf_counter()
        cal = calibrate(torch.device("cpu"), quick=True, workloads=[load_workload(ROOT / "workloads" / "tiny.yaml")])
        took = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cal.yaml"
        path.write_text(to_yaml(cal, name="quick-cpu"))
        costs = Topology(load_hardware(path)).op_costs("node0/gpu0")
    sorts = [s for s in cal.samples if s.kind == "sort" and s.defines]
    worst = max(max(s.seconds / price(s, costs), price(s, costs) / s.seconds) for s in sorts)
    return took, worst, cal.device_costs.fixed_us["dense_op"].value


CHECKS = {  # name: (function, budget in seconds)
    "zipf coverage, 40M rows, 1,000 fractions": (_zipf_coverage, 0.05),
    "load + check, 20,000 tables": (_wide_workload, 20.0),
    "Topology(dgx-h100-16node)": (_topology_16node, 1.0),
    "locality of production-856": (_locality_856, 20.0),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "validation" / "results" / f"perf-checks-{time.strftime('%Y-%m-%d')}.json")
    args = parser.parse_args(argv)
    rows = []
    for name, (fn, budget) in CHECKS.items():
        times = [fn() for _ in range(args.runs)]
        rows.append({"check": name, "budget": budget, "median": statistics.median(times), "runs": times,
                     "unit": "s"})
    cal = [_calibrate_quick() for _ in range(max(1, args.runs // 2))]
    rows.append({"check": "calibrate --quick wall", "budget": 30.0, "median": statistics.median(c[0] for c in cal),
                 "runs": [c[0] for c in cal], "unit": "s"})
    rows.append({"check": "calibrate --quick: worst sort time / price", "budget": 3.0,
                 "median": statistics.median(c[1] for c in cal), "runs": [c[1] for c in cal], "unit": "x"})
    rows.append({"check": "calibrate --quick: fixed_us.dense_op (> 0 in every run)", "budget": 0.0,
                 "median": statistics.median(c[2] for c in cal), "runs": [c[2] for c in cal], "unit": "us",
                 "ok": all(c[2] > 0 for c in cal)})
    print(f"{'check':46} {'median':>10} {'budget':>8}  ok")
    for r in rows:
        r.setdefault("ok", r["median"] < r["budget"])
        verdict = "yes" if r["ok"] else "NO"
        print(f"{r['check']:46} {r['median']:>9.4g}{r['unit']} {r['budget']:>7g}{r['unit']}  {verdict}")
    write_json(args.out, {"command": " ".join(["python3", "validation/perf_checks.py", *(argv or sys.argv[1:])]),
                          "date": time.strftime("%Y-%m-%d"), "environment": environment(), "rows": rows})
    print(f"wrote {args.out}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
