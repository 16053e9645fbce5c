"""The solve as a declared pipeline over one state (solve_run.py), alternatives as a portfolio (portfolio.py), and
the device and link kinds as one registry (specs/kinds.py)."""
from __future__ import annotations

import typing
from pathlib import Path

import pytest

from placer.planner import portfolio, single_stage, two_stage_solve
from placer.planner.budget import Budget
from placer.planner.schedule import SCHEDULE
from placer.planner.solve import SolveConfig, solve
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parents[1]


def test_a_portfolio_hands_each_search_its_share_of_what_is_left():
    said = []
    entries = [portfolio.Entry("a", lambda s: ("a", s)), portfolio.Entry("base", lambda s: ("base", s), False),
               portfolio.Entry("b", lambda s: ("b", s))]
    got = [answer for _, _, answer in portfolio.run(entries, lambda n: said.append(n) or 10.0 * n)]
    assert got == [("a", 20.0), ("base", None), ("b", 10.0)]  # two searches left, then one; a baseline gets None
    assert said == [2, 1]


def test_a_portfolio_runs_lazily_so_a_caller_may_stop_early():
    ran = []
    entries = [portfolio.Entry(str(i), lambda s, i=i: ran.append(i) or i) for i in range(4)]
    for _, _, answer in portfolio.run(entries, lambda n: 1.0):
        if answer == 1:
            break
    assert ran == [0, 1]


def test_the_two_stage_passes_split_as_the_schedule_says():
    budget = Budget(100.0)
    whole = SCHEDULE.two_stage_s(budget, 5.0)
    assert SCHEDULE.two_stage_pass_s(budget, 5.0, 2) == pytest.approx(whole * SCHEDULE.node_local_share, rel=1e-3)
    assert SCHEDULE.two_stage_pass_s(budget, 5.0, 1) == pytest.approx(whole, rel=1e-3)
    assert SCHEDULE.sweep_count_s(30.0) == 30.0


def test_the_pipelines_are_declared_in_order():
    assert [name for name, _ in single_stage.PIPELINE] == [
        "least work", "two stages", "options' time", "options and baselines", "branch and bound", "tie-break",
        "plan"]
    assert [name for name, _ in two_stage_solve.PIPELINE] == [
        "model", "no time for the stages", "stages and baselines", "stages again", "choose", "tie-break", "plan"]


def _tiny(hw: str = "pcie-4gpu-workstation"):
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    return Topology(load_hardware(ROOT / "hardware_specs" / f"{hw}.yaml"), wl.dense.dtype), wl


def test_a_new_step_is_a_function_and_its_entry(monkeypatch):
    """The recipe of docs/design.md: a step reads the run's state after the steps before it."""
    seen = {}

    def look(run):
        seen["options"] = sum(len(v) for v in run.options.values())
        seen["warm"] = run.best[2] if run.best else None

    steps = list(single_stage.PIPELINE)
    steps.insert([n for n, _ in steps].index("branch and bound"), ("look", look))
    monkeypatch.setattr(single_stage, "PIPELINE", tuple(steps))
    topo, wl = _tiny()
    plan = solve(topo, wl, SolveConfig(work_limit=500))
    assert plan.method == "ilp" and seen["options"] > len(wl.tables) and seen["warm"] is not None


def test_a_step_may_end_the_run_with_its_plan(monkeypatch):
    """A step that returns a plan ends the run there: the steps after it do not run."""
    from placer.planner.solve_run import cheapest_plan

    def after(run):
        raise AssertionError("a step after the plan ran")

    monkeypatch.setattr(single_stage, "PIPELINE", (("cheapest", lambda run: cheapest_plan(run, "a test")),
                                                   ("never", after)))
    topo, wl = _tiny()
    plan = solve(topo, wl, SolveConfig(work_limit=500))
    assert "plan from greedy_size: a test" in plan.solver.note


# ---- the kinds of device and link


def test_every_declared_kind_is_registered():
    from placer.program.opcosts import OP_COSTS_OF_KIND
    from placer.specs.hardware import LinkSpec
    from placer.specs.kinds import DEVICE_KINDS, LINK_KINDS

    assert set(typing.get_args(LinkSpec.model_fields["kind"].annotation)) == set(LINK_KINDS)
    assert set(OP_COSTS_OF_KIND) == {k for k, v in DEVICE_KINDS.items() if v.runs_ops}
    for spec in sorted((ROOT / "hardware_specs").glob("*.yaml")) + [ROOT / "tests" / "data" / "workstation-cxl.yaml"]:
        hw = load_hardware(spec, allow_implausible=True)
        for t in hw.templates.values():
            assert set(t.device_kinds.values()) <= set(DEVICE_KINDS), spec.name
            assert {link.kind for link in t.links} <= set(LINK_KINDS), spec.name


def test_op_costs_come_from_the_device_kind():
    """A GPU runs the GPU costs, a host the host costs (a unified node's host its "GPUs'")."""
    from placer.program.opcosts import gpu_op_costs, host_op_costs

    topo, _ = _tiny()
    gpu, host = topo.gpus[0], topo.hosts[0]
    t = topo.template_of[gpu]

    def rates(costs):  # the streaming and host-read rates, bytes/s, per size
        return costs.stream.rates, costs.host_gather["fp32"].rates

    assert rates(topo.op_costs(gpu)) == rates(gpu_op_costs(t.gpus, topo.bottleneck_bw(host, gpu)))
    assert rates(topo.op_costs(host)) == rates(host_op_costs(t.host))
    assert rates(topo.op_costs(gpu)) != rates(topo.op_costs(host))


def test_an_unknown_link_kind_names_the_registered_ones(tmp_path):
    from placer.errors import SpecError

    text = (ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml").read_text()
    assert "kind: pcie" in text
    bad = tmp_path / "hw.yaml"
    bad.write_text(text.replace("kind: pcie", "kind: infinity-fabric", 1))
    with pytest.raises(SpecError) as err:
        load_hardware(bad)
    assert "nvlink" in str(err.value) and "pcie" in str(err.value) and "network" in str(err.value)
