"""Semantics a user trips on (issue 36, items 4 and 6): a plan's sharding label checked against its shards; a
value that is most likely a unit mistake refused unless --allow-implausible; one error per mistake, where it is
written; swapped HW and WL named as such; show's HBM bandwidth; explain saying when the plan is not locally
optimal. Every bad input: exit 2, the file and the field named, no traceback."""
from __future__ import annotations

import copy
import json
import warnings

import pytest
import yaml

from placer.cli import main
from tests.conftest import ROOT

HW = str(ROOT / "hardware_specs/dgx-h100.yaml")
WL = str(ROOT / "workloads/tiny.yaml")


def _run(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


# ---- item 4: the sharding label against the shards' geometry --------------------------------------------------

@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["solve", HW, WL, "--method", "greedy_size", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _relabel(plan: dict, table: str, sharding: str, shards: list[dict]) -> dict:
    plan = copy.deepcopy(plan)
    for p in plan["placements"]:
        if p["table"] == table:
            p["sharding"], p["shards"] = sharding, shards
    plan.pop("predicted", None)
    return plan


def _shard(device, rows, cols):
    n = rows[1] - rows[0]
    return {"device": device, "rows": list(rows), "cols": list(cols), "hbm_rows": n, "host_rows": 0}


#: t_users: 20,000 rows x 32 columns (workloads/tiny.yaml)
ROW_SHARDS = [_shard(f"node0/gpu{i}", (i * 5000, (i + 1) * 5000), (0, 32)) for i in range(4)]
COL_SHARDS = [_shard(f"node0/gpu{i}", (0, 20000), (i * 8, (i + 1) * 8)) for i in range(4)]
GRID = [_shard(f"node0/gpu{2 * i + j}", (i * 10000, (i + 1) * 10000), (j * 16, (j + 1) * 16))
        for i in range(2) for j in range(2)]
COPIES = [_shard(f"node0/gpu{i}", (0, 20000), (0, 32)) for i in range(2)]


@pytest.mark.parametrize("label, shards, words", [
    ("table_wise", ROW_SHARDS, "that is row_wise"),
    ("table_wise", COL_SHARDS, "that is column_wise"),
    ("table_wise", COPIES, "that is data_parallel"),
    ("row_wise", COL_SHARDS, "that is column_wise"),
    ("column_wise", ROW_SHARDS, "that is row_wise"),
    ("row_wise", GRID, "a grid"),
    ("data_parallel", ROW_SHARDS, "that is row_wise"),
    ("host", [dict(s, device="node0/host", hbm_rows=0, host_rows=5000) for s in ROW_SHARDS], "split the rows"),
])
@pytest.mark.parametrize("command", ["simulate", "check", "explain"])
def test_a_label_that_is_not_the_geometry_is_refused(tmp_path, good_plan, capsys, label, shards, words, command):
    i = [p["table"] for p in good_plan["placements"]].index("t_users")
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(_relabel(good_plan, "t_users", label, shards)))
    argv = {"simulate": ["simulate", HW, WL, f], "explain": ["explain", HW, WL, f],
            "check": ["check", f, "--hardware", HW, "--workload", WL]}[command]
    code, _, err = _run(argv, capsys)
    assert code == 2, err
    assert str(f) in err and f"placements[{i}].sharding" in err and f"labelled {label}" in err and words in err, err


@pytest.mark.parametrize("label, shards", [("row_wise", ROW_SHARDS), ("column_wise", COL_SHARDS),
                                           ("data_parallel", COPIES)])
def test_a_label_that_is_the_geometry_is_accepted(tmp_path, good_plan, capsys, label, shards):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(_relabel(good_plan, "t_users", label, shards)))
    code, _, err = _run(["simulate", HW, WL, f], capsys)
    assert code == 0, err


def test_export_refuses_a_label_that_is_not_the_geometry(tmp_path, good_plan, capsys):
    """export --torchrec wrote the label with shards of another kind and said 'expresses the plan exactly'."""
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(_relabel(good_plan, "t_users", "table_wise", ROW_SHARDS)))
    code, out, err = _run(["export", "--torchrec", HW, WL, f, "-o", tmp_path / "tr.json"], capsys)
    assert code == 2 and "labelled table_wise" in err and "exactly" not in out, (out, err)
    assert not (tmp_path / "tr.json").exists()


