"""Micro-benchmarks of the ops a first GPU campaign is most likely to miss, each timed on the runner's own code
(placer/runner/kernels.py, optim.py, hostmem.py) and priced by the cost model under two specs: the datasheet
spec the plans were made for and the spec ``placer calibrate`` just wrote (``price``: the same formulas the
planner uses, placer/calibrate/record.py).

    python3 validation/gpu_micro.py --device cuda --datasheet hardware_specs/h100-sxm-host.yaml \\
        --calibrated OUT/calibrated.yaml --out OUT/micro.json
    python3 validation/gpu_micro.py --device cpu --tiny ...   # the same code at tiny sizes (the dry run)

Cases (``SIZES``; the tiny sizes divide the id counts):
- reduce: the segment reduce of 2^20 and 2^23 lookups, widths 16 and 128, ids uniform and zipf 1.05 / 1.2,
  three formulations: the runner's (kernels.segment_reduce: split runs on CUDA, index_add on a CPU),
  torch.segment_reduce (what CUDA ran before: serial in each run), one index_add_ (atomics pile on hot rows);
  and the runner's against one index_add_ (its run index included) on 4 and 4096 lookups: their fixed costs;
- sort: kernels.sort of 1M and 16M ids, uniform and zipf 1.2;
- update: SparseRowOptimizer.update per optimizer of 2^18 distinct rows of 64 fp32 columns, rows in HBM and
  rows in pinned host memory read and written by the GPU through UVA (HostMemory);
- host gather: lookups of rows in pinned host memory (zero copy, UVA) by row bytes 16..1024;
- lookup dtype: embedding_bag of fp16 vs fp32 rows in HBM at widths 4..32;
- groups: a whole group's ops (lookup, pack_grad, sort, segment_reduce, update) for 1, 8 and 32 small groups
  back to back: the fixed costs as a step pays them.

Every case that takes more than ``SLOW_S`` on its first call is timed once (the old reduce on zipf ids can take
seconds). Writes JSON (rows: op, case, measured_s, priced_s per spec, ratios) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from placer.calibrate.benches import expected_unique  # noqa: E402
from placer.calibrate.ids import skewed_ids  # noqa: E402
from placer.calibrate.record import Sample, price  # noqa: E402
from placer.calibrate.timing import bench, sync  # noqa: E402
from placer.runner import kernels  # noqa: E402
from placer.runner.hostmem import HostMemory  # noqa: E402
from placer.runner.optim import NAMES as OPTIMIZERS, SparseRowOptimizer, state_bytes_per_row, state_shapes  # noqa

SLOW_S = 0.5  # a first call slower than this is not repeated
ID_SPACE = 10_000_000  # rows of the table the reduce's and sort's ids index
BAG = 4  # lookups per bag
SMALL_REDUCES = (BAG, 4096)  # lookups of the reduce_fixed cases


@dataclass(frozen=True)
class Sizes:
    """What one run times: lookup counts, rows, repeats (full: an H100 in about a minute; tiny: a CPU, seconds)."""

    reduce_lookups: tuple[int, ...]
    sort_ids: tuple[int, ...]
    update_rows: int
    update_table_rows: int
    gather_lookups: int
    gather_table_rows: int
    group_counts: tuple[int, ...]
    reps: int


SIZES = {"full": Sizes(reduce_lookups=(2**20, 2**23), sort_ids=(2**20, 2**24), update_rows=2**18,
                       update_table_rows=2**21, gather_lookups=2**20, gather_table_rows=2**20,
                       group_counts=(1, 8, 32), reps=5),
         "tiny": Sizes(reduce_lookups=(2**12, 2**14), sort_ids=(2**12, 2**14), update_rows=2**10,
                       update_table_rows=2**14, gather_lookups=2**12, gather_table_rows=2**14,
                       group_counts=(1, 8, 32), reps=3)}


def zipf_ids(n: int, alpha: float | None, seed: int, space: int = ID_SPACE) -> torch.Tensor:
    """``n`` ids in [0, space): uniform (alpha None) or zipf(alpha), hottest ids scattered (calibrate/ids.py)."""
    return skewed_ids(n, alpha, seed, space)


def timed(fn, device: torch.device, reps: int) -> tuple[float, int]:
    """(median seconds of ``fn()``, calls timed): once when the first call is slower than SLOW_S."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - t0
    if first > SLOW_S:
        return first, 1
    return bench(lambda _i: fn(), device, reps, warmup=0), reps


