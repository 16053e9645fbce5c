"""The dense model's optimizer apart from the embedding tables' (issue 52): ``optimizer`` is the tables' (their
state beside every row, their update in the embedding backward), ``dense_optimizer`` the dense model's (its state
on every GPU, its update in the dense step), by default the tables'. Every reader of the dense update reads the
dense one; a workload without it prices exactly as before."""
from __future__ import annotations

import pytest
import torch

from placer.cli import main
from placer.errors import SpecError
from placer.planner.solve import SolveConfig, solve
from placer.program.build import ProgramBuilder
from placer.program.dense import OPTIMIZER_STATE_TENSORS, _key, trace
from placer.program.ops import DENSE
from placer.runner.memory import estimate_needs
from placer.runner.trainer import Trainer
from placer.simulate import simulate
from placer.specs.workload import DenseOptimizerSpec, OptimizerSpec, load_workload
from tests.conftest import ROOT, require_torchrec, shipped_pair

GiB = 2**30


def _with(wl, tables: str, dense: str | None, lr: float | None = None):
    """``wl`` with the tables' optimizer ``tables`` and the dense model's ``dense`` (None: no dense_optimizer)."""
    update = {"optimizer": OptimizerSpec(name=tables, lr=wl.optimizer.lr),
              "dense_optimizer": None if dense is None else DenseOptimizerSpec(name=dense, lr=lr)}
    return wl.model_copy(update=update)


@pytest.fixture(scope="module")
def tiny():
    return shipped_pair("dgx-h100", "tiny")


def _dense_bytes(topo, wl) -> float:
    """The dense model's bytes on the first GPU (weights, gradients, optimizer state, the step's peak)."""
    return next(b.bytes for b in ProgramBuilder(topo, wl).base_buffers()
                if b.purpose == "dense model" and b.memory == topo.memory_of(topo.gpus[0]))


def _dense_ops(topo, wl):
    return [op for op in ProgramBuilder(topo, wl).base_ops() if op.phase == DENSE]


def test_default_is_the_tables_optimizer_and_keys_as_before(tiny):
    """No dense_optimizer: the dense model's is the tables' own spec (every reader sees what it saw before the
    field existed), and the dense trace's key has no dense_optimizer in it (traces cached before still serve)."""
    _, wl = tiny
    assert wl.dense_optimizer is None and wl.resolved_dense_optimizer is wl.optimizer
    assert "dense_optimizer" not in _key(wl)
    explicit = _with(wl, "sgd", "sgd", lr=0.05)
    assert "dense_optimizer" in _key(explicit)
    # lr defaults to the tables'
    assert _with(wl, "sgd", "adam").resolved_dense_optimizer == OptimizerSpec(name="adam", lr=wl.optimizer.lr)
    assert _with(wl, "sgd", "adam", lr=0.001).resolved_dense_optimizer.lr == 0.001


def test_default_prices_as_before(tiny):
    """tiny @ dgx-h100 with its dense optimizer written out as the default (sgd, lr 0.05) has the same predicted
    step, buffers and dense ops as tiny itself; its plan is the same plan."""
    topo, wl = tiny
    explicit = _with(wl, "sgd", "sgd", lr=wl.optimizer.lr)
    plan = solve(topo, wl, SolveConfig(method="greedy_size"))
    again = solve(topo, explicit, SolveConfig(method="greedy_size"))
    assert again.placements == plan.placements
    assert simulate(plan, topo, explicit)["step_time_s"] == simulate(plan, topo, wl)["step_time_s"]
    assert _dense_bytes(topo, explicit) == _dense_bytes(topo, wl)
    assert [(op.kind, op.seconds) for op in _dense_ops(topo, explicit)] == \
        [(op.kind, op.seconds) for op in _dense_ops(topo, wl)]


