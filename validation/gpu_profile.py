"""Where a GPU step's time goes: the host that issues the ops, or the device that runs them.

The first GPU campaign (validation/results/gpu-2026-11-27) found the dense step of four workloads taking 5.8-5.9
ms on an H100 whether it had 212 or 323 ops and 0.5 or 6.5 ms of priced device work, and the synthetic dense
steps of ``placer calibrate`` as long at 16,384 samples as at 2,048: the signs of a step bound by the host's
issuing of ops (Python, autograd, the dispatcher, kernel launches), not by the GPU. The cost model prices a GPU's
ops as a sum of their device times plus fixed costs. This stage measures what a host-issue model needs:

- dense steps, run as the runner runs them (placer/calibrate/dense.py's model, optimizer and precision), per
  stage (forward with the loss, backward, optimizer): the host's time to issue the stage (device synchronized
  before, clock read when the host returns, then synchronized), the stage's time with its device work
  (synchronized), the whole step without intermediate syncs, the ATen ops each stage issues on the device
  (counted by a dispatch mode in an untimed step, autocast's casts included) next to the ops the cost model's
  trace counts (program/dense.py, meta device, no autocast), and the kernels launched and device-side kernel
  time per stage (torch.profiler, one untimed step each). Cases: the synthetic calibration models in fp32 and
  bf16 at two batch sizes, and the campaign's workloads;
- a whole planned step (the ILP's plan of each campaign workload, placer's runner): the host time of a step
  (clock at return, no sync), its full time, device kernel time, the host-to-device syncs it makes
  (cudaStreamSynchronize, cudaDeviceSynchronize, cudaMemcpy*, item) and the top ops by host time.

    python3 validation/gpu_profile.py --device cuda --out OUT/profile.json
    python3 validation/gpu_profile.py --device cpu --tiny --out /tmp/profile.json   # the dry run
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from placer.calibrate.dense import DenseStep  # noqa: E402
from placer.calibrate.timing import sync  # noqa: E402
from placer.program.dense import is_view  # noqa: E402

STAGES = ("forward", "backward", "optimizer")
SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemcpyAsync",
               "aten::item", "aten::_local_scalar_dense", "aten::nonzero")
TOP_OPS = 25


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def host_and_full(fn, device: torch.device, reps: int, before=None) -> tuple[float, float]:
    """(median host seconds to issue ``fn`` (clock read when it returns), median seconds with its device work),
    ``before()`` run untimed and the device synchronized before each call."""
    host, full = [], []
    for _ in range(reps):
        if before is not None:
            before()
        sync(device)
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        sync(device)
        t2 = time.perf_counter()
        host.append(t1 - t0)
        full.append(t2 - t0)
    return _median(host), _median(full)


def count_aten(fn) -> tuple[Counter, int]:
    """(ATen ops ``fn`` issues by op name, how many of them are views as the trace tells them: program/dense.py
    is_view), counted by a dispatch mode (untimed)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: Counter = Counter()
    views = [0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen[str(func)] += 1
            views[0] += is_view(func)
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return seen, views[0]


def profile_events(fn, device: torch.device) -> dict:
    """One untimed call of ``fn`` under torch.profiler: kernels launched, device kernel time, sync events, and
    the top ops by host (self CPU) time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        fn()
        sync(device)
    kernels, kernel_us, syncs, launches = 0, 0.0, Counter(), 0
    for e in prof.events():
        name = e.name
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            kernels += 1
            kernel_us += getattr(e, "device_time", 0.0) or 0.0
        elif "LaunchKernel" in name or name.startswith("cuLaunch"):
            launches += 1
        if name in SYNC_EVENTS:
            syncs[name] += 1
    top = sorted(prof.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)[:TOP_OPS]
    return {"kernels": kernels, "kernel_s": kernel_us * 1e-6, "launch_calls": launches, "syncs": dict(syncs),
            "top_host_ops": [{"name": a.key, "count": a.count, "self_host_us": a.self_cpu_time_total}
                             for a in top]}


def dense_case(label: str, workload, samples: int, device: torch.device, reps: int) -> dict:
    """Per stage: host issue time, time with device work, ATen ops issued vs traced, kernels (module docstring).
    The trace records zero_grad with the optimizer; here it runs (and is timed) with the backward."""
    from placer.program.dense import trace

    from placer.runner.trainer import dense_autocast

    step = DenseStep(workload, samples, device, dense_autocast(device, workload.dense.dtype)[0])
    for _ in range(3):
        step.whole()
    sync(device)
    traced = trace(workload, samples, device.type)
    stage_fn = {"forward": step.forward, "backward": step.backward, "optimizer": step.optimizer}
    before = {"forward": lambda: None, "backward": step.forward, "optimizer": lambda: None}  # untimed
    out = {"case": label, "samples": samples, "dtype": workload.dense.dtype, "stages": {}, "profile": {}}
    for st in STAGES:
        host, full = host_and_full(stage_fn[st], device, reps, before[st])
        before[st]()
        issued, views = count_aten(stage_fn[st])
        before[st]()
        events = profile_events(stage_fn[st], device)
        events.pop("top_host_ops")
        ops = [o for o in traced.ops if o.stage == st]
        out["stages"][st] = {"host_s": host, "full_s": full, "issued_aten": sum(issued.values()),
                             "issued_views": views,
                             "traced_ops": len(ops), "traced_views": sum(o.kind == "view" for o in ops),
                             "traced_gemms": sum(o.kind == "gemm" for o in ops),
                             "issued_top": issued.most_common(8)}
        out["profile"][st] = events
    out["step_host_s"], out["step_s"] = host_and_full(step.whole, device, reps)
    out["traced_ops"] = len(traced.ops)
    return out


def plan_case(label: str, workload, plan_path: Path, spec_path: Path, device: torch.device, reps: int) -> dict:
    """A whole planned step (placer's runner): host time at return, full time, device kernels, syncs, top ops."""
    from placer.plan import load_plan
    from placer.runner.run import prepare
    from placer.runner.trainer import Trainer
    from placer.specs import load_hardware

    topo, wl, plan, predicted = prepare(load_hardware(spec_path), workload, load_plan(plan_path))
    trainer = Trainer(plan, wl, device, topo, pool_batches=2)
    try:
        batch = trainer.pool[0]
        for _ in range(3):
            trainer.step(batch)
        host, full = host_and_full(lambda: trainer.step(batch), device, reps)
        events = profile_events(lambda: trainer.step(batch), device)
    finally:
        trainer.close()
    return {"case": label, "plan": plan_path.name, "predicted_step_s": predicted["step_time_s"],
            "step_host_s": host, "step_s": full, **events}


def synthetic_cases(tiny: bool):
    from placer.calibrate import dense as cal_dense

    sizes = (64, 256) if tiny else (2048, 16384)
    out = []
    for make in (cal_dense.dot_sgd, cal_dense.dcnv2_adagrad, cal_dense.concat_adam):
        for dtype in ("fp32", "bf16"):
            for b in sizes[:1] if make is cal_dense.concat_adam else sizes:
                wl = make(b)
                wl = wl.model_copy(update={"dense": wl.dense.model_copy(update={"dtype": dtype})})
                out.append((f"{wl.name} {dtype} @{b}", wl, b))
    return out


def campaign_cases(tiny: bool):
    """(label, workload file, ILP plan file) of the campaign's workloads (validation/gpu_plans)."""
    plans = ROOT / "validation" / "gpu_plans"
    manifest = json.loads((plans / "manifest.json").read_text())
    out = []
    for w in manifest["workloads"][:1 if tiny else None]:
        ilp = [p for p in w["plans"] if p["name"] == "ilp"]
        if ilp:
            out.append((w["name"], ROOT / w["file"], ROOT / ilp[0]["file"]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (the dry run on a CPU)")
    ap.add_argument("--spec", default=str(ROOT / "hardware_specs" / "h100-sxm-host.yaml"),
                    help="the spec the plans are priced on")
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=None, help="stop starting new cases after this time")
    args = ap.parse_args(argv)
    from placer.specs import load_workload

    device = torch.device(args.device)
    reps = 3 if args.tiny else 15
    deadline = args.deadline or time.time() + 3600
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "dense": [], "plans": [], "errors": []}
    out = Path(args.out)

    def save():
        out.write_text(json.dumps(result, indent=1, default=float) + "\n")

    todo = [("dense", label, wl, b) for label, wl, b in synthetic_cases(args.tiny)]
    for label, wl_file, plan_file in campaign_cases(args.tiny):
        wl = load_workload(wl_file)
        todo.append(("dense", label, wl, wl.batch_size))
        todo.append(("plan", label, wl, plan_file))
    for kind, label, wl, extra in todo:
        if time.time() > deadline - 5:
            result["errors"].append(f"{kind} {label}: skipped, out of time")
            continue
        t0 = time.perf_counter()
        try:
            if kind == "dense":
                row = dense_case(label, wl, extra, device, reps)
                result["dense"].append(row)
                st = row["stages"]
                print(f"dense {label:40} step {row['step_s'] * 1e3:7.3f} ms host {row['step_host_s'] * 1e3:7.3f} | "
                      + " ".join(f"{s} {st[s]['host_s'] * 1e3:.2f}/{st[s]['full_s'] * 1e3:.2f} ms "
                                 f"{st[s]['issued_aten']}/{st[s]['traced_ops']} ops" for s in STAGES), flush=True)
            else:
                row = plan_case(label, wl, extra, Path(args.spec), device, reps)
                result["plans"].append(row)
                print(f"plan  {label:40} step {row['step_s'] * 1e3:7.3f} ms host {row['step_host_s'] * 1e3:7.3f} "
                      f"kernels {row['kernels']} ({row['kernel_s'] * 1e3:.3f} ms) syncs {row['syncs']}", flush=True)
        except Exception as exc:  # noqa: BLE001 - a failed case is recorded, the next one runs
            result["errors"].append(f"{kind} {label}: {type(exc).__name__}: {exc}")
            print(f"{kind} {label}: failed: {type(exc).__name__}: {exc}", flush=True)
        print(f"    ({time.perf_counter() - t0:.1f} s)", flush=True)
        save()
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
