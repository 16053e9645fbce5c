"""Issue 40: from ``placer solve`` to a DMP training run with no hand edits. The export's TorchRec names (the
dlrm preset, a name-map file, bad maps refused with exit 2 naming the file and field), module-path presets,
EmbeddingBagConfigs and the generated module's self-import; then examples/train_torchrec.py trains the export on
2 gloo ranks for a few steps and prints the measured step beside placer's prediction (no timing asserts)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from placer.cli import main
from tests.conftest import ROOT, require_torchrec

DATA = ROOT / "tests/data"
HW, WL = str(DATA / "torchrec-dmp-cpu2.yaml"), str(DATA / "torchrec-dmp-small.yaml")


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["solve", HW, WL, "-o", str(out), "--method", "greedy_size"]) == 0
    return out


def test_dlrm_preset_names_and_configs(plan_path, tmp_path, capsys):
    out = tmp_path / "my.plan.json"
    assert main(["export", "--torchrec", HW, WL, str(plan_path), "-o", str(out), "--names", "dlrm",
                 "--module-path", "dlrm-train"]) == 0
    doc = json.loads(out.read_text())
    assert doc["module_path"] == "model.sparse_arch.embedding_bag_collection"
    assert list(doc["tables"]) == [f"t_cat_{i}" for i in range(5)]
    assert [c["name"] for c in doc["embedding_bag_configs"]] == list(doc["tables"])
    big = doc["embedding_bag_configs"][0]
    assert (big["num_embeddings"], big["embedding_dim"], big["feature_names"]) == (20001, 16, ["cat_0"])
    assert doc["embedding_bag_configs"][4]["feature_names"] == ["cat_4", "cat_5"]  # small: two features
    py = (tmp_path / "my_plan.py").read_text()
    assert "from my_plan import" in py and "from plan_builder import" not in py
    # the import maps TorchRec's names back to the workload's
    back = tmp_path / "back.json"
    assert main(["import", "--torchrec", str(out), HW, WL, "-o", str(back)]) == 0
    assert {p["table"] for p in json.loads(back.read_text())["placements"]} == {"big", "wide", "mid", "odd", "small"}


def test_exactly_only_without_notes():
    from placer.commands.export import mapping_summary

    pred = {"plan_step_time_s": 1e-3, "mapped_step_time_s": 1e-3, "exact": True}
    assert "exactly" in mapping_summary(pred, 0)
    assert "exactly" not in mapping_summary(pred, 4) and "4 table(s)" in mapping_summary(pred, 4)


def test_name_map_file(plan_path, tmp_path):
    names = tmp_path / "names.yaml"
    names.write_text("tables: {big: emb_big}\nfeatures: {f_big: user_id}\n")
    out = tmp_path / "p.json"
    assert main(["export", "--torchrec", HW, WL, str(plan_path), "-o", str(out), "--names", str(names)]) == 0
    doc = json.loads(out.read_text())
    assert "emb_big" in doc["tables"] and "wide" in doc["tables"]
    assert doc["embedding_bag_configs"][0]["feature_names"] == ["user_id"]


@pytest.mark.parametrize("text,field", [
    ("tables: {nope: x}\n", "tables.nope"),
    ("tables: {big: wide}\n", "tables.big"),
    ("tables: {big: 3}\n", "tables.big"),
    ("features: {f_big: f_wide}\n", "features.f_big"),
    ("tabels: {big: x}\n", "tabels"),
])
def test_bad_name_map_exits_2(plan_path, tmp_path, capsys, text, field):
    names = tmp_path / "names.yaml"
    names.write_text(text)
    assert main(["export", "--torchrec", HW, WL, str(plan_path), "-o", str(tmp_path / "p.json"),
                 "--names", str(names)]) == 2
    err = capsys.readouterr().err
    assert str(names) in err and field in err, err


def test_bad_module_path_exits_2(plan_path, tmp_path, capsys):
    assert main(["export", "--torchrec", HW, WL, str(plan_path), "-o", str(tmp_path / "p.json"),
                 "--module-path", "model..x"]) == 2
    assert "--module-path" in capsys.readouterr().err


def test_generated_module_builds_configs(plan_path, tmp_path):
    require_torchrec()
    out = tmp_path / "t.json"
    assert main(["export", "--torchrec", HW, WL, str(plan_path), "-o", str(out), "--names", "dlrm"]) == 0
    code = ("import t; c = t.embedding_bag_configs(); print(c[1].name, c[1].num_embeddings, c[1].embedding_dim, "
            "c[1].feature_names); print(list(t.sharding_plan().plan))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "t_cat_1 3002 32 ['cat_1']" in r.stdout and "sparse_arch.embedding_bag_collection" in r.stdout


def test_train_example_on_two_gloo_ranks(plan_path, tmp_path):
    """solve -> export (dlrm names, DLRMTrain path, cpu) -> examples/train_torchrec.py: 2 ranks, 3 steps."""
    require_torchrec()
    out = tmp_path / "plan.torchrec.json"
    assert main(["export", "--torchrec", HW, WL, str(plan_path), "-o", str(out), "--device", "cpu",
                 "--names", "dlrm", "--module-path", "dlrm-train"]) == 0
    r = subprocess.run([sys.executable, str(ROOT / "examples/train_torchrec.py"), str(out), HW, WL, "--steps", "3"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks (gloo)" in r.stdout and "3 timed steps" in r.stdout, r.stdout
    assert "measured median step" in r.stdout and "placer predicted step" in r.stdout, r.stdout
    measured = [ln for ln in r.stdout.splitlines() if "measured median" in ln or "placer predicted" in ln]
    assert all(ln.rstrip().endswith(" ms") for ln in measured), measured


_RANK_MAIN = """
import atexit, sys
from pathlib import Path
from placer.torchrec_io.dmp_check import _rank_main

out = Path(sys.argv[1])
atexit.register(lambda: (out / "teardown").write_text("ran"))

def worker(rank, job):
    if job["fail"]:
        raise RuntimeError("the worker failed")
    (out / f"rank{rank}.json").write_text("{}")

_rank_main(0, worker, {"fail": sys.argv[2] == "fail"})
"""


@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_a_rank_that_returned_skips_the_interpreters_teardown(tmp_path, mode):
    """TorchRec/FBGEMM on gloo abort ~1 rank process in 10 in the interpreter's teardown, after the rank's work:
    a rank whose worker returned leaves with exit code 0 before any teardown (here: an atexit hook) runs; a
    worker's exception still ends the process with an error."""
    r = subprocess.run([sys.executable, "-c", _RANK_MAIN, str(tmp_path), mode], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    if mode == "ok":
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "rank0.json").exists() and not (tmp_path / "teardown").exists()
    else:
        assert r.returncode != 0 and "the worker failed" in r.stderr
        assert (tmp_path / "teardown").exists()
