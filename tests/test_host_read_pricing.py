"""Price what runs: where the GPU cannot read host memory (the runner's cpu_gather_copy), a plan's host rows are
looked up by the host CPU, and the prediction prices that (CPU lookups and copies), not zero-copy reads."""
from __future__ import annotations

from pathlib import Path

import pytest

from placer.cost import CostModel
from placer.planner.solve import SolveConfig, solve
from placer.runner.run import RunConfig, run_plan
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def uvm_case():
    hw = load_hardware(ROOT / "hardware_specs" / "h100-pcie-host.yaml")
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    topo = Topology(hw, wl.dense.dtype)
    plan = solve(topo, wl, SolveConfig(method="uvm", time_limit_s=10))
    assert any(0 <= s.hbm_rows < s.num_rows for p in plan.placements for s in p.shards)  # rows in host memory
    return hw, wl, topo, plan


def test_host_rows_become_cpu_groups_and_are_priced_as_such(uvm_case):
    _, wl, topo, plan = uvm_case
    zero_copy, by_cpu = CostModel(topo, wl), CostModel(topo, wl, cpu_reads_host=True)
    keys = lambda model: {k.location for p in plan.placements for k, _ in model.builder.members(p)}
    assert "uvm" in keys(zero_copy) and "uvm" not in keys(by_cpu) and "cpu" in keys(by_cpu)
    a, b = predict(zero_copy, plan), predict(by_cpu, plan)
    assert a["step_time_s"] != b["step_time_s"]
    assert b["phases_s"]["forward_exchange"] > a["phases_s"]["forward_exchange"]  # the outputs' copies to the GPU


def test_the_run_prices_the_mechanism_that_ran(uvm_case):
    hw, wl, topo, plan = uvm_case
    config = dict(device="cpu", steps=2, warmup=1, phase_steps=1, threads=1)
    mapped = run_plan(hw, wl, plan, RunConfig(**config))  # a CPU run reads host rows in place ("cpu")
    copied = run_plan(hw, wl, plan, RunConfig(host_read="cpu_gather_copy", **config))
    assert mapped["host_read_mechanism"] == "cpu" and copied["host_read_mechanism"] == "cpu_gather_copy"
    assert "uva" in mapped["prediction_prices_host_reads_as"]
    assert "cpu_gather_copy" in copied["prediction_prices_host_reads_as"]
    assert copied["predicted"]["step_time_s"] == pytest.approx(
        predict(CostModel(topo, wl, cpu_reads_host=True), plan)["step_time_s"], rel=1e-12)
    assert mapped["predicted"]["step_time_s"] == pytest.approx(predict(CostModel(topo, wl), plan)["step_time_s"])
    assert mapped["measured"]["loss_first"] == pytest.approx(copied["measured"]["loss_first"], rel=1e-5)
