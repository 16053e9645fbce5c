"""The forced methods (placer/forms.py): solve --method qr / tt / node_local is the ILP with every table that
allows the form held to it; compare shows them beside the ILP where the workload allows them."""
from __future__ import annotations

import json

import pytest

from placer.cli import main
from placer.forms.storage import allowing, force, table_allows, uses
from placer.options import OptionConfig, table_options
from placer.plan import load_plan
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

HW = "hardware_specs/h100-pcie-host.yaml"
TABLES = [{"name": "big", "rows": 40_000, "dim": 32, "compression": {"qr": {"max_collisions": 4}}},
          {"name": "frozen", "rows": 5_000, "dim": 32, "frozen": True, "compression": {"int8": True}},
          {"name": "plain", "rows": 3_000, "dim": 32},
          {"name": "local", "rows": 2_000, "dim": 32, "node_local": True}]
WL = {"schema_version": 1, "name": "forms", "batch_size": 512, "optimizer": {"name": "sgd", "lr": 0.1},
      "tables": TABLES, "dense": {"bottom_mlp": [32], "top_mlp": [16, 1]}}


@pytest.fixture
def wl_path(tmp_path):
    path = tmp_path / "forms.yaml"
    path.write_text(json.dumps(WL))
    return str(path)


def test_which_tables_allow_which_form(wl_path):
    wl = load_workload(wl_path)
    t = {x.name: x for x in wl.tables}
    assert allowing(wl, "qr") == ["big"] and allowing(wl, "node_local") == ["local"] and allowing(wl, "tt") == []
    assert table_allows(t["frozen"], "int8") and not table_allows(t["big"], "int8")
    assert not any(table_allows(t["plain"], f) for f in ("qr", "tt", "int8", "node_local"))


def test_force_holds_a_table_to_its_form_and_leaves_the_others(wl_path):
    wl, topo = load_workload(wl_path), Topology(load_hardware(HW))
    t = {x.name: x for x in wl.tables}
    menu = table_options(t["big"], topo, wl)
    held = force(menu, t["big"], "qr")
    assert held and all(uses(p, "qr") for p in held) and len(held) < len(menu)
    assert table_options(t["big"], topo, wl, OptionConfig(forced_form="qr")) == held
    plain = table_options(t["plain"], topo, wl)
    assert force(plain, t["plain"], "qr") == plain  # it does not allow qr: every option stays
    assert force(table_options(t["local"], topo, wl), t["local"], "node_local")  # one node: no such option, all stay


def test_solve_method_qr_holds_every_allowing_table_and_the_ilp_is_no_slower(wl_path, tmp_path, capsys):
    forced, free = tmp_path / "qr.json", tmp_path / "ilp.json"
    assert main(["solve", HW, wl_path, "--method", "qr", "-o", str(forced), "--time-limit", "20"]) == 0
    assert main(["solve", HW, wl_path, "-o", str(free), "--time-limit", "20"]) == 0
    capsys.readouterr()
    plan, ilp = load_plan(str(forced)), load_plan(str(free))
    assert plan.method == "qr"
    assert [p.table for p in plan.placements if uses(p, "qr")] == ["big"]
    assert "forced qr: 1 of the 1 tables that allow it hold it" in plan.solver.note
    assert ilp.predicted["step_time_s"] <= plan.predicted["step_time_s"] * (1 + 1e-9)


def test_forced_methods_a_workload_does_not_allow_exit_2(capsys):
    assert main(["solve", HW, "workloads/tiny.yaml", "--method", "qr"]) == 2
    err = capsys.readouterr().err
    assert "--method" in err and "compression.qr" in err and "tiny" in err


