#!/usr/bin/env python3
"""The exchange on a real machine: N CPU processes (gloo over loopback), calibrated, run, compared.

Two steps:

1. ``calibrate``: ``placer calibrate --device cpu --nproc N`` (placer/calibrate/ranks.py: one rank's op costs
   measured while N-1 others work, the gloo all-to-all and all-reduce between N processes, each timed after a
   burst of compute, fitted T = L + S / bw where S is the bytes one rank sends to the others) into
   hardware_specs/local-cpu-procs.yaml: N "GPUs" = the N processes. Every GPU-to-GPU route of the spec goes
   gpu -> host -> gpu, so the gpu<->host link IS the inter-process path: bw_GBps = bw, latency_us = L / 2
   (two hops). Memory: the spec is unified: the N ranks share one RAM (host.dram_GiB).

2. ``validate``: for N in --nprocs, plans on this spec (table_wise round-robin, row_wise over every GPU, and
   a mix of every kind incl. host and data_parallel) x workloads (tiny, B = 256: latency-bound; tiny with
   B = 8192: bandwidth-bound) are run with ``placer run --nproc N --device cpu`` and the measured exchange
   (the all_to_all_single call alone, and the whole forward/backward_exchange phase) is compared with
   cost.py's forward/backward_exchange phases. For N other than the spec's count, the spec is re-used with
   count N and the loopback numbers measured at N (the derived numbers are in the results file).
   Results: validation/results/exchange-cpu-<date>.json (command, commit, device, versions, date, cases).

    python3 validation/exchange_cpu.py calibrate --nproc 2          # writes hardware_specs/local-cpu-procs.yaml
    python3 validation/exchange_cpu.py validate --nprocs 2 4        # writes validation/results/exchange-cpu-<date>.json
    python3 validation/exchange_cpu.py all                          # both
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SPEC = ROOT / "hardware_specs" / "local-cpu-procs.yaml"
RESULTS = ROOT / "validation" / "results"
TINY = ROOT / "workloads" / "tiny.yaml"
BIG_BATCH = 8192


# ---- the loopback all-to-all and the spec: placer calibrate --nproc (placer/calibrate/ranks.py) -----------

def _loopback(col: dict) -> dict:
    """What validate reads of the collectives (``Collectives.to_json()``, as calibrate --json prints them): the
    all-to-all's fit and the sizes timed, and the all-reduce's fit."""
    a2a = col["all_to_all"]
    return {"world": col["world"], "rows": [{"send_bytes": b, "median_s": t} for b, t in a2a["rows"]],
            "latency_s": a2a["latency_s"], "bw_Bps": a2a["bw_Bps"], "how": col["how"],
            "all_reduce": {k: col["all_reduce"][k] for k in ("latency_s", "bw_Bps")}}


def measure_loopback(world: int) -> dict:
    """The gloo all-to-all between ``world`` local processes as ``placer calibrate --nproc`` measures it (each
    timed after a burst of compute): its fit T = L + S / bw and the sizes timed."""
    from placer.calibrate.ranks import measure_collectives

    return _loopback(measure_collectives(world).to_json())


def write_spec(path: Path, nproc: int, quick: bool) -> dict:
    """``placer calibrate --device cpu --nproc N`` into ``path`` (the spec's name: local-cpu-procs)."""
    cmd = [sys.executable, "-m", "placer.cli", "calibrate", "--device", "cpu", "--nproc", str(nproc), "-o", str(path),
           "--name", "local-cpu-procs", "--json"] + (["--quick"] if quick else [])
    data = json.loads(subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    return {"loopback": _loopback(data["collectives"]),
            "spec": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)}


def spec_for(nproc: int, loop: dict | None, tmp: Path) -> tuple[Path, dict]:
    """The committed spec, or (another N) the same with count N and the loopback numbers measured at N."""
    import yaml

    data = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    tpl = next(iter(data["templates"].values()))
    if tpl["gpus"]["count"] == nproc:
        return SPEC, {"spec": str(SPEC.relative_to(ROOT)), "derived": False}
    ratio = tpl["gpus"]["count"] / nproc
    tpl["gpus"]["count"] = nproc
    tpl["gpus"]["hbm_GiB"] = round(tpl["gpus"]["hbm_GiB"] * ratio, 3)
    link = tpl["links"][0]
    link["bw_GBps"] = round(loop["bw_Bps"] / 1e9, 4)
    link["latency_us"] = round(loop["latency_s"] / 2 * 1e6, 2)
    data["name"] = f"local-cpu-procs-{nproc}"
    path = tmp / f"local-cpu-procs-{nproc}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path, {"spec": f"{SPEC.relative_to(ROOT)} with count {nproc}", "derived": True,
                  "gpus.count": nproc, "gpus.hbm_GiB": tpl["gpus"]["hbm_GiB"], "link.bw_GBps": link["bw_GBps"],
                  "link.latency_us": link["latency_us"], "how": loop["how"]}


# ---- plans and cases ------------------------------------------------------------------------------------

