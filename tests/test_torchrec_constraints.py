"""A workload's constraints <-> TorchRec's ParameterConstraints (issue 52): the round trip through placer export
--torchrec and placer import --torchrec --constraints keeps every field TorchRec can say and lists the rest by table
and field; a TorchRec Python file is read without running it (a call in it is refused, exit 2); the torchrec method
hands TorchRec's planner the constraints it can say and refuses a plan that breaks the others. The tests that run
TorchRec skip without it locally and fail instead under CI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from placer.cli import main
from placer.constraints import memory_class
from placer.cost import CostModel
from placer.errors import SpecError
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from placer.torchrec_io import planner as trec_planner
from placer.torchrec_io.constraints import FIELDS, TORCHREC_KERNELS, TORCHREC_SHARDING_TYPES, from_torchrec, table_rules
from placer.torchrec_io.constraints_file import ENUMS, read_constraints_file
from placer.units import GiB
from tests.conftest import ROOT, require_torchrec

HW = str(ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml")
TINY = (ROOT / "workloads" / "tiny.yaml").read_text()

#: TorchRec can say these (shardings, memory, the headroom): they come back as they were
EXPRESSIBLE = {"hbm_headroom_GiB": 1.5, "tables": [
    {"tables": ["t_users"], "shardings": ["row_wise", "column_wise"]},
    {"tables": ["t_items", "t_ads"], "memory": ["hbm"]},
    {"tables": ["t_ads"], "shardings": ["table_wise", "data_parallel"]},
    {"tables": ["t_hist"], "memory": ["uvm", "cached"]},
    {"tables": ["t_geo"], "shardings": ["table_wise"], "memory": ["hbm", "cached"]}]}
#: and these it cannot: each listed by table and field
PLACER_ONLY = [
    {"tables": ["t_users"], "min_shards": 2},
    {"name": "pair", "tables": ["t_items", "t_ads"], "colocate": True},
    {"tables": ["t_geo"], "devices": ["gpu3"]},
    {"tables": ["t_shared"], "precisions": ["fp32"], "max_shards": 1},
    {"tables": ["t_shared"], "memory": ["hbm", "host"]}]
NOT_CARRIED = {("t_users", "min_shards"), ("t_items", "colocate"), ("t_ads", "colocate"), ("t_geo", "devices"),
               ("t_shared", "precisions"), ("t_shared", "max_shards"), ("t_shared", "memory")}


def _workload(tmp_path: Path, constraints: dict, name: str = "c") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(TINY.replace("name: tiny\n", f"name: tiny-{name}\n", 1) + "\n"
                    + yaml.safe_dump({"constraints": constraints}, sort_keys=False))
    return path


def _rules(path) -> dict:
    """Per table: (shardings, memory) as placer reads them, host left out (TorchRec has none)."""
    def gpu(s):
        return None if s is None else frozenset(s - {"host"})
    return {n: (gpu(r.shardings), gpu(r.memory)) for n, r in table_rules(load_workload(path)).items()
            if (r.shardings, r.memory) != (None, None)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """tiny with every kind of constraint, solved and exported: (tmp, workload, export JSON, snippet)."""
    tmp = tmp_path_factory.mktemp("trec-constraints")
    wl = _workload(tmp, {"hbm_headroom_GiB": EXPRESSIBLE["hbm_headroom_GiB"],
                         "tables": EXPRESSIBLE["tables"] + PLACER_ONLY})
    plan = tmp / "plan.json"
    assert main(["solve", HW, str(wl), "--work-limit", "2000", "-o", str(plan)]) == 0
    out = tmp / "plan.torchrec.json"
    assert main(["export", "--torchrec", HW, str(wl), str(plan), "-o", str(out)]) == 0
    return tmp, wl, out, tmp / "plan_torchrec_constraints.py"


def test_export_writes_the_constraints_and_lists_what_it_cannot_carry(exported, capsys):
    tmp, wl, out, snippet = exported
    block = json.loads(out.read_text())["workload_constraints"]
    pcs = block["parameter_constraints"]
    assert pcs["t_users"]["sharding_types"] == ["row_wise", "table_row_wise", "column_wise", "table_column_wise"]
    assert pcs["t_items"]["compute_kernels"] == ["dense", "fused"]       # hbm: fused, and dense for data_parallel
    assert pcs["t_ads"] == {"sharding_types": ["table_wise", "data_parallel"], "compute_kernels": ["dense", "fused"],
                            "pooling_factors": [1.0]}
    assert pcs["t_hist"]["compute_kernels"] == ["fused_uvm", "fused_uvm_caching"]
    assert "sharding_types" not in pcs["t_hist"]
    assert pcs["t_geo"] == {"sharding_types": ["table_wise"], "compute_kernels": ["fused", "fused_uvm_caching"],
                            "pooling_factors": [1.0]}
    assert pcs["t_shared"]["pooling_factors"] == [1.0, 1.0] and pcs["t_shared"]["compute_kernels"] == ["dense", "fused"]
    topo = Topology(load_hardware(HW))
    usable = min(topo.memories[g].usable_bytes for g in topo.gpus)
    assert block["topology"]["hbm_cap"] == int(usable - 1.5 * GiB) and block["hbm_headroom_GiB"] == 1.5
    assert {(n["table"], n["field"]) for n in block["not_carried"]} == NOT_CARRIED
    text = snippet.read_text()
    assert "ShardingType.ROW_WISE.value" in text and "hbm_cap=" in text and "t_geo: devices:" in text


def test_export_prints_what_it_cannot_carry_on_stderr(exported, tmp_path, capsys):
    _, wl, _, _ = exported
    plan = exported[0] / "plan.json"
    capsys.readouterr()
    assert main(["export", "--torchrec", HW, str(wl), str(plan), "-o", str(tmp_path / "x.json")]) == 0
    err = capsys.readouterr().err
    for table, fld in NOT_CARRIED:
        assert f"not carried: {table}: {fld}:" in err
    assert (tmp_path / "x_constraints.py").is_file()


@pytest.mark.parametrize("source", ["python", "json"])
def test_round_trip_keeps_every_field_torchrec_can_say(exported, tmp_path, capsys, source):
    tmp, wl, out, snippet = exported
    back = tmp_path / "back.yaml"
    capsys.readouterr()
    file = snippet if source == "python" else out
    assert main(["import", "--torchrec", "--constraints", str(file), HW, str(ROOT / "workloads/tiny.yaml"),
                 "-o", str(back)]) == 0
    err = capsys.readouterr().err
    got = load_workload(back)
    assert got.constraints.hbm_headroom_GiB == pytest.approx(1.5, abs=1e-6)
    assert _rules(back) == _rules(wl)  # every table's shardings and memory (host aside: TorchRec has none)
    assert [t.name for t in got.tables] == [t.name for t in load_workload(wl).tables]
    if source == "json":  # the export's own list comes back with it
        for table, fld in NOT_CARRIED:
            assert f"not carried: {table}: {fld}: not in the export:" in err
    else:  # the snippet's Topology agrees with the machine: nothing else to say
        assert err == ""
    text = back.read_text()
    assert "hbm_headroom_GiB: 1.5   # from" in text and text.startswith(TINY.split("\n", 1)[0])


def test_torchrec_names_go_out_and_come_back(exported, tmp_path, capsys):
    """Export --names dlrm writes t_cat_<i>; the JSON import maps them back by its names map, the snippet's with
    --names dlrm, and without it a TorchRec name is not a table of the workload (exit 2, naming it)."""
    tmp, wl, _, _ = exported
    out = tmp_path / "n.json"
    assert main(["export", "--torchrec", HW, str(wl), str(tmp / "plan.json"), "-o", str(out), "--names", "dlrm"]) == 0
    assert "t_cat_0" in json.loads(out.read_text())["workload_constraints"]["parameter_constraints"]
    tiny = str(ROOT / "workloads/tiny.yaml")
    assert main(["import", "--torchrec", "--constraints", str(out), HW, tiny, "-o", str(tmp_path / "a.yaml")]) == 0
    assert main(["import", "--torchrec", "--constraints", str(tmp_path / "n_constraints.py"), HW, tiny,
                 "-o", str(tmp_path / "b.yaml"), "--names", "dlrm"]) == 0
    assert _rules(tmp_path / "a.yaml") == _rules(tmp_path / "b.yaml") == _rules(wl)
    capsys.readouterr()
    assert main(["import", "--torchrec", "--constraints", str(tmp_path / "n_constraints.py"), HW, tiny,
                 "-o", str(tmp_path / "c.yaml")]) == 2
    assert "constraints['t_cat_0']: table 't_cat_0' is not in workload 'tiny'" in capsys.readouterr().err


def test_import_replaces_the_constraints_block(exported, tmp_path, capsys):
    tmp, wl, out, snippet = exported
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert main(["import", "--torchrec", "--constraints", str(snippet), HW, str(wl), "-o", str(first)]) == 0
    assert main(["import", "--torchrec", "--constraints", str(snippet), HW, str(first), "-o", str(second)]) == 0
    assert first.read_text() == second.read_text()
    assert first.read_text().count("\nconstraints:") == 1 and "colocate" not in first.read_text()


# ---- TorchRec -> placer, field by field -------------------------------------------------------------------------


def _from(fields: dict, **kw):
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    got = from_torchrec({"t_users": fields}, wl, file="c.json", **kw)
    entry = got.constraints.tables[0] if got.constraints.tables else None
    lost = {n.field for n in got.not_carried}
    return (entry.shardings if entry else None, entry.memory if entry else None), lost


@pytest.mark.parametrize("fields, shardings, memory, lost", [
    ({"compute_kernels": ["fused"]}, ["table_wise", "row_wise", "column_wise"], ["hbm"], set()),
    ({"compute_kernels": ["dense"]}, ["data_parallel"], ["hbm"], set()),
    ({"compute_kernels": ["dense", "fused"]}, None, ["hbm"], set()),
    ({"compute_kernels": ["fused_uvm", "fused_uvm_caching"]}, None, ["cached", "uvm"], set()),
    ({"compute_kernels": ["dense", "fused_uvm"]}, None, ["hbm", "uvm"], {"compute_kernels"}),
    ({"sharding_types": ["table_row_wise"]}, ["row_wise"], None, {"sharding_types"}),
    ({"sharding_types": ["row_wise", "grid_shard"]}, ["row_wise"], None, {"sharding_types"}),
    ({"compute_kernels": ["fused", "key_value"]}, ["table_wise", "row_wise", "column_wise"], ["hbm"],
     {"compute_kernels"}),
    ({"compute_kernels": ["fused_uvm_caching"], "enforce_hbm": True}, ["table_wise", "row_wise", "column_wise"],
     ["hbm"], set()),
    ({"compute_kernels": ["fused_uvm_caching"], "cache_params": {"load_factor": 0.3, "algorithm": "LFU"}},
     None, ["cached"], {"cache_params"}),
    ({"min_partition": 8, "sharding_types": ["column_wise"]}, ["column_wise"], None, {"min_partition"}),
    ({"device_group": "cuda"}, ["table_wise", "row_wise", "column_wise", "data_parallel"], None, set()),
    ({"device_group": "cpu"}, None, None, {"device_group"}),
    ({"pooling_factors": [1.0], "feature_names": ["f_user"], "is_weighted": False}, None, None, set()),
    ({"pooling_factors": [3.0], "stochastic_rounding": True, "bounds_check_mode": "WARNING"}, None, None,
     {"pooling_factors", "stochastic_rounding", "bounds_check_mode"}),
])
def test_each_torchrec_field(fields, shardings, memory, lost):
    assert _from(fields) == ((shardings, memory), lost)


@pytest.mark.parametrize("fields, field, words", [
    ({"sharding_types": ["data_parallel"], "compute_kernels": ["fused"]}, "c.json: t_users:", "allow no pair"),
    ({"sharding_types": ["grid_shard"]}, "t_users.sharding_types", "placer has none of them"),
    ({"compute_kernels": ["key_value"]}, "t_users.compute_kernels", "placer prices none"),
    ({"compute_kernels": ["fast"]}, "t_users.compute_kernels", "'fast' is not one of TorchRec's"),
    ({"sharding_type": ["row_wise"]}, "t_users.sharding_type", "not a ParameterConstraints field"),
    ({"enforce_hbm": "yes"}, "t_users.enforce_hbm", "expected true or false"),
])
def test_bad_torchrec_fields_name_the_field(fields, field, words):
    with pytest.raises(SpecError) as err:
        _from(fields)
    assert field in str(err.value) and words in str(err.value)


def test_an_unknown_table_is_named():
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    with pytest.raises(SpecError) as err:
        from_torchrec({"t_nope": {"compute_kernels": ["fused"]}}, wl, file="c.json")
    assert "c.json: t_nope: table 't_nope' is not in workload 'tiny'" in str(err.value)


# ---- Python files, read without running them -------------------------------------------------------------------

USER_FILE = '''"""A TorchRec user's planner constraints."""
import os