class Micro:
    """Runs the cases on ``device`` and prices each under ``costs`` ({spec label: OpCosts})."""

    def __init__(self, device: torch.device, sizes: Sizes, costs: dict, say=None):
        self.device, self.s, self.costs = device, sizes, costs
        self.rows: list[dict] = []
        self.say = say or (lambda _m: None)

    def add(self, op: str, case: str, seconds: float, calls: int, samples: list[Sample], **extra) -> None:
        """One row: measured seconds beside the sum of ``samples`` priced under every spec."""
        row = {"op": op, "case": case, "measured_s": seconds, "calls": calls, **extra}
        for label, costs in self.costs.items():
            try:
                priced = sum(price(s, costs) for s in samples) if samples else None
            except (KeyError, ValueError) as exc:  # the spec lacks an entry this op needs
                priced, row[f"{label}_error"] = None, f"{type(exc).__name__}: {exc}"
            row[f"{label}_s"] = priced
            row[f"{label}_ratio"] = seconds / priced if priced else None
        self.rows.append(row)

    # ---- cases ----------------------------------------------------------------------------------------------

    def reduces(self) -> None:
        dev = self.device
        for n in self.s.reduce_lookups:
            for alpha in (None, 1.05, 1.2):
                ids = zipf_ids(n, alpha, seed=n).to(dev)
                uniq, counts, sorted_bags = kernels.sort(ids, torch.arange(n, device=dev) // BAG)
                top = int(counts.max())
                dist = "uniform" if alpha is None else f"zipf{alpha}"
                for c in (16, 128):
                    grad = torch.rand((n // BAG, c), device=dev)
                    seg = torch.repeat_interleave(torch.arange(counts.numel(), device=dev), counts, output_size=n)
                    forms = {"runner": lambda: kernels.segment_reduce(grad, sorted_bags, counts),
                             "torch.segment_reduce": lambda: torch.segment_reduce(
                                 grad.index_select(0, sorted_bags), "sum", lengths=counts, axis=0, unsafe=True),
                             "index_add": lambda: torch.zeros((counts.numel(), c), device=dev).index_add_(
                                 0, seg, grad.index_select(0, sorted_bags))}
                    for form, fn in forms.items():
                        t, calls = timed(fn, dev, self.s.reps)
                        self.add("reduce", f"{form} {dist} n={n} c={c}", t, calls,
                                 [Sample("segment_reduce", {"row_bytes": 4 * c, "lookups": n}, t, "")],
                                 distinct=uniq.numel(), hottest=top)
                    self.say(f"reduce n={n} {dist} c={c}: hottest row {top} lookups")
                    del grad, seg
        self.reduce_fixed_costs()

    def reduce_fixed_costs(self) -> None:
        """The runner's reduce (about 20 small kernels on CUDA: split runs) against one index_add_ with its run
        index (about 6) on a few lookups, where the fixed cost is all there is: a group pays it every step."""
        dev = self.device
        for n in SMALL_REDUCES:
            ids = zipf_ids(n, None, seed=n).to(dev)
            uniq, counts, sorted_bags = kernels.sort(ids, torch.arange(n, device=dev) // BAG)
            grad = torch.rand((max(1, n // BAG), 16), device=dev)

            def one_index_add():
                seg = torch.repeat_interleave(torch.arange(counts.numel(), device=dev), counts, output_size=n)
                out = torch.zeros((counts.numel(), 16), device=dev)
                return out.index_add_(0, seg, grad.index_select(0, sorted_bags))

            for form, fn in {"runner": lambda: kernels.segment_reduce(grad, sorted_bags, counts),
                             "index_add": one_index_add}.items():
                t, calls = timed(fn, dev, self.s.reps)
                self.add("reduce_fixed", f"{form} uniform n={n} c=16", t, calls,
                         [Sample("segment_reduce", {"row_bytes": 64, "lookups": n}, t, "")], distinct=uniq.numel())

    def sorts(self) -> None:
        dev = self.device
        for n in self.s.sort_ids:
            for alpha in (None, 1.2):
                ids = zipf_ids(n, alpha, seed=n).to(dev)
                bags = torch.arange(n, device=dev) // BAG
                t, calls = timed(lambda: kernels.sort(ids, bags), dev, self.s.reps)
                dist = "uniform" if alpha is None else f"zipf{alpha}"
                self.add("sort", f"kernels.sort {dist} ids={n}", t, calls, [Sample("sort", {"ids": n}, t, "")])

    def updates(self) -> None:
        dev, c = self.device, 64
        host = HostMemory(dev, "auto")
        try:
            for where in ("hbm", "host"):
                if where == "host" and host.mechanism == "cpu_gather_copy":
                    self.rows.append({"op": "update", "case": "host rows: no UVA here", "measured_s": None})
                    continue
                for opt in OPTIMIZERS:
                    n = self.s.update_table_rows
                    if where == "hbm":
                        weight = torch.zeros((n, c), device=dev)
                        states = [torch.zeros(s, device=dev) for s in state_shapes(opt, n, c)]
                    else:
                        hw = host.zeros((n, c), torch.float32, gpu_readable=True)
                        hs = [host.zeros(s, torch.float32, gpu_readable=True) for s in state_shapes(opt, n, c)]
                        weight, states = hw.dev, [s.dev for s in hs]
                    ids = torch.unique(zipf_ids(self.s.update_rows, None, seed=7, space=n)).to(dev)
                    grad = torch.rand((ids.numel(), c), device=dev).mul_(1e-3)
                    o = SparseRowOptimizer(opt, 0.01)
                    o.new_step()
                    t, calls = timed(lambda: o.update(weight, states, ids, grad), dev, self.s.reps)
                    rb = 4 * c + state_bytes_per_row(opt, c)
                    self.add("update", f"{opt} {where} rows={ids.numel()} c={c}", t, calls,
                             [Sample("update", {"optimizer": opt, "row_bytes": rb, "rows": ids.numel(),
                                                "dtype": "fp32", "in_host": where == "host"}, t, "")],
                             mechanism=host.mechanism if where == "host" else "hbm")
                    del weight, states
        finally:
            host.close()

    def host_gathers(self) -> None:
        dev = self.device
        host = HostMemory(dev, "auto")
        try:
            if host.mechanism == "cpu_gather_copy":
                self.rows.append({"op": "host_gather", "case": "no UVA here", "measured_s": None})
                return
            L, R = self.s.gather_lookups, self.s.gather_table_rows
            for c in (4, 16, 64, 256):  # fp32 rows of 16 .. 1024 bytes
                h = host.zeros((R, c), torch.float32, gpu_readable=True)
                ids = zipf_ids(L, None, seed=c, space=R).to(dev)
                offsets = torch.arange(0, L, BAG, device=dev)
                t, calls = timed(lambda: kernels.lookup(h.dev, ids, offsets), dev, self.s.reps)
                self.add("host_gather", f"zero-copy lookup rb={4 * c} L={L}", t, calls,
                         [Sample("lookup", {"dtype": "fp32", "row_bytes": 4 * c, "lookups": L,
                                            "unique": expected_unique(R, L), "out_bytes": L // BAG * 4 * c,
                                            "from_host": True}, t, "")], mechanism=host.mechanism)
        finally:
            host.close()

    def lookup_dtypes(self) -> None:
        dev = self.device
        L, R = self.s.gather_lookups, self.s.gather_table_rows * 4
        for c in (4, 8, 16, 32):
            ids = zipf_ids(L, None, seed=c, space=R).to(dev)
            offsets = torch.arange(0, L, BAG, device=dev)
            for dt, torch_dt, e in (("fp32", torch.float32, 4), ("fp16", torch.float16, 2)):
                w = torch.zeros((R, c), dtype=torch_dt, device=dev)
                t, calls = timed(lambda: kernels.lookup(w, ids, offsets), dev, self.s.reps)
                self.add("lookup", f"embedding_bag {dt} c={c} L={L}", t, calls,
                         [Sample("lookup", {"dtype": dt, "row_bytes": e * c, "lookups": L,
                                            "unique": expected_unique(R, L), "out_bytes": L // BAG * 4 * c}, t, "")])
                del w

    def groups(self) -> None:
        """G small groups' whole op chains back to back: what a step with G groups pays in fixed costs."""
        dev, c, rows, L = self.device, 16, 1000, 256
        for G in self.s.group_counts:
            weights = [torch.zeros((rows, c), device=dev) for _ in range(G)]
            ids = [zipf_ids(L, 1.05, seed=g, space=rows).to(dev) for g in range(G)]
            offsets = torch.arange(0, L, BAG, device=dev)
            bags = torch.arange(L, device=dev) // BAG
            grad_out = torch.empty((L // BAG, c), device=dev)
            parts = [torch.rand((L // BAG, c), device=dev)]
            o = SparseRowOptimizer("sgd", 0.01)
            o.new_step()

            def chain():
                for g in range(G):
                    kernels.lookup(weights[g], ids[g], offsets)
                    kernels.pack_grad(parts, grad_out)
                    uniq, counts, sorted_bags = kernels.sort(ids[g], bags)
                    summed = kernels.segment_reduce(grad_out, sorted_bags, counts)
                    o.update(weights[g], [], uniq, summed)
            t, calls = timed(chain, dev, self.s.reps)
            u = expected_unique(rows, L)
            one = [Sample("lookup", {"dtype": "fp32", "row_bytes": 4 * c, "lookups": L, "unique": u,
                                     "out_bytes": L // BAG * 4 * c}, 0, ""),
                   Sample("copy", {"bytes": L // BAG * 4 * c}, 0, ""), Sample("sort", {"ids": L}, 0, ""),
                   Sample("segment_reduce", {"row_bytes": 4 * c, "lookups": L}, 0, ""),
                   Sample("update", {"optimizer": "sgd", "row_bytes": 4 * c, "rows": u, "dtype": "fp32"}, 0, "")]
            self.add("groups", f"{G} groups x (lookup, pack_grad, sort, segment_reduce, update)", t, calls, one * G)

    def run_all(self) -> list[dict]:
        for name in ("reduces", "sorts", "updates", "host_gathers", "lookup_dtypes", "groups"):
            self.say(name)
            try:
                getattr(self, name)()
            except Exception as exc:  # noqa: BLE001 - one case failing must not lose the others
                self.rows.append({"op": name, "case": "failed", "error": f"{type(exc).__name__}: {exc}"})
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
        return self.rows


def op_costs(spec_path: str | None):
    """The GPU's OpCosts of a hardware spec (its first GPU), or None when no spec is given."""
    if not spec_path:
        return None
    from placer.specs import load_hardware
    from placer.topology import Topology

    topo = Topology(load_hardware(spec_path))
    return topo.op_costs(topo.gpus[0])


def table(rows: list[dict], labels: list[str]) -> str:
    """The rows as a fixed-width text table: measured ms, then measured / priced under each spec."""
    head = f"{'op':12} {'case':62} {'measured':>11} " + " ".join(f"{lab + ' x':>13}" for lab in labels)
    out = [head, "-" * len(head)]
    for r in rows:
        if r.get("measured_s") is None:
            out.append(f"{r['op']:12} {r['case'][:62]:62} {r.get('error', 'not run')}")
            continue
        ratios = " ".join(f"{r[lab + '_ratio']:>13.2f}" if r.get(lab + "_ratio") else f"{'-':>13}" for lab in labels)
        out.append(f"{r['op']:12} {r['case'][:62]:62} {r['measured_s'] * 1e3:>9.4g}ms {ratios}")
    return "\n".join(out)


def misses_by_op(rows: list[dict], label: str) -> dict[str, dict]:
    """Per op kind: the median and the range of measured / priced under spec ``label``."""
    out: dict[str, dict] = {}
    for op in sorted({r["op"] for r in rows}):
        ratios = [r[f"{label}_ratio"] for r in rows if r["op"] == op and r.get(f"{label}_ratio")]
        if ratios:
            out[op] = {"median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
                       "max_ratio": max(ratios), "cases": len(ratios)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a CPU dry run)")
    ap.add_argument("--datasheet", default=str(ROOT / "hardware_specs" / "h100-sxm-host.yaml"))
    ap.add_argument("--calibrated", default=None, help="the spec placer calibrate wrote (optional)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    costs = {"datasheet": op_costs(args.datasheet)}
    if args.calibrated and Path(args.calibrated).exists():
        costs["calibrated"] = op_costs(args.calibrated)
    say = lambda m: print(f"[{time.strftime('%H:%M:%S')}] micro: {m}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rows = Micro(device, SIZES["tiny" if args.tiny else "full"], costs, say).run_all()
    labels = list(costs)
    data = {"device": str(device), "sizes": "tiny" if args.tiny else "full", "datasheet": args.datasheet,
            "calibrated": args.calibrated if "calibrated" in costs else None, "wall_s": time.perf_counter() - t0,
            "rows": rows, "misses_by_op": {lab: misses_by_op(rows, lab) for lab in labels}}
    Path(args.out).write_text(json.dumps(data, indent=1, default=float) + "\n")
    print(table(rows, labels))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