def plans_for(hw, wl) -> dict:
    from placer.plan import Placement, Plan, Shard, SpecRef
    from placer.plan_check import check_plan
    from placer.topology import Topology

    topo = Topology(hw, wl.dense.dtype)
    gpus, host = topo.gpus, topo.hosts[0]
    N = len(gpus)

    def sh(dev, rows, cols, hot=None):
        n = rows[1] - rows[0]
        k = n if hot is None else hot
        return Shard(device=dev, rows=rows, cols=cols, hbm_rows=k, host_rows=n - k)

    def plan(placements, method):
        p = Plan(hardware=SpecRef(name=hw.name, sha256=hw.sha256), workload=SpecRef(name=wl.name, sha256=wl.sha256),
                 method=method, placements=placements)
        check_plan(p, topo, wl)
        return p

    tw = [Placement(table=t.name, sharding="table_wise", shards=[sh(gpus[i % N], (0, t.rows), (0, t.dim))])
          for i, t in enumerate(wl.tables)]
    rw = []
    for t in wl.tables:
        b = [t.rows * i // N for i in range(N + 1)]
        rw.append(Placement(table=t.name, sharding="row_wise", shards=[
            sh(gpus[i], (b[i], b[i + 1]), (0, t.dim)) for i in range(N)]))
    mixed = []
    for i, t in enumerate(wl.tables):
        kind = ("row_wise", "column_wise", "data_parallel", "table_wise", "host", "table_wise")[i % 6]
        if kind == "row_wise":
            b = [t.rows * j // N for j in range(N + 1)]
            shards = [sh(gpus[j], (b[j], b[j + 1]), (0, t.dim)) for j in range(N)]
        elif kind == "column_wise":
            pieces = 2 if t.dim % 2 == 0 else 1
            w = t.dim // pieces
            shards = [sh(gpus[(j + 1) % N], (0, t.rows), (j * w, (j + 1) * w)) for j in range(pieces)]
        elif kind == "data_parallel":
            shards = [sh(g, (0, t.rows), (0, t.dim)) for g in gpus]
        elif kind == "host":
            shards = [sh(host, (0, t.rows), (0, t.dim), 0)]
        else:
            shards = [sh(gpus[i % N], (0, t.rows), (0, t.dim))]
        mixed.append(Placement(table=t.name, sharding=kind, shards=shards))
    return {"table_wise_round_robin": plan(tw, "hand:table_wise_round_robin"),
            "row_wise_all_gpus": plan(rw, "hand:row_wise_all_gpus"), "mixed_kinds": plan(mixed, "hand:mixed_kinds")}


def workloads(tmp: Path) -> dict[str, Path]:
    text = TINY.read_text(encoding="utf-8")
    big = text.replace("batch_size: 256 ", f"batch_size: {BIG_BATCH} ")
    big = big.replace("name: tiny\n", f"name: tiny-b{BIG_BATCH}\n")
    assert f"batch_size: {BIG_BATCH}" in big
    path = tmp / f"tiny-b{BIG_BATCH}.yaml"
    path.write_text(big, encoding="utf-8")
    return {"tiny": TINY, f"tiny-b{BIG_BATCH}": path}


def validate(nprocs: list[int], steps: int, out_path: Path, calib: dict | None, command: str) -> dict:
    import torch

    from placer.runner import RunConfig
    from placer.runner.distributed import run_distributed
    from placer.specs import load_hardware, load_workload

    cases = []
    specs = {}
    loops = {}
    with tempfile.TemporaryDirectory(prefix="exchange-cpu-") as tmpdir:
        tmp = Path(tmpdir)
        wls = workloads(tmp)
        for n in nprocs:
            loop = calib["loopback"] if calib and calib["loopback"]["world"] == n else measure_loopback(n)
            spec_path, spec_info = spec_for(n, loop, tmp)
            loops[n] = loop
            specs[n] = spec_info
            hw = load_hardware(spec_path)
            for wl_name, wl_path in wls.items():
                wl = load_workload(wl_path)
                for plan_name, plan in plans_for(hw, wl).items():
                    plan_path = tmp / f"plan-{n}-{wl_name}-{plan_name}.json"
                    plan.write(plan_path)
                    print(f"[exchange-cpu] {n} processes, {wl_name}, {plan_name} ...", file=sys.stderr, flush=True)
                    t0 = time.perf_counter()
                    r = run_distributed(spec_path, wl_path, plan_path, RunConfig(
                        device="cpu", steps=steps, warmup=5, phase_steps=steps, seed=0, threads=1), n)
                    cases.append(_case(n, wl_name, plan_name, r, time.perf_counter() - t0))
                    c = cases[-1]
                    print(f"[exchange-cpu]   fx predicted {c['predicted']['forward_exchange_s'] * 1e6:.0f} us, "
                          f"all-to-all {c['measured']['forward_all_to_all_s'] * 1e6:.0f} us, phase "
                          f"{c['measured']['forward_exchange_phase_s'] * 1e6:.0f} us", file=sys.stderr, flush=True)
    result = {
        "what": "the runner's all-to-all of pooled embeddings between N CPU processes (gloo over loopback) vs "
                "cost.py's forward/backward_exchange phases on hardware_specs/local-cpu-procs.yaml",
        "command": command,
        "commit": _git("rev-parse", "HEAD"),
        "dirty_files": [x for x in _git("status", "--porcelain").splitlines() if x.strip()][:50],
        "date": _dt.date.today().isoformat(),
        "machine": {"hostname": socket.gethostname(), "platform": platform.platform(),
                    "cpu": _cpu_model(), "cores": os.cpu_count(), "loadavg_at_end": list(os.getloadavg())},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "gloo": torch.distributed.is_gloo_available()},
        "spec": str(SPEC.relative_to(ROOT)),
        "calibration": calib,
        "specs_per_nproc": specs,
        "loopback_per_nproc": loops,
        "cases": cases,
        "summary": _summary(cases),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def _case(n, wl_name, plan_name, r, wall_s) -> dict:
    m, p = r["measured"], r["predicted"]
    ex = m["exchange"]
    pf, pb = p["phases_s"]["forward_exchange"], p["phases_s"]["backward_exchange"]
    return {
        "nproc": n, "workload": wl_name, "batch": r["batch_size"], "plan": plan_name,
        "bytes_out_per_rank_max": ex["bytes_out_per_rank_max"], "bytes_in_per_rank_max": ex["bytes_in_per_rank_max"],
        "predicted": {"forward_exchange_s": pf, "backward_exchange_s": pb, "step_time_s": p["step_time_s"],
                      "bottleneck_forward_exchange": p["phase_bottlenecks"].get("forward_exchange"),
                      "bottleneck": p["bottleneck"]},
        "measured": {"forward_all_to_all_s": ex["forward_all_to_all_s"],
                     "backward_all_to_all_s": ex["backward_all_to_all_s"],
                     "forward_exchange_phase_s": m["phases_s"]["forward_exchange"],
                     "backward_exchange_phase_s": m["phases_s"]["backward_exchange"],
                     "step_time_s": m["step_time_s"], "throughput_samples_per_s": m["throughput_samples_per_s"],
                     "phases_s": m["phases_s"]},
        "ratio_measured_over_predicted": {
            "forward_all_to_all": ex["forward_all_to_all_s"] / pf if pf else None,
            "backward_all_to_all": ex["backward_all_to_all_s"] / pb if pb else None,
            "forward_exchange_phase": m["phases_s"]["forward_exchange"] / pf if pf else None,
            "backward_exchange_phase": m["phases_s"]["backward_exchange"] / pb if pb else None,
            "step_time": m["step_time_s"] / p["step_time_s"]},
        "steps": r["steps"], "phase_steps": r["phase_steps"], "wall_s": wall_s,
    }


def _summary(cases) -> dict:
    out = {}
    for key in ("forward_all_to_all", "backward_all_to_all", "forward_exchange_phase", "backward_exchange_phase",
                "step_time"):
        ratios = [c["ratio_measured_over_predicted"][key] for c in cases
                  if c["ratio_measured_over_predicted"][key]]
        if ratios:
            out[key] = {"median_ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
                        "mape": statistics.fmean(abs(r - 1) for r in ratios)}
    groups: dict[str, list] = {}
    for c in cases:
        groups.setdefault(f"{c['nproc']} processes, {c['workload']}", []).append(c)
    out["forward_all_to_all_by_group"] = {
        g: statistics.median(c["ratio_measured_over_predicted"]["forward_all_to_all"] for c in cs)
        for g, cs in groups.items()}
    return out


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=("calibrate", "validate", "all"))
    ap.add_argument("--nproc", type=int, default=2, help="processes the spec describes (calibrate; default 2)")
    ap.add_argument("--nprocs", type=int, nargs="+", default=[2, 4], help="process counts to validate (default 2 4)")
    ap.add_argument("--steps", type=int, default=30, help="timed and instrumented steps per case (default 30)")
    ap.add_argument("--quick", action="store_true", help="placer calibrate --quick")
    ap.add_argument("-o", "--output", default=None,
                    help="results JSON (default validation/results/exchange-cpu-<date>.json)")
    args = ap.parse_args(argv)
    command = "python3 validation/exchange_cpu.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    calib = None
    if args.step in ("calibrate", "all"):
        calib = write_spec(SPEC, args.nproc, args.quick)
        print(f"wrote {SPEC.relative_to(ROOT)}: loopback {calib['loopback']['bw_Bps'] / 1e9:.2f} GB/s, "
              f"{calib['loopback']['latency_s'] * 1e6:.0f} us", file=sys.stderr)
    if args.step in ("validate", "all"):
        out = Path(args.output) if args.output else RESULTS / f"exchange-cpu-{_dt.date.today().isoformat()}.json"
        res = validate(args.nprocs, args.steps, out, calib, command)
        print(json.dumps(res["summary"], indent=1))
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