def test_dense_memory_is_the_dense_optimizers(tiny):
    """Adam on the dense model keeps two fp32 values per dense parameter, SGD none: the dense model's memory on
    every GPU differs by at least 8 bytes a parameter; the tables' optimizer does not move it, and the tables'
    state follows the tables' optimizer, not the dense one."""
    topo, wl = tiny
    params = trace(wl, wl.batch_size, "cuda").params
    sgd, adam = _dense_bytes(topo, _with(wl, "sgd", "sgd")), _dense_bytes(topo, _with(wl, "sgd", "adam"))
    assert adam - sgd >= params * 4 * (OPTIMIZER_STATE_TENSORS["adam"] - OPTIMIZER_STATE_TENSORS["sgd"])
    assert _dense_bytes(topo, _with(wl, "adam", "sgd")) == sgd  # the tables' adam is not the dense model's
    assert _dense_bytes(topo, _with(wl, "sgd", "adagrad")) - sgd >= params * 4
    t = wl.tables[0]
    for tables, dense, per_row in (("sgd", "adam", 0), ("adam", "sgd", 2 * t.dim * 4),
                                   ("rowwise_adagrad", "adam", 4), ("adagrad", "sgd", t.dim * 4)):
        b = ProgramBuilder(topo, _with(wl, tables, dense))
        assert b.state_bytes(t.name, t.dim) == pytest.approx(per_row), (tables, dense)
        assert b.optimizer == tables and b.dense_optimizer == dense
    plan = plan_of(topo, wl)
    need = {d: estimate_needs(plan, _with(wl, "sgd", d), topo, "cpu", 1).device["dense model"] for d in ("sgd", "adam")}
    assert need["adam"] - need["sgd"] >= params * 8  # the runner's memory check reads it too


def plan_of(topo, wl):
    return solve(topo, wl, SolveConfig(method="greedy_size"))


def test_dense_step_runs_the_dense_optimizers_update(tiny):
    """The dense step's optimizer ops are the dense optimizer's: Adam's update issues more ops and moves more
    bytes than SGD's, and the tables' optimizer leaves the dense step as it is."""
    topo, wl = tiny
    staged = {d: [op for op in trace(_with(wl, "sgd", d), wl.batch_size, "cuda").ops if op.stage == "optimizer"]
              for d in ("sgd", "adam")}
    assert len(staged["adam"]) > len(staged["sgd"])
    assert sum(op.bytes for op in staged["adam"]) > sum(op.bytes for op in staged["sgd"])
    sgd = sum(op.seconds for op in _dense_ops(topo, _with(wl, "sgd", "sgd")))
    adam = sum(op.seconds for op in _dense_ops(topo, _with(wl, "sgd", "adam")))
    assert adam > sgd
    assert sum(op.seconds for op in _dense_ops(topo, _with(wl, "adam", "sgd"))) == pytest.approx(sgd, rel=1e-12)


def test_runner_builds_each_optimizer(tiny):
    """placer's runner: the tables' sparse optimizer from ``optimizer``, the dense model's torch optimizer from
    ``dense_optimizer`` at its lr."""
    topo, wl = tiny
    mixed = _with(wl, "sgd", "adam", lr=0.002)
    tr = Trainer(plan_of(topo, mixed), mixed, torch.device("cpu"), topo, seed=0, pool_batches=1)
    assert tr.optimizer.name == "sgd" and isinstance(tr.dense_opt, torch.optim.Adam)
    assert tr.dense_opt.param_groups[0]["lr"] == 0.002


def test_torchrec_dense_model_gets_the_dense_optimizer():
    """The DMP trainer's dense model (dmp_models.choose) takes the dense optimizer, the linear head its lr."""
    from placer.torchrec_io.dmp_models import choose

    wl = _with(load_workload(ROOT / "tests/data/torchrec-dlrm-small.yaml"), "rowwise_adagrad", "adam", lr=0.003)
    doc = {"module_path": "model.sparse_arch.embedding_bag_collection", "embedding_bag_configs": [
        {"name": t.name, "embedding_dim": t.dim, "feature_names": [f.name for f in wl.resolved_features
                                                                   if f.table == t.name]} for t in wl.tables]}
    assert choose(doc, wl)["optimizer"] == {"name": "adam", "lr": 0.003}
    assert choose(doc, wl, head="linear")["optimizer"] == {"name": "sgd", "lr": 0.003}


