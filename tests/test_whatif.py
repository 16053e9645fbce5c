"""What-ifs without hand-editing (issue 18, part 5): a plan given a changed hardware spec or workload is re-priced
with one ``warning:`` line naming what changed, refused only when it no longer maps; --batch and --gpus."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from placer.cli import main
from tests.conftest import ROOT

HW = str(ROOT / "hardware_specs/dgx-h100.yaml")
HW2 = str(ROOT / "hardware_specs/dgx-h100-2node.yaml")
WL = str(ROOT / "workloads/tiny.yaml")


pytestmark = pytest.mark.usefixtures("every_warning")  # tests/conftest.py


@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["solve", HW, WL, "--method", "greedy_size", "-q", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _write(tmp_path: Path, name: str, doc) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc, sort_keys=False))
    return str(p)


def _workload(tmp_path, edit, name="wl.yaml") -> str:
    doc = yaml.safe_load(Path(WL).read_text())
    edit(doc)
    return _write(tmp_path, name, doc)


def _hardware(tmp_path, edit) -> str:
    doc = yaml.safe_load(Path(HW).read_text())
    edit(doc)
    return _write(tmp_path, "hw.yaml", doc)


def _simulate(capsys, *argv) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    code = main(["simulate", *argv, "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, (json.loads(out)["predicted"] if code == 0 else None), err


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning: ")]


def test_solve_records_the_spec_fields(plan_doc):
    hw, wl = plan_doc["hardware"]["fields"], plan_doc["workload"]["fields"]
    assert hw["templates.dgx-h100.gpus.hbm_GiB"] == pytest.approx(79.6)
    assert wl["batch_size"] == 256 and wl["tables.t_users.rows"] == 20000


def test_same_specs_no_warning(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    code, _, err = _simulate(capsys, HW, WL, plan)
    assert code == 0 and not _warnings(err)


def test_double_batch_is_repriced_with_a_warning(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    code, base, _ = _simulate(capsys, HW, WL, plan)
    assert code == 0
    wl2 = _workload(tmp_path, lambda d: d.update(batch_size=512))
    code, pred, err = _simulate(capsys, HW, wl2, plan)
    assert code == 0
    lines = _warnings(err)
    assert len(lines) == 1 and "workload differs" in lines[0] and "batch_size 256 -> 512" in lines[0]
    assert plan in lines[0] and "re-priced" in lines[0]
    assert pred["step_time_s"] != pytest.approx(base["step_time_s"], rel=1e-6)
    # throughput = batch / step: the new batch is the one priced
    assert pred["throughput_samples_per_s"] == pytest.approx(512 / pred["step_time_s"])


def test_changed_hbm_names_the_field(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    hw2 = _hardware(tmp_path, lambda d: d["templates"]["dgx-h100"]["gpus"].update(hbm_GiB=96))
    code, _, err = _simulate(capsys, hw2, WL, plan)
    lines = _warnings(err)
    assert code == 0 and len(lines) == 1
    assert "hardware differs" in lines[0] and "templates.dgx-h100.gpus.hbm_GiB 79.6 -> 96" in lines[0]


def test_changed_table_rows_named(tmp_path, plan_doc, capsys):
    """A table grown: the plan's shards no longer cover it, so it is refused, and the warning said why."""
    plan = _write(tmp_path, "plan.json", plan_doc)
    wl2 = _workload(tmp_path, lambda d: d["tables"][2].update(rows=600))
    code, _, err = _simulate(capsys, HW, wl2, plan)
    assert "tables.t_geo.rows 300 -> 600" in err
    assert code == 2 and "error:" in err


def test_renamed_table_is_refused(tmp_path, plan_doc, capsys):
    def rename(d):
        d["tables"][2]["name"] = "t_geo_v2"
        for f in d["features"]:
            if f["table"] == "t_geo":
                f["table"] = "t_geo_v2"

    plan = _write(tmp_path, "plan.json", plan_doc)
    code, _, err = _simulate(capsys, HW, _workload(tmp_path, rename), plan)
    assert code == 2
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert error and "t_geo" in error[0] and plan in error[0]
    assert "tables.t_geo removed" in err and "tables.t_geo_v2 added" in err


