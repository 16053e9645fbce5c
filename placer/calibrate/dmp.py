"""DistributedModelParallel's own cost per step, fitted on SYNTHETIC DMP steps (``placer calibrate --trainer
torchrec --nproc N``): ``op_costs.torchrec.fixed_us.dmp_step`` and the part of ``input_dist`` its defaults miss.

Beyond its kernels and collectives, a DMP step runs TorchRec's Python: the DDP wrapper, the KeyedJaggedTensor's
permutes and splits, the awaitables of every sharding type's input and output distribution. placer prices the
kernels (program/tbe_costs.py) and the bytes; this fits what is left, on two synthetic models that are all fixed
cost (TABLES tiny tables, a tiny dense part, BATCH_PER_RANK samples per rank), trained under DMP on the N ranks:

- A: every table table-wise (one sharding type per rank), B: half of them row-wise (two), run in ROUNDS
  interleaved rounds of fresh rank processes;
- r = DMP's median step - placer's price of it under the torchrec trainer (the spec as calibrated so far);
- r_A = S + K, r_B = S + 2 K: ``dmp_step`` = S (per step, every rank), ``input_dist`` = its default + K (per
  sharding type and rank), both at least 0.

Never fitted on a campaign's plans or the shipped workloads: these synthetic models only. Needs TorchRec; without
it (or where a run fails) the defaults stay and the notes say why.
"""
from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from placer.calibrate.record import Calibration, Entry

TABLES = 4  # tiny tables of the synthetic models
ROWS, DIM = 1000, 16
BATCH_PER_RANK = 64
STEPS, WARMUP = 20, 5
ROUNDS = 3  # interleaved runs of each model: the median run


def synthetic_workload(ranks: int):
    """The synthetic model: TABLES one-hot tables of ROWS x DIM, a concat interaction over a 16-wide bottom MLP."""
    from placer.specs.workload import Workload

    return Workload.model_validate({
        "name": "dmp-synthetic", "batch_size": BATCH_PER_RANK * ranks, "optimizer": {"name": "sgd", "lr": 0.01},
        "trainer": "torchrec",
        "tables": [{"name": f"t{i}", "rows": ROWS, "dim": DIM, "access": {"kind": "uniform"}} for i in range(TABLES)],
        "dense": {"num_dense_features": 4, "bottom_mlp": [16], "interaction": {"kind": "concat"}, "top_mlp": [16, 1],
                  "dtype": "fp32"}})


def synthetic_plans(topo, wl) -> dict[str, object]:
    """A: every table whole on rank i mod N; B: the same with every other table row-wise over all ranks."""
    from placer.forms import row_wise, table_wise
    from placer.plan import Plan, SpecRef

    gpus = list(topo.gpus)
    one = [table_wise.placement(t, gpus[i % len(gpus)], "fp32", t.rows) for i, t in enumerate(wl.tables)]
    two = [row_wise.placement(t, gpus, "fp32", 1.0) if i % 2 else p for i, (t, p) in enumerate(zip(wl.tables, one))]
    ref = lambda: dict(hardware=SpecRef(name=topo.spec.name), workload=SpecRef(name=wl.name), method="synthetic")
    return {"one sharding type": Plan(**ref(), placements=one), "two sharding types": Plan(**ref(), placements=two)}


def fit(cal: Calibration, spec_yaml: str, ranks: int) -> None:
    """Fit ``dmp_step`` and ``input_dist`` (module docstring) into ``cal.device_costs.torchrec_fixed_us``;
    ``spec_yaml``: the spec as calibrated so far (to_yaml), which prices the synthetic steps."""
    try:
        from placer.cost import CostModel
        from placer.simulate import predict
        from placer.specs import load_hardware
        from placer.topology import Topology
        from placer.torchrec_io.dmp_train import train
        from placer.torchrec_io.exporter import export_document

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "spec.yaml"
            path.write_text(spec_yaml)
            topo = Topology(load_hardware(path, allow_implausible=True))
        wl = synthetic_workload(ranks)
        from placer.program.tbe_costs import tbe_costs

        default = tbe_costs(topo, topo.gpus[0], wl.optimizer.name).fixed("input_dist") * 1e6  # us, as priced now
        residual, said = {}, []
        plans = synthetic_plans(topo, wl)
        docs = {n: export_document(p, topo, wl, device="cpu", price_each=False) for n, p in plans.items()}
        runs: dict[str, list[float]] = {n: [] for n in plans}
        for _ in range(ROUNDS):  # interleaved: A B A B ..., fresh ranks each run
            for n, doc in docs.items():
                runs[n].append(train(doc, wl, steps=STEPS, warmup=WARMUP, head="placer")["median_step_s"])
        for name, plan in plans.items():
            measured = statistics.median(runs[name])
            priced = predict(CostModel(topo, wl), plan, check_memory=False)["step_time_s"]
            residual[name] = measured - priced
            shown = ", ".join(f"{x * 1e3:.2f}" for x in runs[name])
            said.append(f"{name}: DMP {measured * 1e3:.3f} ms (runs {shown}), priced {priced * 1e3:.3f} ms")
    except Exception as exc:  # noqa: BLE001 - a calibration must not fail for an optional fit
        cal.notes.append(f"torchrec: DMP's own step cost not fitted ({type(exc).__name__}: {str(exc)[:200]}): "
                         "dmp_step 0 and input_dist's default apply")
        return
    k = max(0.0, residual["two sharding types"] - residual["one sharding type"])
    s = max(0.0, residual["one sharding type"] - k)
    how = (f"synthetic DMP steps on {ranks} gloo ranks ({TABLES} tables of {ROWS} x {DIM}, {BATCH_PER_RANK} samples "
           f"per rank, the median of {ROUNDS} interleaved runs' medians of {STEPS} steps) less placer's price: "
           + "; ".join(said) + " (calibrate/dmp.py)")
    base = cal.device_costs.torchrec_fixed_us
    base["dmp_step"] = Entry(s * 1e6, "per step: " + how)
    base["input_dist"] = Entry(default + k * 1e6, f"per sharding type: its default ({default:.4g} us: two "
                                                  "collectives) + the residual each sharding type adds: " + how)
