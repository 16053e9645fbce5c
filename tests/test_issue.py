"""A group's ops' host issue in a step (program/issue.py, calibrate/chain.py): the ATen op counts follow the
runner's kernels, fixed_us.embedding_op adds ATen ops x embedding_op to each group's fixed costs on a GPU (and
nothing where a spec lacks it), the chains of groups run and price as build.py prices their ops."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from placer.calibrate import chain
from placer.calibrate.record import Sample, price
from placer.cost import CostModel
from placer.plan import load_plan
from placer.program import issue
from placer.program.build import plan_ops
from placer.runner import kernels
from placer.runner.optim import NAMES, SparseRowOptimizer, state_shapes
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT

RUN3 = ROOT / "validation" / "results" / "gpu-2026-11-27-run3" / "calibrated.yaml"
PLANS = ROOT / "validation" / "gpu_plans"


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def aten(fn) -> int:
    with Count() as c:
        fn()
    return c.n


def test_aten_counts_follow_the_runner_kernels():
    L, c = 512, 8
    w, ids = torch.zeros(100, c), torch.randint(0, 100, (L,))
    offsets, bags = torch.arange(0, L, 4), torch.arange(L) // 4
    g, out = torch.rand(L // 4, c), torch.empty(L // 4, c)
    uniq, counts, sorted_bags = kernels.sort(ids, bags)
    summed = torch.rand(uniq.numel(), c)
    assert aten(lambda: kernels.lookup(w, ids, offsets)) == issue.aten_ops("lookup", "sgd")
    assert aten(lambda: kernels.pack_grad([g], out)) == issue.aten_ops("pack_grad", "sgd")
    assert aten(lambda: kernels.sort(ids, bags)) == issue.aten_ops("sort", "sgd")
    # the CUDA path of segment_reduce: the gradient rows gathered, then split_runs_sum
    assert aten(lambda: kernels.split_runs_sum(g.index_select(0, sorted_bags), counts)) == \
        issue.aten_ops("segment_reduce", "sgd")
    dense_grad = torch.zeros(100, c)
    assert aten(lambda: kernels.scatter(dense_grad, uniq, summed)) == issue.aten_ops("scatter", "sgd")
    for name in NAMES:
        o = SparseRowOptimizer(name, 0.01)
        o.new_step()
        states = [torch.zeros(s) for s in state_shapes(name, 100, c)]
        assert aten(lambda: o.update(w, states, uniq, summed)) == issue.aten_ops("update", name), name
        rows, grad = w.clone(), torch.rand(100, c)
        assert aten(lambda: o.update_dense(rows, states, grad)) == issue.aten_ops("update_dense", name), name


def _once_seconds(spec) -> tuple[float, int]:
    """(seconds of the tiny@4096 ilp plan's group fixed costs, ATen ops of its groups) on ``spec``."""
    wl = load_workload(PLANS / "workloads" / "tiny-at-4096.yaml")
    plan = load_plan(PLANS / "plans" / "tiny-at-4096" / "ilp.json")
    ops = plan_ops(CostModel(Topology(spec, wl.dense.dtype), wl).builder, plan.placements)
    once = [o for o in ops if o.once]
    return sum(o.seconds for o in once), sum(issue.aten_ops(o.kind, wl.optimizer.name) for o in once)


def test_embedding_op_adds_aten_ops_to_each_groups_fixed_costs(tmp_path):
    text = RUN3.read_text()
    assert "embedding_op" not in text  # run 3's calibrate did not measure it: priced as before
    before, n = _once_seconds(load_hardware(RUN3))
    assert n == 3 * issue.group_aten_ops("sgd")  # 3 groups, sgd
    spec = tmp_path / "with.yaml"
    line = "          embedding_op: 12.5  # test\n"
    spec.write_text(text.replace("          dense_op: ", line + "          dense_op: ", 1))
    after, _ = _once_seconds(load_hardware(spec))
    assert after - before == pytest.approx(n * 12.5e-6)


def test_chain_runs_and_prices_its_ops_plus_embedding_op():
    cpu = torch.device("cpu")
    assert chain.time_chain(2, cpu, reps=1) > 0
    spec = load_hardware(RUN3)
    costs = Topology(spec).op_costs(Topology(spec).gpus[0])
    parts = chain.chain_parts(2)
    assert [p["kind"] for p in parts[:5]] == ["lookup", "copy", "sort", "segment_reduce", "update"]
    ops = sum(price(Sample(p["kind"], p["sizes"], 0.0, ""), costs) for p in parts)
    whole = price(Sample("group_chain", {"groups": 2, "aten_ops": 62, "parts": parts}, 0.0, ""), costs)
    assert whole == pytest.approx(ops)  # this spec has no embedding_op: 0
