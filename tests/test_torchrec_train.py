"""Issue 40: from ``placer solve`` to a DMP training run with no hand edits. The export's TorchRec names (the
dlrm preset, a name-map file, bad maps refused with exit 2 naming the file and field), module-path presets,
EmbeddingBagConfigs and the generated module's self-import; then examples/train_torchrec.py trains the export on
2 gloo ranks for a few steps and prints the measured step beside placer's prediction (no timing asserts).
Issue 51: the trainer's model is TorchRec's DLRM (DLRM_DCN) of the workload's dense section where TorchRec can
express it (tests/data/torchrec-dlrm-small.yaml; its DCNv2 twin), with the dense parameters of placer's
DenseDLRM, else placer's own DenseDLRM over the sharded tables with the reason (torchrec-dmp-small.yaml: concat,
dims 4-32); --head forces one (dlrm where it cannot: exit 2)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import yaml

from placer.cli import main
from tests.conftest import ROOT, require_torchrec

DATA = ROOT / "tests/data"
HW, WL = str(DATA / "torchrec-dmp-cpu2.yaml"), str(DATA / "torchrec-dmp-small.yaml")
DLRM_WL = str(DATA / "torchrec-dlrm-small.yaml")
TRAIN = str(ROOT / "examples/train_torchrec.py")
DLRM_TABLES_TRAIN = "model.sparse_arch.embedding_bag_collection"


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
    r = subprocess.run([sys.executable, TRAIN, str(out), HW, WL, "--steps", "3"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks (gloo)" in r.stdout and "3 timed steps" in r.stdout, r.stdout
    # torchrec-dmp-small's dense model (concat, tables 4-32 wide) is not TorchRec's DLRM: placer's DenseDLRM, and why
    head = next(ln for ln in r.stdout.splitlines() if ln.startswith("model:"))
    assert "placer's DenseDLRM (at placer_dense; tables at model.sparse_arch.embedding_bag_collection)" in head, head
    assert "bottom MLP 4-16, concat interaction of 6 features (4-32 wide), top MLP 8-1" in head, head
    assert "833 dense parameters" in head and "no concat" in head, head
    assert "embedding dims differ (4, 8, 12, 16, 32)" in head, head
    assert "measured median step" in r.stdout and "placer predicted step" in r.stdout, r.stdout
    measured = [ln for ln in r.stdout.splitlines() if "measured median" in ln or "placer predicted" in ln]
    assert all(ln.rstrip().endswith(" ms") for ln in measured), measured


def test_train_example_trains_placers_dense_model(plan_path, tmp_path):
    """A workload TorchRec's DLRM cannot express (torchrec-dmp-small: concat, tables 4-32 wide) trains under --head
    auto as placer's DenseDLRM over DMP's sharded tables on 2 gloo ranks: the dense parameters are DenseDLRM's, the
    loss is finite and moves; --head dlrm exits 2 naming why, with no traceback."""
    require_torchrec()
    from placer.program.dense_model import DenseDLRM
    from placer.specs import load_workload

    out = tmp_path / "plan.torchrec.json"
    assert main(["export", "--torchrec", HW, WL, str(plan_path), "-o", str(out), "--device", "cpu",
                 "--names", "dlrm", "--module-path", "dlrm-train"]) == 0
    res = _train_json(out, WL)
    m = res["dense_model"]
    assert m["kind"] == "placer_dense" and m["class"] == "DenseDLRM", m
    assert "no concat" in m["why"] and "dims differ (4, 8, 12, 16, 32)" in m["why"], m["why"]
    assert (m["dense_path"], m["module_path"]) == ("placer_dense", "model.sparse_arch.embedding_bag_collection")
    assert (m["dense_in_features"], m["bottom_mlp"], m["top_mlp"]) == (4, [16], [8, 1])
    assert (m["interaction"], m["embedding_dims"], m["sparse_features"]) == ({"kind": "concat"}, [4, 8, 12, 16, 32], 6)
    assert (m["dtype_run"], m["optimizer"]) == ("fp32", {"name": "sgd", "lr": 0.1})
    assert m["parameters"] == sum(p.numel() for p in DenseDLRM(load_workload(WL)).parameters()) == 833
    assert res["batch_size"] == 32 and len(res["losses"]) == 4
    assert all(math.isfinite(x) for x in res["losses"]) and len(set(res["losses"])) > 1, res["losses"]
    r = subprocess.run([sys.executable, TRAIN, str(out), HW, WL, "--head", "dlrm"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--head dlrm: TorchRec's DLRM classes cannot express" in r.stderr and "no concat" in r.stderr, r.stderr


def test_placer_head_feeds_features_in_workload_order():
    """The placer_dense model (unsharded, one process) gives DenseDLRM the pooled features in the workload's order
    by their TorchRec names, whatever the EmbeddingBagCollection's order: its logits equal DenseDLRM's of the
    collection's outputs picked by name."""
    require_torchrec()
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from placer.specs import load_workload
    from placer.torchrec_io.dmp_models import build, choose, feature_keys
    from placer.torchrec_io.plan_builder import embedding_bag_configs

    wl = load_workload(WL)
    names = {f.name: f"cat_{j}" for j, f in enumerate(wl.resolved_features)}
    tables = {t.name: t for t in wl.tables}
    configs = [{"name": f"t_{t}", "num_embeddings": tables[t].rows, "embedding_dim": tables[t].dim,
                "feature_names": [names[f.name] for f in wl.resolved_features if f.table == t],
                "pooling": "SUM", "data_type": "FP32"}
               for t in reversed(list(tables))]  # the collection's order: the workload's reversed
    doc = {"module_path": "a.tables", "embedding_bag_configs": configs, "names": {"features": names}}
    spec = choose(doc, wl, "placer")
    assert spec["kind"] == "placer_dense" and spec["why"] == "asked for (--head placer)"
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables=embedding_bag_configs(doc), device=torch.device("cpu"))
    model, _, dense = build(spec, doc, wl, ebc, torch.device("cpu"))
    keys = [k for c in configs for k in c["feature_names"]]
    batch = 5
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=keys, lengths=torch.ones(len(keys) * batch, dtype=torch.long),
        values=torch.cat([torch.arange(batch) % min(tables[t].rows for t in tables) for _ in keys]))
    x = torch.randn(batch, wl.dense.num_dense_features)
    pooled = ebc(kjt).to_dict()
    want = model.placer_dense(x, [pooled[k] for k in feature_keys(doc, wl)])
    assert torch.equal(model(x, kjt), want)
    assert not torch.allclose(want, model.placer_dense(x, [pooled[k] for k in keys]))  # control: the EBC's order
    assert dense == sum(p.numel() for p in model.placer_dense.parameters())


