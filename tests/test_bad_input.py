"""Bad input: `placer check FILE` exits 2 and names the file and the field, without a traceback."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from placer.cli import main

ROOT = Path(__file__).resolve().parents[1]
HW = yaml.safe_load((ROOT / "hardware_specs" / "dgx-h100.yaml").read_text())
WL = yaml.safe_load((ROOT / "workloads" / "tiny.yaml").read_text())
T = "dgx-h100"  # the template name inside dgx-h100.yaml


def hw(**edits):
    return _edit(HW, edits)


def wl(**edits):
    return _edit(WL, edits)


def _edit(base, edits):
    """Deep-copied document with edits applied; keys are dotted paths ('templates.x.gpus.count')."""
    doc = copy.deepcopy(base)
    for path, value in edits.items():
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        target = doc
        for k in keys[:-1]:
            target = target[k]
        if value is _DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return doc


_DELETE = object()

# (test id, document or raw text, field path that must appear in the message, words that must appear)
CASES = [
    ("unknown-field", hw(**{f"templates__{T}__gpus__hbm_speed": 5}), f"templates.{T}.gpus.hbm_speed", "unknown field"),
    ("unknown-top-field", wl(batchsize=5), "batchsize", "unknown field"),
    ("wrong-type", hw(**{f"templates__{T}__gpus__count": "eight"}), f"templates.{T}.gpus.count", "integer"),
    ("wrong-type-list", wl(tables__0__rows=[1, 2]), "tables[0].rows", "integer"),
    ("negative-capacity", hw(**{f"templates__{T}__gpus__hbm_GiB": -80}), f"templates.{T}.gpus.hbm_GiB",
     "greater than 0"),
    ("zero-capacity", hw(**{f"templates__{T}__host__dram_GiB": 0}), f"templates.{T}.host.dram_GiB", "greater than 0"),
    ("negative-rows", wl(tables__2__rows=-3), "tables[2].rows", "greater than 0"),
    ("efficiency-over-one", hw(**{f"templates__{T}__gpus__compute_efficiency": 1.5}),
     f"templates.{T}.gpus.compute_efficiency", "less than or equal to 1"),
    ("missing-field", hw(**{f"templates__{T}__gpus__hbm_bw_GBps": _DELETE}), f"templates.{T}.gpus.hbm_bw_GBps",
     "required"),
    ("empty-table-list", wl(tables=[]), "tables", "at least 1"),
    ("duplicate-table", wl(tables__1__name="t_users"), "tables[1].name", "duplicate table name 't_users'"),
    ("link-to-unknown-device", hw(**{f"templates__{T}__links__0__between": ["gpu*", "nvswitch9"]}),
     f"templates.{T}.links[0].between", "unknown device 'nvswitch9'"),
    ("feature-unknown-table", wl(features__2__table="t_nope"), "features[2].table", "unknown table 't_nope'"),
    ("unknown-template", hw(nodes=[{"template": "dgx-h200", "count": 2}]), "nodes[0].template",
     "unknown template 'dgx-h200'"),
    ("multi-node-without-fabric", hw(nodes=[{"template": T, "count": 2}]), "fabric", "required"),
    ("zipf-alpha-zero", wl(tables__0__access={"kind": "zipf", "alpha": 0}), "tables[0].access.alpha",
     "greater than 0"),
    ("zipf-alpha-negative", wl(tables__0__access={"kind": "zipf", "alpha": -1.1}), "tables[0].access.alpha",
     "greater than 0"),
    ("unknown-access-kind", wl(tables__0__access={"kind": "pareto", "alpha": 1}), "tables[0].access", "pareto"),
    ("non-monotone-cdf", wl(tables__4__access={"kind": "cdf", "points": [[0.1, 0.6], [0.2, 0.4]]}),
     "tables[4].access", "non-decreasing"),
    ("cdf-out-of-range", wl(tables__4__access={"kind": "cdf", "points": [[0.1, 1.5]]}),
     "tables[4].access.points[0][1]", "less than or equal to 1"),
    ("empty-histogram", wl(tables__5__access={"kind": "histogram", "bins": []}), "tables[5].access.bins",
     "at least 1"),
    ("cdf-file-missing", wl(tables__4__access={"kind": "cdf", "file": "nope.npy"}), "tables[4].access.file",
     "not found"),
    ("top-mlp-not-ending-in-one", wl(dense__top_mlp=[64, 2]), "dense.top_mlp", "1 output"),
    ("table-defaults-not-a-mapping", wl(table_defaults=[1, 2]), "table_defaults", "mapping"),
    ("empty-file", "", None, "empty"),
    ("whitespace-file", "   \n\n", None, "empty"),
    ("yaml-syntax-error", "name: x\ntables: [a, b\n", None, "YAML syntax error at line"),
    ("top-level-list", "- 1\n- 2\n", None, "mapping"),
    ("unknown-kind", "foo: 1\n", None, "cannot tell the kind"),
]


def _write(tmp_path: Path, name: str, doc) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def _check(path, capsys) -> str:
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 2, f"exit {code}, stderr: {err}"
    assert "Traceback" not in err
    return " ".join(err.split())  # rich may wrap long lines


@pytest.mark.parametrize("name, doc, field, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input_exits_2_naming_file_and_field(tmp_path, capsys, name, doc, field, words):
    path = _write(tmp_path, name, doc)
    err = _check(path, capsys)
    assert path.name in err
    if field:
        assert f"{field}:" in err, err
    assert words in err, err


def test_missing_file(tmp_path, capsys):
    err = _check(tmp_path / "no-such-spec.yaml", capsys)
    assert "no-such-spec.yaml" in err and "not found" in err


def test_directory_instead_of_file(tmp_path, capsys):
    err = _check(tmp_path, capsys)
    assert "directory" in err


def test_json_syntax_error(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x",}')
    err = _check(path, capsys)
    assert "bad.json" in err and "JSON syntax error at line 1" in err


def test_several_errors_are_all_listed(tmp_path, capsys):
    path = _write(tmp_path, "two", hw(**{f"templates__{T}__gpus__count": 0, f"templates__{T}__host__cpu_cores": -1}))
    err = _check(path, capsys)
    assert f"templates.{T}.gpus.count" in err and f"templates.{T}.host.cpu_cores" in err


def test_one_bad_file_among_good_ones_still_exits_2(tmp_path, capsys):
    bad = _write(tmp_path, "bad", wl(tables=[]))
    code = main(["check", str(ROOT / "workloads" / "tiny.yaml"), str(bad)])
    out = capsys.readouterr()
    assert code == 2 and "ok" in out.out and "bad.yaml" in out.err


def test_loaders_raise_spec_error_not_validation_error(tmp_path):
    from placer.errors import SpecError
    from placer.specs import load_hardware, load_workload

    with pytest.raises(SpecError) as exc:
        load_hardware(_write(tmp_path, "h", hw(**{f"templates__{T}__gpus__count": "x"})))
    assert exc.value.field == f"templates.{T}.gpus.count" and exc.value.file.endswith("h.yaml")
    with pytest.raises(SpecError) as exc:
        load_workload(_write(tmp_path, "w", wl(tables__0__access={"kind": "zipf", "alpha": 0})))
    assert exc.value.field == "tables[0].access.alpha"