def test_mlperf_v2_tables_full_adagrad_dense_adagrad():
    """mlperf-dlrm-v2 as its reference trains it (the file's header): full Adagrad on the tables (FBGEMM's
    EXACT_ADAGRAD, one fp32 value per element: weights + state = 2 x weights) and Adagrad on the dense model, lr
    0.005 both. Row-wise Adagrad on its tables instead would hold 97.4 - 0.76 = 96.6 GiB less state (one value
    per row), its dense model's memory unchanged."""
    wl = load_workload(ROOT / "workloads/mlperf-dlrm-v2.yaml")
    assert wl.optimizer == OptimizerSpec(name="adagrad", lr=0.005)
    assert wl.resolved_dense_optimizer == OptimizerSpec(name="adagrad", lr=0.005)
    weights = wl.total_bytes(with_optimizer=False)
    assert wl.total_bytes() == pytest.approx(2 * weights)
    rowwise = wl.model_copy(update={"optimizer": OptimizerSpec(name="rowwise_adagrad", lr=0.005)})
    rows = sum(t.rows for t in wl.tables)
    assert rowwise.total_bytes() == pytest.approx(weights + rows * 4)
    assert (wl.total_bytes() - rowwise.total_bytes()) / GiB == pytest.approx(96.6, abs=0.05)
    assert rowwise.resolved_dense_optimizer == wl.resolved_dense_optimizer  # written out: the dense part stays


@pytest.mark.parametrize("name", ["mlperf-dlrm-v1", "mlperf-dlrm-v1-qr", "criteo-kaggle-dlrm"])
def test_one_sgd_for_tables_and_dense(name):
    """The DLRM reference trains tables and MLPs with one torch.optim.SGD: no dense_optimizer, the tables'."""
    wl = load_workload(ROOT / f"workloads/{name}.yaml")
    assert wl.optimizer.name == "sgd" and wl.dense_optimizer is None and wl.resolved_dense_optimizer is wl.optimizer


def test_bad_dense_optimizer_is_a_spec_error(tmp_path, capsys):
    """rowwise_adagrad (an embedding optimizer) or an unknown name or lr for the dense model: exit 2 naming the
    file and the field, no traceback."""
    text = (ROOT / "workloads/tiny.yaml").read_text()
    for bad, words in (("{name: rowwise_adagrad}", "rowwise_adagrad is an embedding optimizer"),
                       ("{name: lamb}", "'sgd', 'adagrad' or 'adam'"), ("{name: adam, lr: -1}", "lr")):
        path = tmp_path / "bad.yaml"
        path.write_text(text.replace("\ntable_defaults:", f"\ndense_optimizer: {bad}\ntable_defaults:", 1))
        with pytest.raises(SpecError):
            load_workload(path)
        assert main(["check", str(path)]) == 2
        err = capsys.readouterr().err
        assert "bad.yaml" in err and "dense_optimizer" in err and words in err and "Traceback" not in err, err


def test_show_and_check_name_both(tmp_path, capsys):
    text = (ROOT / "workloads/tiny.yaml").read_text()
    path = tmp_path / "mixed.yaml"
    path.write_text(text.replace("\ntable_defaults:", "\ndense_optimizer: {name: adam, lr: 0.001}\ntable_defaults:", 1))
    assert main(["check", str(path)]) == 0
    assert "with sgd state, dense adam lr 0.001, batch" in capsys.readouterr().out
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "optimizer (tables)" in out and "adam, lr 0.001" in out


def test_dmp_trainer_fuses_the_state_placer_prices():
    """The DMP trainer fuses each table optimizer as the FBGEMM kernel whose state placer prices: per table
    rows x dim x optimizer_state_factor fp32 values (adagrad is EXACT_ADAGRAD, one per element, as TorchRec maps
    torch.optim.Adagrad; rowwise_adagrad one per row; sgd none). On CPU (fbgemm-gpu-cpu; no Adam there)."""
    require_torchrec()
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice, EmbeddingLocation,
                                                                         SplitTableBatchedEmbeddingBagsCodegen)

    from placer.torchrec_io.dmp_train import _OPTIMIZERS

    wl = load_workload(ROOT / "workloads/tiny.yaml")
    t = wl.tables[0]
    for name in ("sgd", "adagrad", "rowwise_adagrad"):
        tbe = SplitTableBatchedEmbeddingBagsCodegen([(t.rows, t.dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
                                                    optimizer=getattr(EmbOptimType, _OPTIMIZERS[name]))
        state = sum(s.numel() for states in tbe.split_optimizer_states() for s in states)
        factor = _with(wl, name, None).optimizer_state_factor[t.name]
        assert state == pytest.approx(factor * t.rows * t.dim), name
