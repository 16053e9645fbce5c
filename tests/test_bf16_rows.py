"""bf16 rows (issue 52): offered where a table allows them, with fp16's bytes and, unmeasured, fp16's op costs;
refused where not allowed; run by placer's runner; exported to TorchRec as DataType.BF16 and read back."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from placer.cli import main
from placer.cost import CostModel
from placer.forms import table_wise
from placer.options import OptionConfig, table_options
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
HW = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"
TINY = (ROOT / "workloads" / "tiny.yaml").read_text()
ALLOW = "{name: t_users, rows: 20000, dim: 32, allow_bf16: true,"


def _workload(tmp_path: Path, extra: str = "", allow: bool = True) -> Path:
    text = TINY.replace("name: tiny\n", "name: tiny-bf16\n", 1)
    if allow:
        text = text.replace("{name: t_users, rows: 20000, dim: 32,", ALLOW)
    path = tmp_path / "bf16.yaml"
    path.write_text(text + extra)
    return path


def _model(path: Path, hw: Path = HW) -> CostModel:
    wl = load_workload(path)
    return CostModel(Topology(load_hardware(hw), wl.dense.dtype), wl)


def test_bf16_is_on_the_menu_only_where_a_table_allows_it(tmp_path):
    model = _model(_workload(tmp_path))
    users = model.wl.tables[model.wl.table_index["t_users"]]
    items = model.wl.tables[model.wl.table_index["t_items"]]
    assert {p.precision for p in table_options(users, model.topo, model.wl)} == {"fp32", "bf16"}
    assert {p.precision for p in table_options(items, model.topo, model.wl)} == {"fp32"}
    assert {p.precision for p in table_options(users, model.topo, model.wl, OptionConfig(fp16=False))} == {"fp32"}


def test_a_bf16_row_has_fp16_bytes_and_unmeasured_fp16_costs(tmp_path):
    text = _workload(tmp_path).read_text().replace(ALLOW, ALLOW + " allow_fp16: true,")
    path = tmp_path / "both.yaml"
    path.write_text(text)
    model = _model(path)
    t = model.wl.tables[model.wl.table_index["t_users"]]
    gpu = model.topo.gpus[0]
    cost = {prec: model.placement_cost(table_wise.placement(t, gpu, prec, t.rows)) for prec in ("fp32", "fp16", "bf16")}
    assert cost["bf16"].memory == cost["fp16"].memory and sum(cost["bf16"].memory.values()) < sum(
        cost["fp32"].memory.values())
    assert dict(cost["bf16"].loads) == pytest.approx(dict(cost["fp16"].loads))


def test_a_plan_with_bf16_rows_a_table_does_not_allow_is_refused(tmp_path, capsys):
    allowed = _workload(tmp_path)
    plan = tmp_path / "plan.json"
    assert main(["solve", str(HW), str(allowed), "--work-limit", "2000", "--out", str(plan), "--json"]) == 0
    doc = json.loads(plan.read_text())
    for p in doc["placements"]:
        if p["table"] == "t_users":
            p["precision"] = "bf16"
    plan.write_text(json.dumps(doc))
    strict = tmp_path / "strict"
    strict.mkdir()
    capsys.readouterr()
    assert main(["check", str(plan), "--hardware", str(HW), "--workload", str(_workload(strict, allow=False))]) == 2
    assert "may not be stored at bf16 (allow_bf16 is false)" in capsys.readouterr().err


def test_the_runner_trains_bf16_rows_and_torchrec_gets_them_back(tmp_path):
    """A plan that keeps t_users at bf16 (a precision constraint makes it so) runs a step on the CPU, exports as
    DataType.BF16 and imports as bf16."""
    wl = _workload(tmp_path, "\nconstraints:\n  tables:\n    - {tables: [t_users], precisions: [bf16]}\n")
    cpu = ROOT / "hardware_specs" / "measured-cpu-2026-11-23.yaml"
    plan = tmp_path / "cpu.json"
    assert main(["solve", str(cpu), str(wl), "--work-limit", "2000", "--out", str(plan), "--json"]) == 0
    assert any(p["precision"] == "bf16" for p in json.loads(plan.read_text())["placements"])
    assert main(["run", str(cpu), str(wl), str(plan), "--steps", "2", "--warmup", "1", "--json"]) == 0
    gpu_plan, export, back = tmp_path / "gpu.json", tmp_path / "export.json", tmp_path / "back.json"
    assert main(["solve", str(HW), str(wl), "--work-limit", "2000", "--out", str(gpu_plan), "--json"]) == 0
    assert main(["export", "--torchrec", str(HW), str(wl), str(gpu_plan), "-o", str(export)]) == 0
    doc = json.loads(export.read_text())
    assert {c["name"]: c["data_type"] for c in doc["embedding_bag_configs"]}["t_users"] == "BF16"
    assert main(["import", "--torchrec", str(export), str(HW), str(wl), "-o", str(back)]) == 0
    assert {p["table"]: p["precision"] for p in json.loads(back.read_text())["placements"]}["t_users"] == "bf16"
