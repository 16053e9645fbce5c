"""placer/torchrec_io/dmp_phases.py: a DMP profile split into placer's phases (no torch run: a real profile's
operators, tests/data/dmp-profile-ranks-tiny-dp.json, and synthetic ones) and placer's price re-cut alike."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from placer.program.ops import PHASES
from placer.torchrec_io import dmp_phases as dp

ROOT = Path(__file__).resolve().parents[1]
PROFILE = json.loads((ROOT / "tests/data/dmp-profile-ranks-tiny-dp.json").read_text())
RUN3 = ROOT / "validation/results/fidelity-torchrec-2ranks-2026-12-03-run3"
FWD, FX, DENSE, BX, BWD, AR = PHASES


def _total(ops: dict) -> float:
    return sum(v[0] for v in ops.values())


def test_keys_are_placers_phases_then_dmp_python_and_other():
    assert dp.KEYS[:len(PHASES)] == PHASES and dp.KEYS[len(PHASES):] == (dp.DMP_PYTHON, dp.OTHER)
    assert {phase for _, phase, _ in dp.RULES} <= set(dp.KEYS) | {dp.ALL_TO_ALL}


@pytest.mark.parametrize("rank", [0, 1])
def test_every_operator_of_a_real_profile_is_classified_and_the_sum_kept(rank):
    ops = PROFILE["ops_per_rank"][rank]
    assert len(ops) > 100
    assert dp.unclassified(ops) == []
    got = dp.phases_of(ops)
    assert list(got) == list(dp.KEYS) and got[dp.OTHER] == 0.0
    assert math.isclose(sum(got.values()), _total(ops), rel_tol=1e-12)
    assert all(v >= 0 for v in got.values())
    for key in PHASES + (dp.DMP_PYTHON,):  # every phase has something in this step (2 ranks, DDP, a dp table)
        assert got[key] > 0, key


@pytest.mark.parametrize("name, phase", [
    ("fbgemm::split_embedding_codegen_forward_cpu", FWD),
    ("fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function_pt2", FWD),
    ("fbgemm::dense_embedding_codegen_lookup_function", FWD),
    ("[lookup]_[sparse_arch.embedding_bag_collection]_[table_wise]", FWD),
    ("fbgemm::split_embedding_backward_codegen_rowwise_adagrad_cpu", BWD),
    ("fbgemm::split_embedding_backward_codegen_adagrad_cpu", BWD),
    ("fbgemm::split_embedding_backward_codegen_sgd_unweighted_pt2_wrapper", BWD),
    ("torch::autograd::CppNode<(anonymous namespace)::SplitLookupFunction_Dense_Op>", BWD),
    ("autograd::engine::evaluate_function: torch::autograd::CppNode<SplitLookupFunction_sgd_Op_pt2>", BWD),
    ("## KJTAllToAllTensorsAwaitable wait() ##", FX), ("## SplitsAllToAllAwaitable wait() ##", FX),
    ("fbgemm::permute_2D_sparse_data", FX), ("fbgemm::block_bucketize_sparse_features", FX),
    ("[splits_dist]_[sparse_arch.embedding_bag_collection]_[row_wise]", FX),
    ("All2All_Pooled_Req", FX), ("All2All_Pooled_Wait", FX), ("ReduceScatterV_Req", FX),
    ("[output_dist]_[sparse_arch.embedding_bag_collection]_[table_wise]", FX),
    ("## EmbeddingBagCollectionAwaitable wait() ##", FX), ("c10d::reduce_scatter_", FX),
    ("All2All_Pooled_ReqBackward", BX), ("All2All_Pooled_WaitBackward", BX), ("## All2All_Pooled_bwd ##", BX),
    ("autograd::engine::evaluate_function: All2All_Pooled_ReqBackward", BX), ("ReduceScatterV_ReqBackward", BX),
    ("c10d::allgather_", BX),
    ("c10d::allreduce_", AR), ("gloo:all_reduce", AR), ("torch::distributed::reducer::mul_out", AR),
    ("Optimizer.step#Adagrad.step", DENSE), ("Optimizer.zero_grad#SGD.zero_grad", DENSE),
    ("aten::cat", DENSE), ("aten::mm", DENSE), ("AddmmBackward0", DENSE),
    ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", DENSE), ("detach_", DENSE),
    ("DistributedDataParallel.forward", dp.DMP_PYTHON), ("## NoWait wait() ##", dp.DMP_PYTHON),
    ("[some_new_range]_[sparse_arch]", dp.DMP_PYTHON),
    ("c10d::alltoall_base_", dp.ALL_TO_ALL), ("gloo:all_to_all", dp.ALL_TO_ALL),
    ("fbgemm::something_new", dp.OTHER), ("cudaLaunchKernel", dp.OTHER),
])
def test_names_go_to_their_phase(name, phase):
    assert dp.phase_of(name) == phase


def test_unknown_names_land_in_other_and_are_listed_slowest_first():
    ops = {**PROFILE["ops_per_rank"][0], "mystery::op": [0.002, 1.0], "fbgemm::new_kernel": [0.005, 3.0]}
    got = dp.phases_of(ops)
    assert got[dp.OTHER] == pytest.approx(0.007)
    assert dp.unclassified(ops) == ["fbgemm::new_kernel", "mystery::op"]
    assert math.isclose(sum(got.values()), _total(ops), rel_tol=1e-12)


def test_all_to_alls_split_by_the_backward_requesters_calls():
    ops = {"c10d::alltoall_base_": [0.010, 5.0], "gloo:all_to_all": [0.0, 5.0],
           "All2All_Pooled_Req": [0.001, 1.0], "All2All_Pooled_ReqBackward": [0.003, 1.0]}
    got = dp.phases_of(ops)
    assert got[BX] == pytest.approx(0.003 + 0.010 / 5)
    assert got[FX] == pytest.approx(0.001 + 0.010 * 4 / 5)
    assert math.isclose(sum(got.values()), 0.014)
    # no backward requester (no sharded table): every all-to-all is the forward's (the ids' input distribution)
    assert dp.phases_of({"c10d::alltoall_base_": [0.01, 3.0]})[FX] == pytest.approx(0.01)


def test_the_slowest_rank_is_the_one_with_the_largest_total():
    fast = {"aten::mm": [0.001, 1.0], "All2All_Pooled_WaitBackward": [0.004, 1.0]}
    slow = {"aten::mm": [0.001, 1.0], "fbgemm::split_embedding_backward_codegen_sgd_cpu": [0.005, 1.0],
            "All2All_Pooled_WaitBackward": [0.0005, 1.0]}
    rank, phases = dp.slowest_rank_phases([fast, slow])
    assert rank == 1 and phases[BWD] == 0.005 and phases[BX] == 0.0005  # one rank's phases, no max per phase
    m = dp.measured([fast, slow, {"odd::op": [0.0001, 1.0]}])
    assert m["measured_phases_rank"] == 1 and m["measured_phases_s"] == phases
    assert m["profile_total_s"] == pytest.approx(0.0065) and m["unclassified"] == ["odd::op"]
    assert len(m["per_rank_phases_s"]) == 3 and m["per_rank_phases_s"][2][dp.OTHER] == 0.0001


def test_the_real_profile_puts_the_embedding_backward_well_under_placers_17_ms():
    """What the lead's profile showed (ranks-tiny-dp, the ILP's plan): the embedding backward a few ms a rank."""
    rank, phases = dp.slowest_rank_phases(PROFILE["ops_per_rank"])
    assert 0.002 < phases[BWD] < 0.010
    assert sum(phases.values()) < PROFILE["median_step_s"] * 1.2


@pytest.fixture(scope="module")
def tiny_dp():
    from placer.cost import CostModel
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(ROOT / "validation/ranks_workloads/ranks-tiny-dp.yaml").model_copy(
        update={"trainer": "torchrec"})
    return CostModel(Topology(load_hardware(RUN3 / "spec.yaml"), wl.dense.dtype), wl)


@pytest.mark.parametrize("plan_name", ["ilp", "torchrec"])
def test_priced_phases_recut_keeps_placers_step_and_moves_dmps_own_kinds(tiny_dp, plan_name):
    from placer.plan import load_plan
    from placer.simulate import predict

    plan = load_plan(RUN3 / "plans/ranks-tiny-dp" / f"{plan_name}.json")
    pred = predict(tiny_dp, plan)
    got = dp.priced_phases(tiny_dp, plan)
    assert list(got) == list(dp.KEYS) and got[dp.OTHER] == 0.0
    assert math.isclose(sum(got.values()), pred["step_time_s"], rel_tol=1e-9)
    dmp_step = tiny_dp.builder.tbe(tiny_dp.topo.gpus[0]).fixed("dmp_step")
    assert dmp_step > 0 and got[dp.DMP_PYTHON] == pytest.approx(dmp_step)  # the run's spec calibrated it
    assert got[FX] > pred["phases_s"][FX]  # the ids' input distribution moved in
    assert got[FWD] < pred["phases_s"][FWD] - dmp_step
    for ph in (BX, AR):
        assert got[ph] == pytest.approx(pred["phases_s"][ph])
    assert min(got.values()) >= 0


def test_a_tensor_op_keyed_by_its_caller_takes_the_callers_phase():
    """A profile keyed by caller (aten ops under their first non-aten ancestor; names and ms from a diagnostic
    profile of ranks-tiny-dp's TorchRec plan, rank 0, 2026-12-03)."""
    ops = {"aten::cat <- DistributedDataParallel.forward": [0.0019, 1.0],  # the dense model's concat interaction
           "aten::cat <- SplitWithSizesBackward0": [0.0014, 1.0],
           "aten::cat <- ## EmbeddingBagCollectionAwaitable wait() ##": [0.0009, 1.0],
           "aten::div_ <- All2All_Pooled_ReqBackward": [0.0003, 1.0],
           "aten::mul <- torch::distributed::reducer::mul_out": [0.0001, 7.0],
           "aten::sqrt <- Optimizer.step#Adagrad.step": [0.0002, 36.0],
           "aten::empty <- (top)": [0.0001, 2.0], "aten::copy_ <- odd::op": [0.0001, 1.0],
           "All2All_Pooled_ReqBackward": [0.002, 1.0], "c10d::alltoall_base_": [0.001, 2.0]}
    got = dp.phases_of(ops)
    assert got[DENSE] == pytest.approx(0.0019 + 0.0014 + 0.0002 + 0.0001 + 0.0001)
    assert got[FX] == pytest.approx(0.0009 + 0.0005) and got[BX] == pytest.approx(0.0003 + 0.002 + 0.0005)
    assert got[AR] == pytest.approx(0.0001) and got[dp.DMP_PYTHON] == 0.0 and dp.unclassified(ops) == []
    assert math.isclose(sum(got.values()), _total(ops), rel_tol=1e-12)