def test_capacity_exceeded_is_still_refused(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    tiny_hbm = _hardware(tmp_path, lambda d: d["templates"]["dgx-h100"]["gpus"].update(hbm_GiB=4.0001))
    code, _, err = _simulate(capsys, tiny_hbm, WL, plan)
    assert code in (2, 3) and "hbm_GiB 79.6 -> 4.0001" in err


def test_old_plan_without_the_record_gets_a_generic_warning(tmp_path, plan_doc, capsys):
    doc = json.loads(json.dumps(plan_doc))
    for ref in (doc["hardware"], doc["workload"]):
        ref.pop("fields")
    plan = _write(tmp_path, "plan.json", doc)
    code, _, err = _simulate(capsys, HW, WL, plan)
    assert code == 0 and not _warnings(err)
    code, pred, err = _simulate(capsys, HW, _workload(tmp_path, lambda d: d.update(batch_size=512)), plan)
    lines = _warnings(err)
    assert code == 0 and len(lines) == 1
    assert "workload differs" in lines[0] and "sha256" in lines[0] and "re-priced" in lines[0]
    assert "batch_size" not in lines[0]
    assert pred["throughput_samples_per_s"] == pytest.approx(512 / pred["step_time_s"])


def test_batch_override_equals_editing_the_workload(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    code, edited, err_edit = _simulate(capsys, HW, _workload(tmp_path, lambda d: d.update(batch_size=1024)), plan)
    assert code == 0
    code, override, err = _simulate(capsys, HW, WL, plan, "--batch", "1024")
    assert code == 0 and override == edited
    lines = _warnings(err)
    assert len(lines) == 1 and "batch_size 256 -> 1024" in lines[0]
    # the batch it already has: nothing changed, nothing to say
    code, same, err = _simulate(capsys, HW, WL, plan, "--batch", "256")
    assert code == 0 and not _warnings(err)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1.5", "x", str(2**31 + 1)])
def test_bad_batch_is_exit_2(tmp_path, plan_doc, capsys, value):
    plan = _write(tmp_path, "plan.json", plan_doc)
    capsys.readouterr()
    assert main(["simulate", HW, WL, plan, f"--batch={value}"]) == 2
    err = capsys.readouterr().err
    assert "--batch" in err and "Traceback" not in err


def test_explain_with_batch_override(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    capsys.readouterr()
    assert main(["explain", HW, WL, plan, "--batch", "512", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) and "batch_size 256 -> 512" in err


def test_gpus_override_grows_the_machine(tmp_path, plan_doc, capsys):
    """A one-node plan on two nodes of the same template: every device still exists; re-priced with a warning."""
    plan = _write(tmp_path, "plan.json", plan_doc)
    code, pred, err = _simulate(capsys, HW2, WL, plan, "--gpus", "16")
    assert code == 0 and pred["step_time_s"] > 0
    assert "hardware differs" in err


def test_gpus_override_refuses_a_missing_device(tmp_path, plan_doc, capsys):
    doc = json.loads(json.dumps(plan_doc))
    doc["placements"][1]["shards"][0]["device"] = "node1/gpu3"  # a plan that uses the second node
    plan = _write(tmp_path, "plan.json", doc)
    assert _simulate(capsys, HW2, WL, plan)[0] == 0
    code, _, err = _simulate(capsys, HW2, WL, plan, "--gpus", "8")
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "--gpus 8" in error[0] and "node1/gpu3" in error[0]


@pytest.mark.parametrize("value", ["0", "-3", "nan"])
def test_bad_gpus_is_exit_2(tmp_path, plan_doc, capsys, value):
    plan = _write(tmp_path, "plan.json", plan_doc)
    capsys.readouterr()
    assert main(["simulate", HW, WL, plan, f"--gpus={value}"]) == 2
    assert "--gpus" in capsys.readouterr().err


def test_gpus_not_a_whole_node_is_exit_2(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    code, _, err = _simulate(capsys, HW2, WL, plan, "--gpus", "12")
    assert code == 2 and "multiple of 8" in err


def test_run_batch_with_nproc_is_refused(tmp_path, plan_doc, capsys):
    plan = _write(tmp_path, "plan.json", plan_doc)
    capsys.readouterr()
    assert main(["run", HW, WL, plan, "--batch", "512", "--nproc", "2", "--device", "cpu"]) == 2
    assert "--nproc" in capsys.readouterr().err


def test_check_plan_api_warns(plan_doc):
    from placer.plan import plan_from_json
    from placer.simulate import simulate
    from placer.specs import load_hardware, load_workload
    from placer.specs.plausible import SpecWarning
    from placer.topology import Topology

    from placer.commands._common import with_batch

    plan = plan_from_json(json.dumps(plan_doc))
    wl = with_batch(load_workload(WL), 300)
    with pytest.warns(SpecWarning, match="batch_size 256 -> 300"):
        pred = simulate(plan, Topology(load_hardware(HW), wl.dense.dtype), wl)
    assert pred["throughput_samples_per_s"] == pytest.approx(300 / pred["step_time_s"])