def _dlrm_export(tmp_path, wl: str, module_path: str = "dlrm-train"):
    plan, out = tmp_path / "plan.json", tmp_path / "plan.torchrec.json"
    assert main(["solve", HW, wl, "-o", str(plan), "--method", "greedy_size"]) == 0
    assert main(["export", "--torchrec", HW, wl, str(plan), "-o", str(out), "--device", "cpu", "--names", "dlrm",
                 "--module-path", module_path]) == 0
    return out


def _train_json(export, wl: str, *extra: str) -> dict:
    r = subprocess.run([sys.executable, TRAIN, str(export), HW, wl, "--steps", "3", "--batch-size", "32", "--json",
                        *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("interaction", ["dot", "dcnv2"])
def test_train_example_trains_torchrecs_dlrm(tmp_path, interaction):
    """A workload TorchRec's DLRM expresses trains as DLRM (dot) or DLRM_DCN (dcnv2) in DLRMTrain on 2 gloo ranks:
    the JSON names the workload's layer sizes and interaction, the dense part has exactly the parameters of
    placer's DenseDLRM (the model placer prices), the loss is finite and moves; the old fields stay."""
    require_torchrec()
    from placer.program.dense_model import DenseDLRM
    from placer.specs import load_workload

    wl_path = DLRM_WL
    if interaction == "dcnv2":
        spec = yaml.safe_load(open(DLRM_WL, encoding="utf-8"))
        spec["name"], spec["dense"]["interaction"] = "torchrec-dcn-small", {"kind": "dcnv2", "layers": 2, "rank": 8}
        wl_path = str(tmp_path / "dcn.yaml")
        (tmp_path / "dcn.yaml").write_text(yaml.safe_dump(spec))
    res = _train_json(_dlrm_export(tmp_path, wl_path), wl_path)
    wl = load_workload(wl_path)
    m = res["dense_model"]
    assert m["kind"] == "torchrec_dlrm" and m["why"] is None, m
    assert m["class"] == {"dot": "DLRM", "dcnv2": "DLRM_DCN"}[interaction] and m["wrapper"] == "DLRMTrain"
    assert (m["dense_in_features"], m["bottom_mlp"], m["top_mlp"]) == (4, [32, 16], [24, 8, 1])
    assert m["interaction"] == wl.dense.interaction.model_dump(mode="json")
    assert (m["embedding_dim"], m["sparse_features"], m["dtype_run"]) == (16, 4, "fp32")
    assert m["optimizer"] == {"name": "sgd", "lr": 0.1}
    assert m["parameters"] == sum(p.numel() for p in DenseDLRM(wl).parameters())
    assert {"world_size", "backend", "batch_size", "step_times_s", "median_step_s", "losses",
            "predicted_step_s", "predicted_from"} <= set(res)
    assert res["batch_size"] == 32 and len(res["step_times_s"]) == 3 and len(res["losses"]) == 4
    assert all(math.isfinite(x) for x in res["losses"]) and len(set(res["losses"])) > 1, res["losses"]


def test_train_example_head_linear_and_bad_input(tmp_path):
    """--head linear keeps the old model on a DLRM workload (DLRM at the export's default module path); a bad
    --head or a malformed EmbeddingBagConfig exits 2 with a message, no traceback."""
    require_torchrec()
    export = _dlrm_export(tmp_path, DLRM_WL, module_path="dlrm")
    res = _train_json(export, DLRM_WL, "--head", "linear")
    assert res["dense_model"]["kind"] == "linear_head" and "--head linear" in res["dense_model"]["why"]
    assert res["dense_model"]["parameters"] == 4 * 16 + 1
    r = subprocess.run([sys.executable, TRAIN, str(export), HW, DLRM_WL, "--head", "mlp"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--head" in r.stderr and "Traceback" not in r.stderr, r.stderr
    doc = json.loads(export.read_text())
    doc["embedding_bag_configs"][1]["embedding_dim"] = "16"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, TRAIN, str(bad), HW, DLRM_WL], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and "embedding_bag_configs[1]" in r.stderr and "Traceback" not in r.stderr, r.stderr


def _doc(dims, module_path="model.sparse_arch.embedding_bag_collection"):
    return {"module_path": module_path, "embedding_bag_configs": [
        {"name": f"t{i}", "embedding_dim": d, "feature_names": [f"f{i}"]} for i, d in enumerate(dims)]}


def test_dense_model_choice():
    """dmp_models.choose without torch: under auto TorchRec's DLRM where its classes can build the workload's dense
    model, else placer's DenseDLRM with every rule that failed, else (features the export lacks) the linear head;
    a forced head that cannot run is a ValueError naming why."""
    from placer.specs import load_workload
    from placer.torchrec_io.dmp_models import choose

    wl = load_workload(DLRM_WL)
    assert choose(_doc([16, 16, 16]), wl)["kind"] == "torchrec_dlrm"
    assert choose(_doc([16], "sparse_arch.embedding_bag_collection"), wl)["wrapper"] is None
    assert choose(_doc([16], "a.b.sparse_arch.embedding_bag_collection"), wl)["wrapper"] == "a.b"
    tiny = load_workload(ROOT / "workloads/tiny.yaml")  # dot, but tables 8, 16 and 32 wide
    tiny_doc = {"module_path": "placer_dense", "embedding_bag_configs": [
        {"name": t.name, "embedding_dim": t.dim, "feature_names": [f.name for f in tiny.resolved_features
                                                                   if f.table == t.name]} for t in tiny.tables]}
    got = choose(tiny_doc, tiny)
    assert got["kind"] == "placer_dense" and "dims differ (8, 16, 32)" in got["why"], got
    assert got["dense_path"] == "placer_dense_" and got["embedding_dims"] == [8, 16, 32]  # beside the path's root
    with pytest.raises(ValueError, match="--head dlrm: TorchRec's DLRM classes cannot express .*dims differ"):
        choose(tiny_doc, tiny, head="dlrm")
    assert choose(tiny_doc, tiny, head="linear")["in_features"] == 32 + 8 + 16 * 5
    cases = [({"top_mlp": [1]}, "OverArch"), ({"bottom_mlp": [32]}, "ends at 32"),
             ({"bottom_mlp": []}, "bottom_mlp is empty"), ({"interaction": {"kind": "concat"}}, "no concat")]
    dlrm_doc = {"module_path": DLRM_TABLES_TRAIN, "embedding_bag_configs": [
        {"name": t.name, "embedding_dim": t.dim, "feature_names": [f.name for f in wl.resolved_features
                                                                   if f.table == t.name]} for t in wl.tables]}
    for dense, why in cases:
        other = wl.model_validate({**wl.model_dump(mode="json"), "dense": {**wl.dense.model_dump(mode="json"),
                                                                            **dense}})
        got = choose(dlrm_doc, other)
        assert got["kind"] == "placer_dense" and why in got["why"], (dense, got)
        with pytest.raises(ValueError, match=why):
            choose(dlrm_doc, other, head="dlrm")
    got = choose({**dlrm_doc, "module_path": "emb"}, wl)
    assert got["kind"] == "placer_dense" and "module_path 'emb'" in got["why"] and got["module_path"] == "emb"
    assert choose(dlrm_doc, wl, head="placer")["why"] == "asked for (--head placer)"
    # an export whose features are not the workload's: no DenseDLRM (auto: the linear head, and why)
    got = choose(_doc([16, 16]), load_workload(WL))
    assert got["kind"] == "linear_head" and "no feature f_big" in got["why"] and "no concat" in got["why"], got
    with pytest.raises(ValueError, match="--head placer: .*no feature f_big"):
        choose(_doc([16, 16]), load_workload(WL), head="placer")
    assert choose(_doc([16]), wl, head="linear")["why"] == "asked for (--head linear)"
    with pytest.raises(ValueError, match="--head"):
        choose(_doc([16]), wl, head="mlp")


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