@pytest.mark.parametrize("form", ["qr", "tt", "int8", "node_local"])
def test_a_form_no_table_allows_names_the_shipped_workloads_that_do(form, capsys):
    """Issue 52: exit 2 named no workload to try; now the shipped ones that allow the form, before any solve (solve,
    sweep; compare names --methods). The list is the files' (SHIPPED_ALLOWING, checked against workloads/)."""
    from placer.commands._common import SHIPPED_ALLOWING

    for argv, flag in ((["solve", HW, "workloads/mlperf-dlrm-v1.yaml", "--method", form], "--method"),
                       (["sweep", "hardware_specs/dgx-h100.yaml", "workloads/tiny.yaml", "--gpus", "8", "--method",
                         form], "--method"),
                       (["compare", HW, "workloads/tiny.yaml", "--methods", f"greedy_size,{form}"], "--methods")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"error: {flag}: no table of workload" in err and "Traceback" not in err
        assert "shipped workloads that allow it: " + ", ".join(f"workloads/{n}.yaml" for n in SHIPPED_ALLOWING[form]) \
            in err
        assert "greedy_size: step" not in err  # compare: refused before anything is solved


def test_shipped_allowing_is_what_the_workload_files_allow():
    from pathlib import Path

    from placer.commands._common import SHIPPED_ALLOWING
    from placer.forms.storage import FORCED_FORMS

    root = Path(__file__).resolve().parents[1]
    files = {p.stem: load_workload(p) for p in sorted((root / "workloads").glob("*.yaml"))}
    assert SHIPPED_ALLOWING == {f: tuple(n for n, wl in files.items() if allowing(wl, f)) for f in FORCED_FORMS}
    assert all(SHIPPED_ALLOWING.values())  # every form has a shipped workload that allows it (int8: issue 52)


def test_the_shipped_int8_workload_plans_int8_rows(tmp_path, capsys):
    out = tmp_path / "int8.json"
    assert main(["solve", HW, "workloads/mlperf-dlrm-v1-frozen-int8.yaml", "--method", "int8", "--work-limit", "300",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    plan = load_plan(str(out))
    held = sorted(p.table for p in plan.placements if uses(p, "int8"))
    assert plan.method == "int8" and held == ["C1", "C10", "C20", "C21", "C22"]


def test_compare_shows_the_allowed_forms_beside_the_ilp(wl_path, capsys):
    assert main(["compare", HW, wl_path, "--json", "--methods", "ilp,greedy_size,qr,node_local",
                 "--time-limit", "20"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"ilp", "greedy_size", "qr", "node_local"}
    assert rows["qr"]["status"] in ("optimal", "feasible") and rows["qr"]["time_limit_s"] > 0
    assert all(rows["ilp"]["step_time_s"] <= r["step_time_s"] * (1 + 1e-9) for r in rows.values())


def test_explain_says_what_a_compressed_form_saved(wl_path, tmp_path, capsys):
    plan = tmp_path / "qr.json"
    assert main(["solve", HW, wl_path, "--method", "qr", "-o", str(plan), "--time-limit", "20"]) == 0
    capsys.readouterr()
    assert main(["explain", HW, wl_path, str(plan), "big", "plain", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["table"]: r for r in (out["tables"] if isinstance(out, dict) else out)}
    big, plain = rows["big"], rows["plain"]
    assert big["form"].startswith("qr k=") and big["form_saved_bytes"] > 0
    assert big["plain_best"] is not None and big["plain_best"]["label"].startswith("table_wise")
    assert "It is held as qr k=" in big["sentence"] and "less memory than its rows as they are" in big["sentence"]
    assert plain["form"] is None and "held as" not in plain["sentence"]


def test_node_local_forced_on_two_nodes_and_allowing_it_costs_no_slower_plan(tmp_path, capsys):
    """criteo-terabyte-node-local @ dgx-h100-2node (two-stage, deterministic work limit): --method node_local holds
    all six allowing tables node-local; the ILP with node_local allowed keeps the better of its stages with and
    without node-local kinds, never slower than the forced plan (it once returned 1.212 ms against 1.165)."""
    hw, wl = "hardware_specs/dgx-h100-2node.yaml", "workloads/criteo-terabyte-node-local.yaml"
    forced, free = tmp_path / "nl.json", tmp_path / "ilp.json"
    assert main(["solve", hw, wl, "--method", "node_local", "--work-limit", "3000", "-o", str(forced)]) == 0
    assert main(["solve", hw, wl, "--work-limit", "3000", "-o", str(free)]) == 0
    capsys.readouterr()
    nl, ilp = load_plan(str(forced)), load_plan(str(free))
    assert sum(p.node_local for p in nl.placements) == len(allowing(load_workload(wl), "node_local")) == 6
    assert ilp.predicted["step_time_s"] <= nl.predicted["step_time_s"] * (1 + 1e-9)
