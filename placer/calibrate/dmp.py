"""DistributedModelParallel's own cost per step, fitted on SYNTHETIC DMP steps (``placer calibrate --trainer
torchrec --nproc N``): ``op_costs.torchrec.fixed_us.dmp_step``, the part of ``input_dist`` its defaults miss, and
``dmp_GBps.pooled``.

Beyond its kernels and collectives, a DMP step runs TorchRec's Python: the DDP wrapper, the KeyedJaggedTensor's
permutes and splits, the awaitables of every sharding type's input and output distribution, and the KeyedTensors of
the pooled embeddings joined and split forward and backward. placer prices the kernels (program/tbe_costs.py) and
the bytes; this fits what is left, on three synthetic models trained under DMP on the N ranks:

- A: TABLES tiny tables (ROWS x DIM), a tiny dense part, BATCH_PER_RANK samples per rank, every table table-wise
  (one sharding type per rank); B: A with half of them row-wise (two); C: A's plan with LARGE_TABLES tables of
  LARGE_DIM columns and LARGE_BATCH_PER_RANK samples per rank (pooled embeddings 256 x A's), all run in ROUNDS
  interleaved rounds of fresh rank processes;
- r = DMP's median step - placer's price of it under the torchrec trainer (the spec as calibrated so far);
- r_A = S + K, r_B = S + 2 K, r_C - r_A = (P_C - P_A) / G: ``dmp_step`` = S (per step, every rank),
  ``input_dist`` = its default + K (per sharding type and rank), ``dmp_GBps.pooled`` = G (P: a model's pooled
  embedding bytes per rank, fp32), each at least 0 (G none where C's residual is not above A's). C's residual also
  holds any miss of placer's dense price at its batch: what G stands for is all that grows with the pooled bytes.

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
LARGE_TABLES, LARGE_DIM, LARGE_BATCH_PER_RANK = 8, 64, 2048  # model C: pooled embeddings 4 MiB per rank
STEPS, WARMUP = 20, 5
ROUNDS = 3  # interleaved runs of each model: the median run


def synthetic_workload(ranks: int, tables: int = TABLES, dim: int = DIM, batch_per_rank: int = BATCH_PER_RANK):
    """A synthetic model: ``tables`` one-hot tables of ROWS x ``dim``, a concat interaction over a 16-wide bottom
    MLP, ``batch_per_rank`` samples per rank."""
    from placer.specs.workload import Workload

    return Workload.model_validate({
        "name": "dmp-synthetic", "batch_size": batch_per_rank * ranks, "optimizer": {"name": "sgd", "lr": 0.01},
        "trainer": "torchrec",
        "tables": [{"name": f"t{i}", "rows": ROWS, "dim": dim, "access": {"kind": "uniform"}} for i in range(tables)],
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


def _models(topo, ranks: int) -> dict[str, tuple]:
    """The three synthetic models by name: (workload, plan)."""
    wl = synthetic_workload(ranks)
    large = synthetic_workload(ranks, LARGE_TABLES, LARGE_DIM, LARGE_BATCH_PER_RANK)
    out = {n: (wl, p) for n, p in synthetic_plans(topo, wl).items()}
    out["large batch"] = (large, synthetic_plans(topo, large)["one sharding type"])
    return out


def fit(cal: Calibration, spec_yaml: str, ranks: int) -> None:
    """Fit ``dmp_step``, ``input_dist`` and ``dmp_GBps.pooled`` (module docstring) into ``cal.device_costs``;
    ``spec_yaml``: the spec as calibrated so far (to_yaml), which prices the synthetic steps."""
    try:
        from placer.cost import CostModel
        from placer.program.tbe_costs import tbe_costs
        from placer.simulate import predict
        from placer.specs import load_hardware
        from placer.topology import Topology
        from placer.torchrec_io.dmp_train import train
        from placer.torchrec_io.exporter import export_document

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "spec.yaml"
            path.write_text(spec_yaml)
            topo = Topology(load_hardware(path, allow_implausible=True))
        models = _models(topo, ranks)
        wl0 = models["one sharding type"][0]
        default = tbe_costs(topo, topo.gpus[0], wl0.optimizer.name).fixed("input_dist") * 1e6  # us, as priced now
        residual, said, pooled = {}, [], {}
        docs = {n: export_document(p, topo, w, device="cpu", price_each=False) for n, (w, p) in models.items()}
        runs: dict[str, list[float]] = {n: [] for n in models}
        for _ in range(ROUNDS):  # interleaved: A B C A B C ..., fresh ranks each run
            for n, doc in docs.items():
                runs[n].append(train(doc, models[n][0], steps=STEPS, warmup=WARMUP, head="placer")["median_step_s"])
        for name, (w, plan) in models.items():
            model = CostModel(topo, w)
            measured = statistics.median(runs[name])
            priced = predict(model, plan, check_memory=False)["step_time_s"]
            residual[name] = measured - priced
            pooled[name] = model.builder.pooled_bytes_per_rank()
            shown = ", ".join(f"{x * 1e3:.2f}" for x in runs[name])
            said.append(f"{name}: DMP {measured * 1e3:.3f} ms (runs {shown}), priced {priced * 1e3:.3f} ms")
    except Exception as exc:  # noqa: BLE001 - a calibration must not fail for an optional fit
        cal.notes.append(f"torchrec: DMP's own step cost not fitted ({type(exc).__name__}: {str(exc)[:200]}): "
                         "dmp_step 0 and input_dist's default apply")
        return
    _record(cal, residual, pooled, said, default, ranks)


def _record(cal: Calibration, residual: dict, pooled: dict, said: list[str], default: float, ranks: int) -> None:
    """The fitted numbers from the models' residuals (seconds) and pooled bytes per rank, with their sources."""
    k = max(0.0, residual["two sharding types"] - residual["one sharding type"])
    s = max(0.0, residual["one sharding type"] - k)
    how = (f"synthetic DMP steps on {ranks} gloo ranks (A: {TABLES} tables of {ROWS} x {DIM}, {BATCH_PER_RANK} "
           f"samples per rank; C: {LARGE_TABLES} of {ROWS} x {LARGE_DIM}, {LARGE_BATCH_PER_RANK}; the median of "
           f"{ROUNDS} interleaved runs' medians of {STEPS} steps) less placer's price: " + "; ".join(said)
           + " (calibrate/dmp.py)")
    base = cal.device_costs.torchrec_fixed_us
    base["dmp_step"] = Entry(s * 1e6, "per step: " + how)
    base["input_dist"] = Entry(default + k * 1e6, f"per sharding type: its default ({default:.4g} us: two "
                                                  "collectives) + the residual each sharding type adds: " + how)
    extra = residual["large batch"] - residual["one sharding type"]
    grown = pooled["large batch"] - pooled["one sharding type"]
    if extra > 0 and grown > 0:
        cal.device_costs.torchrec_dmp_GBps["pooled"] = Entry(
            grown / extra / 1e9, f"per pooled-embedding byte of a rank ({grown / 2**20:.3g} MiB more in C than in "
                                 f"A, {extra * 1e3:.3f} ms more left unpriced): " + how)
    else:
        cal.notes.append(f"torchrec: the large-batch synthetic DMP step left no more unpriced than the small one "
                         f"({extra * 1e3:.3f} ms): dmp_GBps.pooled not fitted")
