"""Train a ``placer export --torchrec`` plan under TorchRec's DistributedModelParallel and print the measured
step time beside placer's prediction.

    placer solve HW WL -o plan.json
    placer export --torchrec HW WL plan.json -o plan.torchrec.json --names dlrm --module-path dlrm-train
    python examples/train_torchrec.py plan.torchrec.json HW WL --steps 20

The ranks are spawned on this machine (one node): NCCL on its GPUs for an export with --device cuda (the
default), gloo on CPU for --device cpu. Batches: the workload's global batch (--batch-size to change it) with ids
drawn from the workload's access models; the model: the export's EmbeddingBagConfigs at its module_path inside
the workload's dense model, the model placer's prediction prices: TorchRec's DLRM (or DLRM_DCN) where it can
express it, else (tables of different dims, a concat interaction, ...) placer's own DenseDLRM over the sharded
tables' pooled features; --head dlrm|placer|linear forces one, and the output says which ran and why
(placer/torchrec_io/dmp_models.py). Placer's prediction is for HW's
machine at the workload's batch: compare the two only when this machine is HW and the batch is the workload's.
Needs torchrec.
"""
from __future__ import annotations

import argparse
import json
import sys


def predicted_step_s(doc: dict, hw: str, wl_path: str) -> tuple[float, str]:
    """Placer's step time (seconds) of what TorchRec runs and where it comes from: the export's own prediction
    when HW and WL are the files it was made from (sha256), else the export imported and priced on HW and WL."""
    from placer.plan_price import priced_plan
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology
    from placer.torchrec_io.importer import plan_from_document

    wl = load_workload(wl_path)
    topo = Topology(load_hardware(hw), wl.dense.dtype)
    src = doc.get("source") or {}
    same = ((src.get("hardware") or {}).get("sha256") == topo.spec.sha256
            and (src.get("workload") or {}).get("sha256") == wl.sha256)
    if same and "predicted" in doc:
        return doc["predicted"]["mapped_step_time_s"], "the export's"
    plan = plan_from_document(doc, topo, wl, file="export")
    return priced_plan(plan, topo, wl, check_hashes=False)["step_time_s"], "priced on HW, WL"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("export", help="the export JSON (placer export --torchrec ... -o OUT.json)")
    p.add_argument("hardware", metavar="HW", help="the hardware spec the plan was made for (the prediction)")
    p.add_argument("workload", metavar="WL", help="the workload spec (tables, batch, access models)")
    p.add_argument("--steps", type=int, default=10, help="timed training steps (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    p.add_argument("--batch-size", type=int, default=None, help="global batch (default the workload's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--head", choices=["auto", "dlrm", "placer", "linear"], default="auto",
                   help="auto (default): TorchRec's DLRM of the workload's dense MLPs and interaction where it can "
                        "express them, else placer's DenseDLRM; dlrm: TorchRec's DLRM (exit 2 where it cannot); "
                        "placer: placer's DenseDLRM; linear: the tables and a linear head")
    p.add_argument("--json", action="store_true", help="print the result as JSON (trainer's numbers, seconds, "
                                                       "the model it trained, and placer's prediction) instead of "
                                                       "the table")
    args = p.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")

    from placer.errors import PlacerError
    from placer.specs import load_workload
    from placer.torchrec_io.dmp_models import describe
    from placer.torchrec_io.dmp_train import train

    try:
        with open(args.export, encoding="utf-8") as f:
            doc = json.load(f)
        if "embedding_bag_configs" not in doc:
            raise ValueError(f"{args.export}: no embedding_bag_configs; export it again with this placer")
        wl = load_workload(args.workload)
        predicted, how = predicted_step_s(doc, args.hardware, args.workload)
        res = train(doc, wl, steps=args.steps, warmup=args.warmup, batch_size=args.batch_size, seed=args.seed,
                    head=args.head)
    except (PlacerError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**res, "predicted_step_s": predicted, "predicted_from": how}))
        return 0
    print(f"{res['world_size']} ranks ({res['backend']}), global batch {res['batch_size']}, {len(res['step_times_s'])} "
          f"timed steps after {args.warmup} warm-up; loss {res['losses'][0]:.4f} -> {res['losses'][-1]:.4f}")
    print(describe(res["dense_model"]))
    rows = [("measured median step (this machine)", res["median_step_s"]),
            ("measured fastest step", min(res["step_times_s"])),
            (f"placer predicted step ({doc.get('source', {}).get('hardware', {}).get('name', 'HW')}, "
             f"batch {wl.batch_size}; {how})", predicted)]
    width = max(len(r[0]) for r in rows)
    for label, s in rows:
        print(f"  {label:<{width}}  {s * 1e3:10.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