# ---- item 6: explain says when a next-best option is faster than the plan, and why -------------------------

def _slow_plan(good_plan: dict, solver: dict | None) -> dict:
    """good_plan with t_users moved to host memory (every faster GPU option is a next-best improvement)."""
    plan = _relabel(good_plan, "t_users", "host", [{"device": "node0/host", "rows": [0, 20000], "cols": [0, 32],
                                                    "hbm_rows": 0, "host_rows": 20000}])
    if solver is None:
        plan.pop("solver", None)
    else:
        plan["solver"] = solver
    return plan


def _explain_json(tmp_path, plan, capsys) -> dict:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    code, out, err = _run(["explain", HW, WL, f, "t_users", "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def _step(tmp_path, plan, capsys) -> float:
    f = tmp_path / "step.json"
    f.write_text(json.dumps(plan))
    code, out, err = _run(["simulate", HW, WL, f, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)["predicted"]["step_time_s"]


@pytest.mark.parametrize("kind", ["heuristic", "within_gap", "defect", "unverifiable"])
def test_explain_says_why_a_faster_option_exists(tmp_path, good_plan, capsys, kind):
    step = _step(tmp_path, _slow_plan(good_plan, None), capsys)
    solver = {"heuristic": {"backend": "heuristic", "status": "heuristic"},
              "within_gap": {"backend": "cbc", "status": "feasible", "objective_step_time_s": step,
                             "lower_bound_step_time_s": step * 0.01, "gap": 0.99},
              "defect": {"backend": "cbc", "status": "optimal", "objective_step_time_s": step,
                         "lower_bound_step_time_s": step, "gap": 0.0},
              "unverifiable": None}[kind]
    result = _explain_json(tmp_path, _slow_plan(good_plan, solver), capsys)
    row = result["tables"][0]
    assert row["next_best"]["delta_s"] < 0
    verdict = result["not_locally_optimal"]
    assert verdict["verdict"] == kind and verdict["tables"] == ["t_users"], verdict
    assert "not locally optimal" in row["sentence"], row["sentence"]
    words = {"heuristic": "does not promise", "within_gap": "within the solver's gap", "defect": "a defect",
             "unverifiable": "no solver account"}[kind]
    assert words in verdict["reason"], verdict["reason"]


def test_explain_prints_the_verdict(tmp_path, good_plan, capsys):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(_slow_plan(good_plan, {"backend": "heuristic", "status": "heuristic"})))
    code, out, err = _run(["explain", HW, WL, f, "t_users"], capsys)
    assert code == 0 and "not locally optimal (heuristic)" in out, out


def test_explain_of_a_locally_optimal_table_has_no_verdict(tmp_path, good_plan, capsys):
    plan = copy.deepcopy(good_plan)
    result = _explain_json(tmp_path, plan, capsys)
    if all(r["next_best"] is None or r["next_best"]["delta_s"] >= 0 for r in result["tables"]):
        assert result["not_locally_optimal"] is None


# ---- item 6: show's HBM bandwidth ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dgx-h100", "dgx-h100-2node", "h100-pcie-host"])
def test_show_prints_the_hbm_bandwidth_of_all_gpus(capsys, name):
    from placer.specs import load_hardware

    spec = load_hardware(ROOT / f"hardware_specs/{name}.yaml")
    total = sum(t.gpus.hbm_bw_GBps * t.gpus.count for _, t in spec.node_templates())
    code, out, _ = _run(["show", ROOT / f"hardware_specs/{name}.yaml"], capsys)
    line = next(x for x in out.splitlines() if "HBM bandwidth, all GPUs" in x)
    assert code == 0 and f"{total:,.0f} GB/s" in line and " 0 GB/s" not in line, line


# ---- item 6: a hardware spec and a workload passed in swapped order --------------------------------------------

@pytest.mark.parametrize("command", ["solve", "simulate", "explain", "sweep", "compare"])
def test_swapped_hw_and_wl_are_named_as_such(tmp_path, good_plan, capsys, command):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(good_plan))
    argv = [command, WL, HW] + ([plan] if command in ("simulate", "explain") else [])
    code, _, err = _run(argv, capsys)
    assert code == 2, err
    assert f"{WL}: this file is a workload, not a hardware spec" in err and "swapped" in err, err
    assert "unknown field" not in err and "Field required" not in err, err


def test_a_plan_given_as_a_workload_is_named(tmp_path, good_plan, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(good_plan))
    code, _, err = _run(["solve", HW, plan], capsys)
    assert code == 2 and f"{plan}: this file is a plan, not a workload" in err, err


# ---- item 6: one error per mistake, where it is written, with "did you mean" -----------------------------------

MLPERF = ROOT / "workloads/mlperf-dlrm-v1.yaml"  # 26 tables, table_defaults {dim, dtype, pooling_factor}


def _workload_with(tmp_path, edit) -> str:
    doc = yaml.safe_load(MLPERF.read_text())
    edit(doc)
    f = tmp_path / "wl.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def _error_lines(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.strip()]


def test_a_typo_in_table_defaults_is_one_error_with_did_you_mean(tmp_path, capsys):
    f = _workload_with(tmp_path, lambda d: d["table_defaults"].update(pooling_factr=2))
    code, _, err = _run(["check", f], capsys)
    assert code == 2 and len(_error_lines(err)) == 1, err
    assert f"{f}: table_defaults.pooling_factr: unknown field; did you mean 'pooling_factor'?" in err, err


def test_a_bad_table_defaults_value_is_one_error_where_it_is_written(tmp_path, capsys):
    f = _workload_with(tmp_path, lambda d: d["table_defaults"].update(dtype="fp64"))
    code, _, err = _run(["check", f], capsys)
    assert code == 2 and len(_error_lines(err)) == 1, err
    assert f"{f}: table_defaults.dtype:" in err and "fp64" in err and "tables[" not in err, err


def test_a_table_that_writes_its_own_bad_value_is_named_itself(tmp_path, capsys):
    def edit(d):
        d["table_defaults"]["dtype"] = "fp64"
        d["tables"][3]["dtype"] = "int8"
    f = _workload_with(tmp_path, edit)
    code, _, err = _run(["check", f], capsys)
    assert code == 2 and "table_defaults.dtype:" in err and "tables[3].dtype:" in err and "int8" in err, err
    assert len(_error_lines(err)) == 3, err  # "invalid fields:" + the two


def test_the_same_typo_in_every_table_is_one_line(tmp_path, capsys):
    f = _workload_with(tmp_path, lambda d: [t.update(access={"kind": "zipf", "alpah": 1.1}) for t in d["tables"]])
    code, _, err = _run(["check", f], capsys)
    assert code == 2 and len(_error_lines(err)) == 1, err
    assert "tables[*].access.alpah: unknown field; did you mean 'alpha'?" in err and "26 in all" in err, err
    assert "Field required" not in err, err


def test_an_unknown_hardware_field_gets_did_you_mean(tmp_path, capsys):
    f = tmp_path / "hw.yaml"
    f.write_text((ROOT / "hardware_specs/dgx-h100.yaml").read_text().replace("hbm_GiB:", "hbm_gib:"))
    code, _, err = _run(["check", f], capsys)
    assert code == 2 and "gpus.hbm_gib: unknown field; did you mean 'hbm_GiB'?" in err, err


# ---- item 6: a likely unit mistake is an error unless --allow-implausible --------------------------------------

DGX = yaml.safe_load((ROOT / "hardware_specs/dgx-h100.yaml").read_text())
T = next(iter(DGX["templates"]))


def _hardware_with(tmp_path, path: list, value) -> str:
    doc = copy.deepcopy(DGX)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def _link(kind: str) -> int:
    return next(i for i, link in enumerate(DGX["templates"][T]["links"]) if link["kind"] == kind)


@pytest.mark.parametrize("path, value, field, unit, meant", [
    (["gpus", "hbm_GiB"], 40960, "gpus.hbm_GiB", "MiB", "40 GiB"),
    (["gpus", "hbm_GiB"], 143771, "gpus.hbm_GiB", "MiB", "140.4 GiB"),
    (["gpus", "hbm_bw_GBps"], 4.8, "gpus.hbm_bw_GBps", "TB/s", "4,800 GB/s"),
    (["gpus", "hbm_bw_GBps"], 900_000, "gpus.hbm_bw_GBps", "MB/s", "900 GB/s"),
    (["host", "dram_GiB"], 524_288, "host.dram_GiB", "MiB", "512 GiB"),
    (["gpus", "peak_TFLOPs", "bf16"], 67_000, "gpus.peak_TFLOPs.bf16", "GFLOP/s", "67 TFLOP/s"),
    (["links", _link("nvlink"), "bw_GBps"], 7200, f"links[{_link('nvlink')}].bw_GBps", "Gb/s", "900 GB/s"),
    (["gpus", "kernel_launch_us"], 50_000, "gpus.kernel_launch_us", "ns", "50 us"),
])
def test_a_likely_unit_mistake_is_an_error_naming_the_unit_meant(tmp_path, capsys, path, value, field, unit, meant):
    f = _hardware_with(tmp_path, ["templates", T] + path, value)
    for argv in (["check", f], ["solve", f, WL, "--method", "greedy_size"], ["show", f]):
        code, out, err = _run(argv, capsys)
        assert code == 2, (argv, out, err)
        assert f"{f}: templates.{T}.{field}: likely a unit mistake" in err, err
        assert f"looks like {unit}" in err and f"is {meant})" in err and "--allow-implausible" in err, err


def test_allow_implausible_plans_it_with_a_warning(tmp_path, capsys):
    f = _hardware_with(tmp_path, ["templates", T, "gpus", "hbm_GiB"], 40960)
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # pyproject's filterwarnings ignores SpecWarning in the suite
        code, out, err = _run(["solve", f, WL, "--method", "greedy_size", "--allow-implausible"], capsys)
    assert code == 0 and "warning:" in err and "looks like MiB (40,960 MiB is 40 GiB)" in err, err
    from placer.specs import load_hardware

    assert load_hardware(f, allow_implausible=True).templates[T].gpus.hbm_GiB == 40960


def test_every_command_that_loads_hardware_takes_the_flag(tmp_path, capsys):
    f = _hardware_with(tmp_path, ["templates", T, "gpus", "hbm_GiB"], 40960)
    for argv in (["check", f], ["show", f], ["compare", f, WL, "--time-limit", "5"],
                 ["sweep", f, WL, "--gpus", "8", "--time-limit", "5"]):
        code, out, err = _run(argv + ["--allow-implausible"], capsys)
        assert code == 0, (argv, err)


@pytest.mark.parametrize("path, value", [
    (["gpus", "hbm_GiB"], 0.5),  # a deliberately small test machine (tests/conftest.py): not a unit mistake
    (["gpus", "hbm_GiB"], 500_000),  # as MiB 488 GiB, more than any device: unusual, not explained
    (["gpus", "hbm_bw_GBps"], 1e-3),
])
def test_an_unusual_value_no_unit_explains_is_only_a_warning(tmp_path, capsys, path, value):
    f = _hardware_with(tmp_path, ["templates", T] + path, value)
    if value == 0.5:
        f = _hardware_with(tmp_path, ["templates", T, "gpus"],
                           {**DGX["templates"][T]["gpus"], "hbm_GiB": 0.5, "hbm_reserve_GiB": 0.1})
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        code, _, err = _run(["check", f], capsys)
    assert code == 0 and "warning:" in err and "realistic range" in err and "likely" not in err, err


def test_shipped_specs_and_workloads_pass_check(capsys):
    files = sorted((ROOT / "hardware_specs").glob("*.yaml")) + sorted((ROOT / "workloads").glob("*.yaml"))
    code, out, err = _run(["check"] + files, capsys)
    assert code == 0 and "warning" not in err, err
