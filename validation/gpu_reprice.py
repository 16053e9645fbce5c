#!/usr/bin/env python3
"""The H100 campaigns' plans re-priced offline with ``fixed_us.embedding_op`` (program/issue.py), no GPU needed.

    python3 validation/gpu_reprice.py [--out validation/results/gpu-reprice-2026-11-27.json]

For runs 1 and 3 (validation/results/gpu-2026-11-27{,-run3}/): every plan the run measured (the committed plans
of validation/gpu_plans/; the ILPs re-solved on the GPU were not kept, so ``ilp@calibrated`` is left out) is
priced on the run's own calibrated spec by today's cost model, once as written (before) and once with
``embedding_op`` added. Neither run's calibrate measured embedding_op, so it is ESTIMATED from the run's own
data: run 1 from its micro-benchmarks' chains of groups (micro.json ``groups``: G groups of lookup, pack_grad,
sort, segment_reduce, update at 256 lookups; least squares of measured - priced = G x ATen ops per group x
embedding_op, the fit calibrate/chain.py makes), run 3 (no micro-benchmarks) from its calibrated
``fixed_us.dense_op`` (the same host overhead per op, fitted on dense steps). Printed: step and embedding-phase
MAPE / Spearman before and after per run, and fits of candidate models of the measured embedding phases
(R^2, MAPE, free parameters). Writes the JSON with command, commit and date. Seconds in the JSON, ms printed.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from validation.common import environment, write_json  # noqa: E402

RESULTS = ROOT / "validation" / "results"
RUNS = {"run1": "gpu-2026-11-27", "run3": "gpu-2026-11-27-run3"}
FIDELITY = "fidelity-h100-2026-11-27.json"
EMBEDDING_PHASES = ("embedding_forward", "forward_exchange", "backward_exchange", "embedding_backward",
                    "gradient_allreduce")
MICRO_OPTIMIZER = "sgd"  # validation/gpu_micro.py groups: SparseRowOptimizer("sgd")


def micro_estimate(micro: dict) -> tuple[float, str]:
    """(embedding_op seconds, how) from micro.json's ``groups`` rows, priced on the run's calibrated spec."""
    from placer.program.issue import group_aten_ops

    num = den = 0.0
    parts = []
    for r in micro["rows"]:
        if r.get("op") != "groups" or r.get("measured_s") is None:
            continue
        g = int(r["case"].split()[0])
        n = g * group_aten_ops(MICRO_OPTIMIZER)
        num += n * (r["measured_s"] - r["calibrated_s"])
        den += n * n
        parts.append(f"{g} groups {r['measured_s'] * 1e3:.3f} ms vs {r['calibrated_s'] * 1e3:.3f} priced")
    return max(0.0, num / den), "least squares over micro.json groups (" + "; ".join(parts) + ")"


def spec_with(spec: Path, embedding_op_s: float, how: str, folder: Path) -> Path:
    """A copy of the calibrated spec with fixed_us.embedding_op on the GPU (after its dense_op line)."""
    text = spec.read_text()
    m = re.search(r"^( +)dense_op: .*$", text, flags=re.M)  # the GPU's op_costs come first in the spec
    line = f"{m.group(1)}embedding_op: {embedding_op_s * 1e6:.4g}  # ESTIMATED offline (gpu_reprice.py): {how}"
    out = folder / f"{spec.parent.name}.yaml"
    out.write_text(text[:m.end()] + "\n" + line + text[m.end():])
    return out


def price_rows(run_dir: Path, spec: Path) -> list[dict]:
    """Every measured plan of a run priced on ``spec``: step, embedding phases, groups and ATen ops."""
    from placer.cost import CostModel
    from placer.plan import load_plan
    from placer.plan_price import priced_plan
    from placer.program.build import plan_ops
    from placer.program.issue import aten_ops
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    manifest = json.loads((ROOT / "validation" / "gpu_plans" / "manifest.json").read_text())
    files = {w["name"]: w["file"] for w in manifest["workloads"]}
    hw = load_hardware(spec)
    out = []
    for r in json.loads((run_dir / FIDELITY).read_text())["rows"]:
        if "error" in r or r["name"] == "ilp@calibrated":
            continue
        wl = load_workload(ROOT / files[r["workload"]])
        plan = load_plan(ROOT / "validation" / "gpu_plans" / "plans" / Path(files[r["workload"]]).stem / r["plan_file"])
        topo = Topology(hw, wl.dense.dtype)
        pred = priced_plan(plan, topo, wl, check_hashes=False)
        ops = plan_ops(CostModel(topo, wl).builder, plan.placements)
        gpu_groups = {o.group for o in ops if o.once and o.group and o.group.location != "cpu"}
        n_aten = sum(aten_ops(o.kind, wl.optimizer.name) for o in ops if o.once and o.group in gpu_groups)
        out.append({"workload": r["workload"], "plan": r["name"], "groups": len(gpu_groups), "aten_ops": n_aten,
                    "host_groups": any(p.sharding == "host" for p in plan.placements),
                    "measured_step_s": r["measured_step_time_s"], "predicted_step_s": pred["step_time_s"],
                    "measured_embedding_s": sum(r["phases"][p]["measured_s"] for p in EMBEDDING_PHASES),
                    "predicted_embedding_s": sum(pred["phases_s"][p] for p in EMBEDDING_PHASES)})
    return out


def summary(pred: list[float], meas: list[float]) -> dict:
    from scipy.stats import spearmanr

    p, m = np.array(pred), np.array(meas)
    return {"mape": float(np.mean(np.abs(p - m) / m)), "spearman": float(spearmanr(p, m).statistic),
            "measured_over_predicted_median": float(np.median(m / p))}


def fits(rows: list[dict], estimate_s: float) -> dict:
    """Candidate models of the measured embedding phases (GPU-only plans: a host's CPU groups are another
    matter), least squares on the residual; R^2 of the measured values and MAPE."""
    rows = [r for r in rows if not r["host_groups"]]
    m = np.array([r["measured_embedding_s"] for r in rows])
    p = np.array([r["before"]["predicted_embedding_s"] for r in rows])
    g = np.array([r["groups"] for r in rows], dtype=float)
    n = np.array([r["aten_ops"] for r in rows], dtype=float)

    def score(y: np.ndarray, params: int, value=None) -> dict:
        ss = float(np.sum((m - y) ** 2))
        tot = float(np.sum((m - m.mean()) ** 2))
        return {"free_parameters": params, "r2": 1 - ss / tot, "mape": float(np.mean(np.abs(y - m) / m)),
                "parameter": value}

    scale = float(np.sum(p * m) / np.sum(p * p))
    per_group = float(np.sum(g * (m - p)) / np.sum(g * g))
    per_op = float(np.sum(n * (m - p)) / np.sum(n * n))
    return {"plans": len(rows),
            "priced (as calibrated)": score(p, 0),
            "a x priced": score(scale * p, 1, scale),
            "priced + a x groups (s per group)": score(p + per_group * g, 1, per_group),
            "priced + a x ATen ops (s per op, fitted)": score(p + per_op * n, 1, per_op),
            "priced + embedding_op x ATen ops (estimated, no fit)": score(p + estimate_s * n, 0, estimate_s)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(RESULTS / "gpu-reprice-2026-11-27.json"))
    args = ap.parse_args(argv)
    from placer.specs import load_hardware
    from placer.topology import Topology

    report = {"command": "python3 validation/gpu_reprice.py" + (f" --out {args.out}" if argv else ""),
              "date": _dt.date.today().isoformat(), **environment(), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for label, name in RUNS.items():
            run_dir = RESULTS / name
            spec = run_dir / "calibrated.yaml"
            if (run_dir / "micro.json").exists():
                est, how = micro_estimate(json.loads((run_dir / "micro.json").read_text()))
            else:
                topo = Topology(load_hardware(spec))
                est = topo.op_costs(topo.gpus[0]).fixed("dense_op")
                how = "this run's calibrated fixed_us.dense_op (no micro-benchmarks in this run)"
            before = price_rows(run_dir, spec)
            after = price_rows(run_dir, spec_with(spec, est, how, Path(tmp)))
            rows = []
            for b, a in zip(before, after):
                keep = {k: b[k] for k in ("workload", "plan", "groups", "aten_ops", "host_groups", "measured_step_s",
                                          "measured_embedding_s")}
                rows.append(dict(keep, before={k: b[k] for k in ("predicted_step_s", "predicted_embedding_s")},
                                 after={k: a[k] for k in ("predicted_step_s", "predicted_embedding_s")}))
            res = {"folder": str(run_dir.relative_to(ROOT)), "embedding_op_s": est, "embedding_op_how": how,
                   "rows": rows}
            for which in ("before", "after"):
                for subset, keep in (("all", lambda r: True), ("gpu_only", lambda r: not r["host_groups"])):
                    rs = [r for r in rows if keep(r)]
                    res[f"{which}_{subset}"] = {
                        "plans": len(rs),
                        "step": summary([r[which]["predicted_step_s"] for r in rs], [r["measured_step_s"] for r in rs]),
                        "embedding": summary([r[which]["predicted_embedding_s"] for r in rs],
                                             [r["measured_embedding_s"] for r in rs])}
            res["fits"] = fits(rows, est)
            report["runs"][label] = res
    print_table(report)
    write_json(Path(args.out), report)
    print(f"\nwrote {args.out}")
    return 0


def print_table(report: dict) -> None:
    for label, res in report["runs"].items():
        print(f"\n{label} ({res['folder']}): embedding_op {res['embedding_op_s'] * 1e6:.2f} us per ATen op, "
              f"{res['embedding_op_how']}")
        print(f"  {'plans':10} {'n':>3} {'step MAPE':>18} {'step Spearman':>15} {'emb MAPE':>18} {'emb Spearman':>15}")
        for subset in ("all", "gpu_only"):
            b, a = res[f"before_{subset}"], res[f"after_{subset}"]
            print(f"  {subset:10} {b['plans']:>3} {b['step']['mape']:>8.1%} -> {a['step']['mape']:>6.1%} "
                  f"{b['step']['spearman']:>6.2f} -> {a['step']['spearman']:>5.2f} "
                  f"{b['embedding']['mape']:>8.1%} -> {a['embedding']['mape']:>6.1%} "
                  f"{b['embedding']['spearman']:>6.2f} -> {a['embedding']['spearman']:>5.2f}")
        print(f"  models of the measured embedding phases ({res['fits']['plans']} GPU-only plans):")
        for name, f in res["fits"].items():
            if name == "plans":
                continue
            par = "" if f["parameter"] is None else f" (parameter {f['parameter']:.4g})"
            print(f"    {name:55} params {f['free_parameters']}  R^2 {f['r2']:6.3f}  MAPE {f['mape']:6.1%}{par}")
        print(f"  {'workload':26} {'plan':20} {'G':>2} {'ops':>4} {'emb meas':>9} {'before':>8} {'after':>8} "
              f"{'step meas':>9} {'before':>8} {'after':>8} (ms)")
        for r in res["rows"]:
            print(f"  {r['workload']:26} {r['plan']:20} {r['groups']:>2} {r['aten_ops']:>4} "
                  f"{r['measured_embedding_s'] * 1e3:>9.3f} {r['before']['predicted_embedding_s'] * 1e3:>8.3f} "
                  f"{r['after']['predicted_embedding_s'] * 1e3:>8.3f} {r['measured_step_s'] * 1e3:>9.3f} "
                  f"{r['before']['predicted_step_s'] * 1e3:>8.3f} {r['after']['predicted_step_s'] * 1e3:>8.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
