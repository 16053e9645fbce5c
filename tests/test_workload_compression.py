"""Workload fields that state what accuracy allows (placer/specs/compression.py): validated with clear errors,
applied through table_defaults, and said by check and solve while the planner does not offer them yet."""
from __future__ import annotations

import json

import pytest
import yaml

from placer.cli import main
from placer.specs import load_workload

BASE = {"schema_version": 1, "name": "w", "batch_size": 64, "dense": {"top_mlp": [1]},
        "tables": [{"name": "a", "rows": 1000, "dim": 16}, {"name": "b", "rows": 100, "dim": 8}]}


def write(tmp_path, **table_a) -> str:
    doc = json.loads(json.dumps(BASE))
    doc["tables"][0].update(table_a)
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_allowed_forms_load_and_default_to_none(tmp_path):
    wl = load_workload(write(tmp_path, compression={"qr": {"max_collisions": 4}, "tt": {"ranks": [8, 16]},
                                                    "int8": True}, frozen=True, node_local=True))
    a, b = wl.tables
    assert a.compression.allowed() == ["qr", "tt", "int8"] and a.compression.qr.combine == "mult"
    assert a.compression.tt.ranks == (8, 16) and a.frozen and a.node_local
    assert b.compression is None and not b.frozen and not b.node_local


@pytest.mark.parametrize("table, field, words", [
    ({"compression": {"qr": {"max_collisions": 1}}}, "max_collisions", "greater than or equal to 2"),
    ({"compression": {"qr": {"max_collisions": 600}}}, "compression.qr.max_collisions", "at most 500"),
    ({"compression": {"int8": True}}, "compression.int8", "frozen tables only"),
    ({"compression": {"tt": {"ranks": [8, 0]}}}, "ranks", "greater than 0"),
    ({"compression": {"tt": {"ranks": [8]}}}, "ranks", ""),
    ({"compression": {"qr": {"max_collisions": 4, "combine": "concat"}}}, "combine", "mult"),
    ({"compression": {"zstd": True}}, "compression.zstd", "unknown field"),
])
def test_nonsense_is_refused_naming_file_and_field(tmp_path, capsys, table, field, words):
    path = write(tmp_path, **table)
    assert main(["check", path]) == 2
    err = capsys.readouterr().err
    assert path in err and field in err and words in err and "Traceback" not in err


def test_table_defaults_allow_for_every_table(tmp_path):
    doc = json.loads(json.dumps(BASE))
    doc["table_defaults"] = {"compression": {"qr": {"max_collisions": 2}}, "node_local": True}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(doc))
    wl = load_workload(path)
    assert all(t.compression.qr.max_collisions == 2 and t.node_local for t in wl.tables)


def test_check_and_solve_say_what_the_planner_does_not_offer_yet(tmp_path, capsys):
    """tt of a frozen table is not on the planner's menu (said); qr, tt of a trained table, int8, frozen and
    node_local are (not said)."""
    path = write(tmp_path, compression={"qr": {"max_collisions": 4}, "tt": {"ranks": [4, 4]}, "int8": True},
                 frozen=True, node_local=True)
    assert main(["check", path]) == 0
    out = capsys.readouterr().out
    assert "allow compression (tt) but are not trained" in out and "node_local" not in out
    assert "qr" not in out and "int8" not in out and "frozen" not in out
    assert main(["solve", "hardware_specs/h100-pcie-host.yaml", path, "--json", "--method", "greedy_size"]) == 0
    captured = capsys.readouterr()
    assert "note: 1 table(s) allow compression (tt)" in captured.err
    json.loads(captured.out)  # stdout stays JSON
    assert load_workload(write(tmp_path)).options_not_planned() == []
    assert load_workload(write(tmp_path, compression={"qr": {"max_collisions": 4}})).options_not_planned() == []
    assert load_workload(write(tmp_path, compression={"tt": {"ranks": [4, 4]}})).options_not_planned() == []