from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.planner import ParameterConstraints, Topology
from torchrec.distributed.planner.types import CacheParams
from torchrec.distributed.types import ShardingType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import CacheAlgorithm

open({marker!r}, "w").write("ran")   # never run: placer parses the file

constraints = {{
    "t_users": ParameterConstraints(sharding_types=[ShardingType.ROW_WISE.value, ShardingType.TABLE_ROW_WISE]),
    "t_hist": ParameterConstraints(
        compute_kernels=[EmbeddingComputeKernel.FUSED_UVM_CACHING.value],
        cache_params=CacheParams(load_factor=0.25, algorithm=CacheAlgorithm.LFU),
        pooling_factors=[2.0],
    ),
}}
constraints["t_geo"] = ParameterConstraints(compute_kernels=["fused"], min_partition=4)
topology = Topology(world_size=4, compute_device="cuda", hbm_cap=70 * 1024**3)
'''


def test_a_python_file_is_read_without_running_it(tmp_path, capsys):
    marker = tmp_path / "ran.txt"
    path = tmp_path / "user_constraints.py"
    path.write_text(USER_FILE.format(marker=str(marker)))
    src = read_constraints_file(str(path))
    assert src.pcs["t_users"] == {"sharding_types": ["row_wise", "table_row_wise"]}
    assert src.pcs["t_hist"]["cache_params"] == {"load_factor": 0.25, "algorithm": "LFU"}
    assert src.hbm_cap == 70 * GiB and src.topology == {"world_size": 4, "compute_device": "cuda"}
    out = tmp_path / "wl.yaml"
    assert main(["import", "--torchrec", "--constraints", str(path), HW, str(ROOT / "workloads/tiny.yaml"),
                 "-o", str(out)]) == 0
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "not carried: t_hist: cache_params: {'load_factor': 0.25, 'algorithm': 'LFU'}: placer's hot-row" in err
    assert "not carried: t_geo: min_partition: 4:" in err and "not carried: t_users: sharding_types: table_row_wise" \
        not in err
    wl = load_workload(out)
    topo = Topology(load_hardware(HW))
    usable = min(topo.memories[g].usable_bytes for g in topo.gpus)
    assert wl.constraints.hbm_headroom_GiB == pytest.approx((usable - 70 * GiB) / GiB, abs=1e-6)
    assert _rules(out) == {"t_users": (frozenset({"row_wise"}), None), "t_hist": (None, frozenset({"cached"})),
                           "t_geo": (frozenset({"table_wise", "row_wise", "column_wise"}), frozenset({"hbm"}))}


@pytest.mark.parametrize("body, field, words", [
    ('constraints = {"t_users": ParameterConstraints(sharding_types=my_types())}',
     "constraints['t_users'].sharding_types", "line 1: a call to my_types()"),
    ('constraints = build()', "constraints", "expected a dict literal"),
    ('constraints = {t: ParameterConstraints() for t in ["t_users"]}', "constraints", "expected a dict literal"),
    ('constraints = {}\nconstraints.update(t_users=ParameterConstraints())', "constraints", "line 2: placer reads"),
    ('constraints = {"t_users": ParameterConstraints(["row_wise"])}', "constraints['t_users']", "positional"),
    ('constraints = {"t_users": ParameterConstraints(**kw)}', "constraints['t_users']", "**arguments"),
    ('constraints = {"t_users": ParameterConstraints(sharding_types=TYPES)}', "constraints['t_users'].sharding_types",
     "is not a literal"),
    ('constraints = {"t_users": ParameterConstraints(pooling_factors=[10 ** 10 ** 10])}',
     "constraints['t_users'].pooling_factors[0]", "a power too large"),
    ('constraints = {"t_users": ParameterConstraints(sharding_types=[ShardingType.DIAGONAL.value])}',
     "constraints['t_users'].sharding_types[0]", "ShardingType.DIAGONAL is not a member"),
    ('x = 1', None, "defines no top-level constraints"),
    ('constraints = {', None, "Python syntax error at line 1"),
])
def test_a_python_file_with_anything_but_literals_is_refused(tmp_path, capsys, body, field, words):
    path = tmp_path / "c.py"
    path.write_text(body + "\n")
    assert main(["import", "--torchrec", "--constraints", str(path), HW, str(ROOT / "workloads/tiny.yaml"),
                 "-o", str(tmp_path / "w.yaml")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and words in err and (field is None or field in err)
    assert not (tmp_path / "w.yaml").exists() and "Traceback" not in err


def test_an_export_without_workload_constraints_is_refused_for_constraints(tmp_path, capsys):
    tiny = str(ROOT / "workloads" / "tiny.yaml")
    plan, out = tmp_path / "p.json", tmp_path / "e.json"
    assert main(["solve", HW, tiny, "--method", "greedy_size", "-o", str(plan)]) == 0
    assert main(["export", "--torchrec", HW, tiny, str(plan), "-o", str(out)]) == 0
    assert "workload_constraints" not in json.loads(out.read_text()) and not (tmp_path / "e_constraints.py").exists()
    capsys.readouterr()
    assert main(["import", "--torchrec", "--constraints", str(out), HW, tiny, "-o", str(tmp_path / "w.yaml")]) == 2
    assert "workload_constraints: this export has no workload_constraints" in capsys.readouterr().err


# ---- with TorchRec ---------------------------------------------------------------------------------------------


def test_the_names_are_torchrecs():
    require_torchrec()
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import ShardingType

    assert TORCHREC_SHARDING_TYPES == tuple(s.value for s in ShardingType)
    assert TORCHREC_KERNELS == tuple(k.value for k in EmbeddingComputeKernel)
    assert ENUMS["ShardingType"] == {s.name: s.value for s in ShardingType}
    assert ENUMS["EmbeddingComputeKernel"] == {k.name: k.value for k in EmbeddingComputeKernel}
    assert FIELDS == tuple(ParameterConstraints.__dataclass_fields__)


def test_the_snippet_is_torchrecs_python(exported):
    """The written snippet, run by Python with torchrec (our own file), gives the ParameterConstraints the
    generated module builds from the JSON."""
    require_torchrec()
    import runpy
    import sys

    tmp, _, out, snippet = exported
    ns = runpy.run_path(str(snippet))
    sys.path.insert(0, str(tmp))
    try:
        import plan_torchrec
        built = plan_torchrec.workload_constraints()
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop("plan_torchrec", None)
    assert ns["constraints"] == built and set(built) == {"t_users", "t_items", "t_ads", "t_hist", "t_geo", "t_shared"}
    block = json.loads(out.read_text())["workload_constraints"]
    assert ns["topology"].devices[0].storage.hbm == block["topology"]["hbm_cap"]


#: what TorchRec can say, on tiny @ pcie-4gpu-workstation: one constraint of each kind
HONOURED = {"hbm_headroom_GiB": 2, "tables": [
    {"tables": ["t_users"], "shardings": ["row_wise"]},
    {"tables": ["t_items"], "shardings": ["table_wise"], "memory": ["hbm"]},
    {"tables": ["t_hist"], "memory": ["uvm"]},
    {"tables": ["t_geo"], "memory": ["cached"]},
    {"tables": ["t_shared"], "shardings": ["data_parallel"]}]}


def test_planner_inputs_carry_the_constraints(tmp_path):
    wl = load_workload(_workload(tmp_path, HONOURED))
    model = CostModel(Topology(load_hardware(HW), wl.dense.dtype), wl)
    inputs = trec_planner.planner_inputs(model)
    plain = trec_planner.planner_inputs(CostModel(model.topo, load_workload(ROOT / "workloads/tiny.yaml")))
    assert plain.topology["hbm_cap"] - inputs.topology["hbm_cap"] == 2 * GiB and not plain.constraints
    assert inputs.constraints["t_users"] == {"sharding_types": ["row_wise", "table_row_wise"]}
    assert inputs.constraints["t_items"] == {"sharding_types": ["table_wise"], "compute_kernels": ["fused"]}
    assert inputs.constraints["t_hist"] == {"compute_kernels": ["fused_uvm"]}
    assert inputs.constraints["t_geo"] == {"compute_kernels": ["fused_uvm_caching"]}
    assert inputs.constraints["t_shared"] == {"sharding_types": ["data_parallel"]}


def test_the_torchrec_method_honours_what_torchrec_can_say(tmp_path):
    require_torchrec()
    from placer.planner.solve import SolveConfig, solve

    wl = load_workload(_workload(tmp_path, HONOURED))
    model = CostModel(Topology(load_hardware(HW), wl.dense.dtype), wl)
    plan = solve(model.topo, wl, SolveConfig(method="torchrec", time_limit_s=60))
    assert model.rules.plan_faults(plan.placements) == []
    by = {p.table: p for p in plan.placements}
    assert by["t_users"].sharding == "row_wise" and by["t_items"].sharding == "table_wise"
    assert memory_class(by["t_items"]) == "hbm" and memory_class(by["t_hist"]) == "uvm"
    assert memory_class(by["t_geo"]) == "cached" and by["t_shared"].sharding == "data_parallel"
    assert "hbm_headroom_GiB 2" in plan.solver.note and "ParameterConstraints for 5 table(s)" in plan.solver.note
    # the free planner chooses otherwise for some of them: the constraints steered it
    free = solve(model.topo, load_workload(ROOT / "workloads/tiny.yaml"), SolveConfig(method="torchrec"))
    assert model.rules.plan_faults(free.placements)


def test_a_torchrec_plan_that_breaks_a_placer_only_constraint_is_refused(tmp_path, capsys):
    """TorchRec's row_wise spreads over every rank: a pin to gpu3 cannot hold, and the method says so (exit 1)."""
    require_torchrec()
    wl = _workload(tmp_path, {"tables": [{"tables": ["t_users"], "shardings": ["row_wise"], "devices": ["gpu3"]}]})
    assert main(["solve", HW, str(wl), "--method", "torchrec", "-o", str(tmp_path / "p.json")]) == 1
    err = capsys.readouterr().err
    assert "torchrec planner failed: its plan breaks the workload's constraints (table 't_users': " \
           "constraints.tables[0]: it is on" in err and "placer check would refuse the plan" in err
    assert not (tmp_path / "p.json").exists()


def test_names_cannot_break_out_of_the_comments(tmp_path):
    """A constraint's name with line breaks and quotes stays inside one comment line of the snippet and of the
    imported workload: what placer writes parses as it means."""
    from placer.torchrec_io.constraints import to_torchrec
    from placer.torchrec_io.constraints_file import python_snippet, workload_with

    evil = 'x"""\nimport os\nos.system("echo ran")\n'
    wl = load_workload(_workload(tmp_path, {"tables": [{"name": evil, "tables": ["t_items", "t_ads"],
                                                        "colocate": True, "memory": ["hbm"]}]}))
    exported = to_torchrec(wl)
    path = tmp_path / "s_constraints.py"
    path.write_text(python_snippet(exported, workload=evil, world_size=4, local_world_size=4))
    src = read_constraints_file(str(path))
    assert set(src.pcs) == {"t_items", "t_ads"} and "\nimport os" not in path.read_text()
    got = from_torchrec(src.pcs, wl, file=str(path))
    got.not_carried += exported.not_carried
    text = workload_with(TINY, got, source="s\n.py", json_syntax=False)
    assert yaml.safe_load(text)["constraints"] == {"tables": [{"tables": ["t_items", "t_ads"], "memory": ["hbm"]}]}
