"""The step as CUDA graphs replay it (runner/graph_step.py), held on a CPU to the eager step's numbers and to the
graph contract: padded inputs picked by a device index, host-CPU groups eager beside the segments."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from placer.plan import Plan
from placer.runner import Trainer
from placer.runner.graph_guard import GraphSafe
from placer.runner.graph_step import GraphStep, why_not_capturable
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parent.parent
REFERENCE = json.loads((ROOT / "tests" / "data" / "reference-losses-ab4ea90.json").read_text())
HW4 = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"
CPU = torch.device("cpu")


def _no_replicas(plan: dict) -> dict:
    """The plan with each data-parallel table whole on its first replica's GPU (a replica's backward is eager)."""
    plan = copy.deepcopy(plan)
    for p in plan["placements"]:
        if p["sharding"] == "data_parallel":
            s = p["shards"][0]
            n = s["rows"][1] - s["rows"][0]
            p["sharding"], p["shards"] = "table_wise", [dict(s, hbm_rows=n, host_rows=0)]
    return plan


def _setup(case, tmp_path):
    path = tmp_path / "wl.yaml"
    path.write_text(case["workload"])
    return load_workload(path), Topology(load_hardware(HW4))


def _dense_step_counts(tr: Trainer) -> list[torch.Tensor]:
    """torch's Adagrad keeps its step counts on the host on a GPU run too: reading them synchronises nothing."""
    return [st["step"] for st in tr.dense_opt.state.values() if "step" in st]


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: f"{c['optimizer']}-{len(c['plan']['placements'])}-"
                         f"{'mixed' if any(p['sharding'] == 'row_wise' for p in c['plan']['placements']) else 'one'}")
def test_graph_step_trains_as_the_eager_step(case, tmp_path):
    """Row-wise shards with hot (hbm) / cold (uvm) splits, column-wise pieces, a host table looked up by the CPU,
    fp16 rows, a table with two features, per optimizer: 2 warm-up steps and 3 more through the segments give the
    eager step's losses and rows (to the order of fp32 sums); one more step under the strict guard commits no breach."""
    wl, topo = _setup(case, tmp_path)
    plan = Plan.model_validate(_no_replicas(case["plan"]))
    steps = 5
    ref = Trainer(plan, wl, CPU, topo, seed=case["seed"], pool_batches=3)
    tr = Trainer(plan, wl, CPU, topo, seed=case["seed"], pool_batches=3, graph_safe=True)
    try:
        ref.train(steps)
        gs = GraphStep(tr, capacity=steps)
        gs.capture(warmup=2)
        assert not gs.captured and "CUDA" in gs.not_captured_why
        gs.train(steps - 2)
        np.testing.assert_allclose(gs.losses(), ref.loss_history(), rtol=1e-4, atol=1e-7)
        for t in wl.tables:
            torch.testing.assert_close(tr.table_weights(t.name), ref.table_weights(t.name), rtol=1e-4, atol=2e-5)
        assert [k.location for k in gs.eager_keys] == ["cpu"]
        with GraphSafe(host_values=_dense_step_counts(tr)):
            gs._segment_a()
            gs._segment_b()
        assert gs.losses()[-1] > 0  # the guarded step ran and logged its loss (the log is cyclic)
    finally:
        ref.close()
        tr.close()


def test_replicas_keep_the_step_off_a_graph(tmp_path):
    """A data-parallel table's replicas have no graph-safe backward: the step is not captured, and why names them."""
    case = next(c for c in REFERENCE["cases"] if any(p["sharding"] == "data_parallel" for p in c["plan"]["placements"]))
    wl, topo = _setup(case, tmp_path)
    tr = Trainer(Plan.model_validate(case["plan"]), wl, CPU, topo, seed=case["seed"], pool_batches=1, graph_safe=True)
    try:
        why = why_not_capturable(tr.groups, CPU)
        assert why and "replica" in why
        with pytest.raises(ValueError, match="replica"):
            GraphStep(tr, capacity=1)
    finally:
        tr.close()


def test_static_inputs_pad_into_a_scratch_bag(tmp_path):
    """Every device group's picked inputs have one shape across the pool: the padding looks up the scratch row
    (index ``rows``) into the extra bag (index ``bags``), which starts after the batch's own lookups."""
    case = REFERENCE["cases"][1]
    wl, topo = _setup(case, tmp_path)
    tr = Trainer(Plan.model_validate(case["plan"]), wl, CPU, topo, seed=case["seed"], pool_batches=3, graph_safe=True)
    try:
        gs = GraphStep(tr, capacity=1)
        for i in range(3):
            batch = gs.inputs.pick()
            for k, inp in batch.groups.items():
                g, own = tr.groups[k], tr.pool[i].groups[k]
                n = own.ids.numel()
                assert inp.ids.shape == gs.inputs.ids[k].shape[1:] and inp.offsets.numel() == g.bags + 1
                assert torch.equal(inp.ids[:n], own.ids) and bool((inp.ids[n:] == g.rows).all())
                assert bool((inp.bags[n:] == g.bags).all()) and int(inp.offsets[-1]) == n
        assert int(gs.inputs.index) == 3
    finally:
        tr.close()
