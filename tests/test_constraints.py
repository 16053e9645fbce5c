"""A workload's constraints (specs/constraints.py, placer/constraints.py): read and checked, honoured by the ILP and
every baseline, refused in a plan that breaks them, and a set no plan meets exits 3 naming the conflict."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from placer.cli import main
from placer.constraints import Rules, device_set, memory_class
from placer.cost import CostModel
from placer.errors import InfeasibleError, SpecError
from placer.planner.baselines import BASELINES, run_baseline
from placer.planner.solve import SolveConfig, solve
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
HW = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"
TINY = (ROOT / "workloads" / "tiny.yaml").read_text()

#: one of each kind of constraint, on tiny's tables
EVERY_KIND = {"hbm_headroom_GiB": 1, "tables": [
    {"tables": ["t_users"], "shardings": ["row_wise"], "min_shards": 2},
    {"name": "pair", "tables": ["t_items", "t_ads"], "colocate": True},
    {"tables": ["t_geo"], "devices": ["gpu3"]},
    {"tables": ["t_hist"], "memory": ["uvm", "host"]},
    {"tables": ["t_shared"], "precisions": ["fp32"], "max_shards": 1}]}


def _workload(tmp_path: Path, constraints: dict, name: str = "w") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(TINY.replace("name: tiny\n", f"name: tiny-{name}\n", 1)
                    + "\n" + yaml.safe_dump({"constraints": constraints}, sort_keys=False))
    return path


def _model(path: Path) -> CostModel:
    wl = load_workload(path)
    return CostModel(Topology(load_hardware(HW), wl.dense.dtype), wl)


def _held(model: CostModel, placements) -> None:
    assert model.rules.plan_faults(placements) == []


def test_the_ilp_holds_every_kind_of_constraint(tmp_path):
    model = _model(_workload(tmp_path, EVERY_KIND))
    plan = solve(model.topo, model.wl, SolveConfig(work_limit=3000))
    _held(model, plan.placements)
    by = {p.table: p for p in plan.placements}
    assert by["t_users"].sharding == "row_wise" and len(by["t_users"].shards) >= 2
    assert device_set(by["t_items"]) == device_set(by["t_ads"])
    assert device_set(by["t_geo"]) == {"node0/gpu3"}
    assert memory_class(by["t_hist"]) in ("uvm", "host")
    # and without them, the same solve places some of these tables otherwise: the constraints steered it
    free = solve(model.topo, load_workload(ROOT / "workloads" / "tiny.yaml"), SolveConfig(work_limit=3000))
    assert Rules.of(model.wl, model.topo).plan_faults(free.placements)


@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_holds_them(tmp_path, name):
    model = _model(_workload(tmp_path, EVERY_KIND))
    _held(model, run_baseline(name, model))


def test_headroom_is_kept_free_on_every_gpu(tmp_path):
    """HBM headroom comes off every GPU's usable HBM: a headroom that leaves less than the tables need moves them
    off HBM (or fails), and the predicted HBM use stays under capacity - reserve - headroom."""
    model = _model(_workload(tmp_path, {"hbm_headroom_GiB": 10}))
    plain = _model(ROOT / "workloads" / "tiny.yaml")
    for gpu in model.topo.gpus:
        assert plain.usable_memory[gpu] - model.usable_memory[gpu] == pytest.approx(10 * 2**30)
        assert model.usable_memory[model.topo.hosts[0]] == plain.usable_memory[model.topo.hosts[0]]


def test_a_plan_that_breaks_a_constraint_is_refused_naming_it(tmp_path, capsys):
    free = tmp_path / "free.json"
    assert main(["solve", str(HW), str(ROOT / "workloads" / "tiny.yaml"), "--work-limit", "2000",
                 "--out", str(free)]) == 0
    strict = _workload(tmp_path, {"tables": [{"tables": ["t_*"], "memory": ["host"]}]}, "hostonly")
    capsys.readouterr()
    assert main(["check", str(free), "--hardware", str(HW), "--workload", str(strict)]) == 2
    err = capsys.readouterr().err
    assert "breaks the workload's constraints" in err and "constraints.tables[0]" in err and "placements[" in err


def test_a_co_location_broken_is_named(tmp_path):
    free = _model(ROOT / "workloads" / "tiny.yaml")
    plan = solve(free.topo, free.wl, SolveConfig(work_limit=2000))
    a, b = next((p, q) for p in plan.placements for q in plan.placements if device_set(p) != device_set(q))
    model = _model(_workload(tmp_path, {"tables": [{"name": "pair", "tables": [a.table, b.table],
                                                    "colocate": True}]}))
    faults = model.rules.plan_faults(plan.placements)
    assert faults and faults[-1][0] is None and "constraints.tables[0] (pair): co-located" in faults[-1][1]


@pytest.mark.parametrize("constraints, words", [
    ({"tables": [{"tables": ["t_users"], "shardings": ["host"]}, {"tables": ["t_*"], "memory": ["hbm"]}]},
     "constraints.tables[0] (shardings host) and constraints.tables[1] (memory hbm) together allow none"),
    ({"tables": [{"tables": ["t_geo"], "shardings": ["row_wise"], "max_shards": 1}]},
     "constraints.tables[0] allows none of the"),
    ({"tables": [{"tables": ["t_users"], "min_shards": 64}]}, "constraints.tables[0] allows none"),
    ({"tables": [{"tables": ["t_users"], "devices": ["gpu0"]}, {"tables": ["t_users", "t_items"], "colocate": True},
                 {"tables": ["t_items"], "devices": ["gpu1"]}]}, "share no device set"),
])
def test_constraints_no_plan_meets_exit_3_naming_them(tmp_path, capsys, constraints, words):
    path = _workload(tmp_path, constraints)
    assert main(["solve", str(HW), str(path), "--work-limit", "2000"]) == 3
    assert words in capsys.readouterr().err


@pytest.mark.parametrize("constraints, field", [
    ({"tables": [{"tables": ["nope"], "memory": ["hbm"]}]}, "constraints.tables[0].tables[0]"),
    ({"tables": [{"tables": ["t_users"], "memory": ["vram"]}]}, "constraints.tables[0].memory[0]"),
    ({"tables": [{"tables": ["t_users"], "min_shards": 4, "max_shards": 2}]},
     "constraints.tables[0]: min_shards 4 is above"),
    ({"tables": [{"tables": ["t_users"], "colocate": True}]}, "constraints.tables[0].colocate"),
    ({"hbm_headroom_GiB": -1}, "constraints.hbm_headroom_GiB"),
])
def test_bad_constraints_name_the_field(tmp_path, constraints, field):
    with pytest.raises(SpecError) as err:
        load_workload(_workload(tmp_path, constraints))
    assert field in str(err.value)


def test_a_device_that_the_machine_lacks_is_named(tmp_path):
    model_path = _workload(tmp_path, {"tables": [{"tables": ["t_geo"], "devices": ["gpu9"]}]})
    wl = load_workload(model_path)
    with pytest.raises(SpecError) as err:
        Rules.of(wl, Topology(load_hardware(HW), wl.dense.dtype))
    assert "constraints.tables[0].devices[0]" in str(err.value) and "gpu9" in str(err.value)


def test_pinned_tables_on_a_large_machine_are_planned_in_one_stage(tmp_path):
    """The two-stage planner treats every GPU of a class alike: pinned or co-located tables go to the single-stage
    ILP, which holds them."""
    text = TINY.replace("name: tiny\n", "name: tiny-pinned\n", 1) + "\n" + yaml.safe_dump(
        {"constraints": {"tables": [{"tables": ["t_users"], "devices": ["node1/gpu5"]}]}})
    path = tmp_path / "pinned.yaml"
    path.write_text(text)
    wl = load_workload(path)
    topo = Topology(load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml"), wl.dense.dtype)
    plan = solve(topo, wl, SolveConfig(work_limit=3000))
    assert "two-stage" not in plan.solver.backend
    assert {s.device for p in plan.placements if p.table == "t_users" for s in p.shards} == {"node1/gpu5"}


def test_infeasible_is_not_raised_for_an_unconstrained_workload():
    model = _model(ROOT / "workloads" / "tiny.yaml")
    assert model.rules.empty
    try:
        from placer.planner.constrained import check_menus

        check_menus(model)
    except InfeasibleError:  # pragma: no cover - the point of the test
        pytest.fail("an unconstrained workload has no constraint conflict")


def test_explain_names_the_constraints_that_bind_and_their_cost(tmp_path, capsys):
    """A constraint that forbids a faster placement binds, with the step without it; one that forbids nothing
    faster does not; no alternative explain offers breaks a co-location."""
    from placer.explain import Explainer, explain_plan

    model = _model(_workload(tmp_path, EVERY_KIND))
    plan = solve(model.topo, model.wl, SolveConfig(work_limit=3000))
    got = explain_plan(model, plan, [p.table for p in plan.placements])
    rows = {r["constraint"]: r for r in got["constraints"]}
    assert set(rows) == {f"constraints.tables[{i}]" for i in (0, 2, 3, 4)} | {
        "constraints.tables[1] (pair)", "constraints.hbm_headroom_GiB"}
    users = rows["constraints.tables[0]"]  # row-wise only, at least 2 shards: tiny's ILP puts t_users elsewhere
    assert users["binds"] and users["table"] == "t_users" and users["cost_s"] > 0
    assert users["step_time_without_s"] == pytest.approx(got["step_time_s"] - users["cost_s"])
    assert not rows["constraints.hbm_headroom_GiB"]["binds"]  # 1 GiB of 80: nothing tiny needs
    ex = Explainer(model, plan)
    for name in ("t_items", "t_ads"):
        alt = ex.explain(name).next_best
        if alt is not None:
            q = type(plan.placements[0]).model_validate(alt.placement)
            assert model.rules.keeps_groups(name, device_set(q), ex.placed)
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    assert main(["explain", str(HW), str(_workload(tmp_path, EVERY_KIND)), str(path)]) == 0
    assert "constraints.tables[0] binds: without it t_users" in capsys.readouterr().out


def test_a_memory_shortfall_under_constraints_names_them(tmp_path, capsys):
    """Every table of mlperf-dlrm-v1 held to HBM on one H100: no plan fits; the error names the constraint that
    narrowed the memories, and the headroom when it is what leaves no room."""
    text = (ROOT / "workloads" / "mlperf-dlrm-v1.yaml").read_text()
    path = tmp_path / "v1.yaml"
    path.write_text(text + "\nconstraints:\n  tables:\n    - {tables: [\"*\"], memory: [hbm]}\n")
    hw = ROOT / "hardware_specs" / "h100-pcie-host.yaml"
    assert main(["solve", str(hw), str(path), "--work-limit", "2000"]) == 3
    assert "constraints.tables[0] (memory hbm: 26 table(s))" in capsys.readouterr().err
    room = _workload(tmp_path, {"hbm_headroom_GiB": 79.5}, "room")
    assert main(["solve", str(HW), str(room), "--work-limit", "2000"]) == 3
    assert "less the workload's HBM headroom of 79.5 GiB" in capsys.readouterr().err


def test_found_by_the_random_sets(tmp_path, capsys):
    """validation/constraints_random.py's three findings: a device the machine lacks is refused (exit 2) before a
    baseline can fail on memory; a forced form that a constraint rules out is named; a baseline that runs out of
    GPU memory for a host table's buffers says which memory is short."""
    bad = _workload(tmp_path, {"tables": [{"tables": ["t_geo"], "devices": ["gpu9"]}]}, "gpu9")
    assert main(["solve", str(HW), str(bad), "--method", "host_cpu"]) == 2
    assert "constraints.tables[0].devices[0]" in capsys.readouterr().err
    qr = tmp_path / "qr.yaml"
    qr.write_text((ROOT / "workloads" / "mlperf-dlrm-v1-qr.yaml").read_text()
                  + "\nconstraints:\n  tables:\n    - {tables: [C1], min_shards: 2}\n")
    assert main(["solve", str(HW), str(qr), "--method", "qr", "--work-limit", "1000"]) == 3
    assert "--method qr holds it to qr, which its constraints do not allow" in capsys.readouterr().err
    v1 = tmp_path / "v1.yaml"
    v1.write_text((ROOT / "workloads" / "mlperf-dlrm-v1.yaml").read_text()
                  + "\nconstraints:\n  hbm_headroom_GiB: 15.2\n")
    assert main(["solve", str(ROOT / "hardware_specs" / "h100-pcie-host.yaml"), str(v1), "--method",
                 "greedy_size"]) == 3
    assert "more in node0/gpu0" in capsys.readouterr().err
