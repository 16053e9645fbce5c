#!/usr/bin/env python3
"""The exchange on a real machine: N CPU processes (gloo over loopback), calibrated, run, compared.

Two steps:

1. ``calibrate``: ``placer calibrate --device cpu`` with one torch thread (each rank of a CPU run has one)
   for the per-device numbers, then the gloo all-to-all between N processes over loopback (1 thread each,
   ``all_to_all_single`` after a barrier, as the runner calls it; 4 B .. 4 MiB per peer; max over ranks,
   median over repeats), fitted as T = L + S / bw where S is the bytes one rank sends to the others. Writes
   hardware_specs/local-cpu-procs.yaml: N "GPUs" = the N processes. How the all-to-all enters the spec:
   every GPU-to-GPU route of the topology goes gpu -> host -> gpu (no NVLink), so the gpu<->host link IS the
   inter-process path: bw_GBps = bw (one rank's send bytes per second; the receive side is the other
   direction) and latency_us = L / 2 (two hops: cost.py's exchange latency is the farthest path, 2 x the
   link's). The in-process memcpy that ``placer calibrate`` measures for that link is kept in the comments,
   and host_read_efficiency is re-expressed over the loopback bandwidth (clamped to 1). Memory: the spec is
   unified (placer calibrate --device cpu writes unified_memory: true): the N ranks share one RAM,
   host.dram_GiB = MemTotal, and gpus.hbm_GiB is ignored.
   A slower direct gpu<->gpu (or switch) link cannot be used instead: routes take the least summed
   1/bandwidth, so the faster memcpy path through the host would always win.

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
import re
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
PER_PEER_BYTES = [4, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 2 << 20, 4 << 20]
BIG_BATCH = 8192
ROUNDS = 3


# ---- the loopback all-to-all ---------------------------------------------------------------------------------

def _a2a_worker(rank: int, world: int, port: int, out_path: str, reps: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    times: dict[int, list[float]] = {b: [] for b in PER_PEER_BYTES}
    bufs = {}
    for _ in range(ROUNDS):  # rounds over all sizes, so that a busy moment of the machine hits every size
        for per_peer in PER_PEER_BYTES:
            n = max(1, per_peer // 4)
            if per_peer not in bufs:
                bufs[per_peer] = (torch.ones(n * world), torch.empty(n * world))
            send, recv = bufs[per_peer]
            splits = [n] * world
            count = reps if per_peer < (1 << 20) else max(5, reps // 3)
            for i in range(count + 2):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_to_all_single(recv, send, output_split_sizes=splits, input_split_sizes=splits)
                if i >= 2:
                    times[per_peer].append(time.perf_counter() - t0)
    rows = []
    for per_peer, ts in times.items():
        # per repeat the max over ranks (the collective ends when the slowest rank has its data)
        t = torch.tensor(ts, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        n = max(1, per_peer // 4)
        rows.append({"per_peer_bytes": n * 4, "send_bytes": n * 4 * (world - 1), "median_s": float(t.median()),
                     "min_s": float(t.min()), "reps": len(ts)})
    if rank == 0:
        Path(out_path).write_text(json.dumps(rows), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def measure_loopback(world: int, reps: int = 20) -> dict:
    """gloo all_to_all_single between ``world`` local processes: times per size and the fit T = L + S / bw."""
    import torch.multiprocessing as mp

    from placer.runner.distributed import free_port

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "a2a.json")
        mp.spawn(_a2a_worker, args=(world, free_port(), out, reps), nprocs=world, join=True)
        rows = json.loads(Path(out).read_text(encoding="utf-8"))
    small = [r["median_s"] for r in rows if r["per_peer_bytes"] <= (16 << 10)]
    latency = statistics.median(small)
    big = [r for r in rows if r["per_peer_bytes"] >= (256 << 10)]
    # least squares T = a + S / bw over the large sizes (the slope); the latency is the small sizes' plateau
    xs = [r["send_bytes"] for r in big]
    ys = [r["median_s"] for r in big]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    bw = 1.0 / slope
    return {"world": world, "rows": rows, "latency_s": latency, "bw_Bps": bw,
            "how": (f"gloo all_to_all_single between {world} processes over loopback (1 torch thread each), after a "
                    f"barrier, preallocated buffers, max over ranks, median of {ROUNDS} rounds of repeats; "
                    "latency = median time at 4 B..16 KiB per peer "
                    f"({latency * 1e6:.0f} us), bw = 1 / slope of a least-squares line of time over the bytes one "
                    f"rank sends to the others at 256 KiB..4 MiB per peer ("
                    + ", ".join(f"{r['per_peer_bytes'] >> 10} KiB {r['median_s'] * 1e3:.2f} ms" for r in big) + ")")}


# ---- the spec ---------------------------------------------------------------------------------------------

def write_spec(path: Path, nproc: int, quick: bool) -> dict:
    """placer calibrate --device cpu (1 thread) + the loopback all-to-all at ``nproc``; writes the spec."""
    import torch

    from placer.calibrate import calibrate, to_yaml
    from placer.specs import load_hardware

    torch.set_num_threads(1)
    cal = calibrate(torch.device("cpu"), quick=quick)
    loop = measure_loopback(nproc)
    memcpy = {k: cal.values[k] for k in ("link_bw_GBps", "link_efficiency", "link_latency_us",
                                         "host_read_efficiency")}
    bw = loop["bw_Bps"]
    cal.set("link_bw_GBps", bw / 1e9, "inter-process path; " + loop["how"]
            + f"; placer calibrate's in-process memcpy for this link: {memcpy['link_bw_GBps'].value:.2f} GB/s")
    cal.set("link_efficiency", 1.0, "bw_GBps is the measured all-to-all rate itself")
    cal.set("link_latency_us", loop["latency_s"] / 2 * 1e6,
            f"half the small-message all-to-all time ({loop['latency_s'] * 1e6:.0f} us): gpu -> host -> gpu is two "
            f"hops; placer calibrate's memcpy latency: {memcpy['link_latency_us'].value:.2f} us")
    hr_rate = memcpy["host_read_efficiency"].value * memcpy["link_bw_GBps"].value \
        * min(1.0, memcpy["link_efficiency"].value)
    eff = hr_rate * 1e9 / bw
    cal.set("host_read_efficiency", min(1.0, eff),
            f"the in-process gather of host rows ({hr_rate:.2f} GB/s, placer calibrate) over the loopback bw"
            + (" (clamped to 1: in-process reads are faster than the link; priced pessimistically)" if eff > 1 else ""))
    text = to_yaml(cal, name="local-cpu-procs", gpus=nproc)
    src = f"placer calibrate {cal.date} on {cal.device_name}, torch {cal.torch_version}"
    mine = f"validation/exchange_cpu.py {cal.date} on {socket.gethostname().split('.')[0]} ({cal.device_name}), " \
           f"torch {cal.torch_version}"
    out = []
    for line in text.splitlines():
        key = line.split(":")[0].strip()
        if key in ("bw_GBps", "efficiency", "latency_us", "host_read_efficiency", "count"):
            line = line.replace(src, mine)
        if key == "count" and line.startswith("      count"):
            line = line.split("#")[0] + f"# {mine}: N ranks = N CPU processes (placer run --nproc {nproc})"
        if line.startswith("# CPU run (unified memory):"):
            out += [f"# {nproc} CPU processes of one machine, one torch thread each: the 'GPUs' are the ranks of "
                    f"`placer run --device cpu --nproc {nproc}`",
                    "# (gloo over loopback). Per-device numbers: placer calibrate --device cpu with 1 thread. The "
                    "gpu<->host link is",
                    "# the inter-process path measured by validation/exchange_cpu.py (every GPU-to-GPU route goes "
                    "through the host).",
                    "# Unified memory: the ranks share one RAM (host.dram_GiB) and the same cores; gpus.hbm_GiB is "
                    "ignored.",
                    "# Regenerate: python3 validation/exchange_cpu.py calibrate --nproc N"]
            continue
        if line.startswith(("# memory, the host's and the 'link'", "# same cores (one stream)")):
            continue  # the rest of placer calibrate's CPU-run paragraph, replaced above
        if line.startswith("      - kind: pcie"):
            line = "      - kind: network                 # loopback TCP between the rank processes (gloo)"
        if line.startswith("# Hardware spec measured by"):
            line = re.sub(r"`placer calibrate([^`]*)`", r"`placer calibrate --device cpu --threads 1\1` + "
                          "`validation/exchange_cpu.py`", line).replace("(CPU run,", f"(CPU run, {nproc} processes,")
        if line.startswith("# Source of every number:"):
            line = line.replace("(per-line comments say how)", "or validation/exchange_cpu.py (per-line comments say "
                                "which and how)")
        if line.startswith("description:"):
            line = f"description: {nproc} CPU processes of {cal.device_name} over loopback gloo ({cal.date})"
        out.append(line)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    load_hardware(path)
    return {"loopback": loop, "calibrate_memcpy": {k: {"value": m.value, "how": m.how} for k, m in memcpy.items()},
            "spec": str(path.relative_to(ROOT))}


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
    from placer.plan import Placement, Plan, Shard, SpecRef, check_plan
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
