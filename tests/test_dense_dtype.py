"""The dense part at bf16 against fp32 (issue 52): a GEMM-heavy dense part priced far below its fp32 one on H100
specs, a host-bound one above it by the casts autocast adds (what an eager H100 step does), the host's issuing its
own op kind and the summary's dtype line saying which bounds the dense part; and ``--dense-dtype`` on the
commands that plan or price."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from placer.cli import main
from placer.cost import PHASES, CostModel
from placer.errors import SpecError
from placer.plan import load_plan
from placer.program.dense import CAST_OP, trace
from placer.program.ops import EVERY_GPU, HOST_ISSUE
from placer.report_insight import dense_bound, step_insights, with_dense_dtype
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("every_warning")  # every warning shown (tests/conftest.py)

DENSE = PHASES.index("dense")
HW = str(ROOT / "hardware_specs/dgx-h100.yaml")
TINY = str(ROOT / "workloads/tiny.yaml")
NODE_LOCAL_PLAN = ROOT / "validation/guard_plans/criteo-terabyte-node-local@dgx-h100-2node.json"
PROFILE = ROOT / "validation/results/gpu-2026-11-27-run2/profile.json"


def _dense(hw: str, wl_name: str, dtype: str) -> tuple[float, dict, CostModel]:
    """(the dense phase's seconds on the first GPU, dense_bound, the model) of a shipped pair at ``dtype``."""
    wl = with_dense_dtype(load_workload(ROOT / f"workloads/{wl_name}.yaml"), dtype)
    model = CostModel(Topology(load_hardware(ROOT / f"hardware_specs/{hw}.yaml"), dtype), wl)
    stream = model.builder.gpu_streams[0]
    seconds = sum(op.seconds for op in model.base_ops if op.phase == DENSE and op.stream in (stream, EVERY_GPU))
    return seconds, dense_bound(model), model


@pytest.mark.parametrize("hw", ["dgx-h100", "h100-pcie-host"])
def test_gemm_heavy_dense_part_is_priced_below_fp32(hw):
    # mlperf-dlrm-v2's dense MLPs and DCNv2 at its per-GPU batch (8,192 on 8 GPUs, 65,536 on one)
    fp32, b32, _ = _dense(hw, "mlperf-dlrm-v2", "fp32")
    bf16, b16, _ = _dense(hw, "mlperf-dlrm-v2", "bf16")
    assert not b32["host_bound"] and not b16["host_bound"]
    assert bf16 < 0.3 * fp32  # 26.1 -> 4.5 ms on dgx-h100, 207 -> 34 ms on one H100
    assert b16["casts"] > 0 and b32["casts"] == 0


def test_host_bound_dense_part_at_bf16_adds_only_its_casts_issue():
    # criteo-terabyte-node-local at 1,024 samples per GPU: the host issues longer than the GPU works
    fp32, b32, m32 = _dense("dgx-h100-2node", "criteo-terabyte-node-local", "fp32")
    bf16, b16, _ = _dense("dgx-h100-2node", "criteo-terabyte-node-local", "bf16")
    assert b32["host_bound"] and b16["host_bound"]
    assert b16["work_s"] < 0.5 * b32["work_s"]  # the GPU's work shrinks (GEMMs at bf16)
    costs = m32.topo.op_costs(m32.builder.gpus[0])
    added = b16["ops"] - b32["ops"]
    assert added == b16["casts"] > 0  # the casts are the only ops bf16 adds
    # and all the dense part gains: their issue, an elementwise op's fixed cost each
    assert bf16 - fp32 == pytest.approx(added * costs.fixed("elementwise"))
    assert fp32 == pytest.approx(b32["issue_s"]) and bf16 == pytest.approx(b16["issue_s"])


def _profile_casts() -> dict[str, dict[str, int]]:
    """Per synthetic calibration case, the ATen casts autocast issued per stage on an H100 at bf16."""
    doc = json.loads(PROFILE.read_text())
    return {c["case"].split()[0]: {stage: dict(v["issued_top"]).get(CAST_OP, 0) for stage, v in c["stages"].items()}
            for c in doc["dense"] if c["dtype"] == "bf16" and c["samples"] == 2048}


def test_traced_casts_are_the_casts_autocast_issued_on_an_h100():
    from placer.calibrate.dense import concat_adam, dcnv2_adagrad, dot_sgd

    measured = _profile_casts()
    assert len(measured) == 3
    for make in (dot_sgd, dcnv2_adagrad, concat_adam):
        wl = with_dense_dtype(make(2048), "bf16")
        ops = trace(wl, 2048, "cuda").ops
        traced = Counter(op.stage for op in ops if op.name == CAST_OP)
        assert traced["forward"] == measured[wl.name]["forward"] > 0, wl.name  # the loss's logits.float() too
        assert traced["backward"] == measured[wl.name]["backward"] > 0, wl.name
        assert not any(op.name == CAST_OP for op in trace(make(2048), 2048, "cuda").ops)  # none at fp32


def test_host_issue_is_its_own_kind():
    _, _, model = _dense("dgx-h100-2node", "criteo-terabyte-node-local", "bf16")
    host = [op for op in model.base_ops if op.phase == DENSE and "issue_s" in op.sizes]
    assert len(host) == 1 and host[0].kind == HOST_ISSUE and host[0].seconds > 0
    assert host[0].sizes["ops"] == sum(1 for op in model.base_ops if op.phase == DENSE and op.stream == host[0].stream
                                       and "aten" in op.sizes) - 1


def _node_local_plan():
    wl = load_workload(ROOT / "workloads/criteo-terabyte-node-local.yaml")
    topo = Topology(load_hardware(ROOT / "hardware_specs/dgx-h100-2node.yaml"), wl.dense.dtype)
    plan = load_plan(NODE_LOCAL_PLAN)
    return plan.model_copy(update={"predicted": predict(CostModel(topo, wl), plan)}), topo, wl


def test_summary_says_bf16_is_slower_where_the_host_bounds_the_dense_part():
    plan, topo, wl = _node_local_plan()
    facts = step_insights(plan, topo, wl)
    assert facts["alternative"]["step_s"] > facts["step_s"] and not facts["alternative"]["decides"]
    line = next(line for line in facts["lines"] if line.startswith("dense fp32: "))
    assert "bf16 would make this plan slower" in line and "would change it little" not in line
    assert "bound by the host issuing its ops" in line and "bound by gemm" not in line
    assert "fp32: 228 ops issued in 0.688 ms against 0.546 ms of device work" in line
    assert "bf16: 268 ops (40 casts among them) issued in 0.888 ms" in line
    assert "the host issuing ops" in facts["lines"][0]  # the op kinds: not elementwise
    assert facts["dense_bound"]["bf16"]["casts"] == 40


# ---- --dense-dtype -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bf16_plan(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["solve", HW, TINY, "--method", "greedy_size", "-q", "--dense-dtype", "bf16", "-o", str(out)]) == 0
    return str(out)


def test_solve_with_dense_dtype_records_the_changed_workload(bf16_plan):
    doc = json.loads(Path(bf16_plan).read_text())
    assert doc["workload"]["fields"]["dense.dtype"] == "bf16"
    assert doc["workload"]["sha256"] != load_workload(TINY).sha256
    wl = with_dense_dtype(load_workload(TINY), "bf16")  # priced as the same workload edited to bf16
    expected = predict(CostModel(Topology(load_hardware(HW), "bf16"), wl), load_plan(bf16_plan))
    assert doc["predicted"]["step_time_s"] == pytest.approx(expected["step_time_s"])


def test_simulate_dense_dtype_equals_editing_the_workload(bf16_plan, capsys):
    capsys.readouterr()
    assert main(["simulate", HW, TINY, bf16_plan, "--json", "--dense-dtype", "bf16"]) == 0
    out, err = capsys.readouterr()
    assert "what-if: --dense-dtype bf16: tiny's dense.dtype fp32 replaced by bf16" in err
    assert not [line for line in err.splitlines() if line.startswith("warning: ")]  # the plan's own workload
    step = json.loads(out)["predicted"]["step_time_s"]
    assert step == pytest.approx(json.loads(Path(bf16_plan).read_text())["predicted"]["step_time_s"])
    assert main(["simulate", HW, TINY, bf16_plan, "--json"]) == 0  # the file's fp32: a changed workload, named
    out, err = capsys.readouterr()
    assert "dense.dtype bf16 -> fp32" in err and "what-if" not in err
    assert json.loads(out)["predicted"]["step_time_s"] != pytest.approx(step)


@pytest.mark.parametrize("command", ["solve", "compare", "simulate", "sweep", "explain"])
def test_bad_dense_dtype_is_exit_2_naming_the_flag(command, bf16_plan, capsys):
    plan = [bf16_plan] if command in ("simulate", "explain") else []
    capsys.readouterr()
    assert main([command, HW, TINY, *plan, "--dense-dtype", "bf8"]) == 2
    err = capsys.readouterr().err
    assert "--dense-dtype" in err and "bf8" in err and "Traceback" not in err


def test_compare_and_sweep_take_dense_dtype(capsys):
    capsys.readouterr()
    assert main(["compare", HW, TINY, "--methods", "greedy_size", "--json", "--dense-dtype", "bf16"]) == 0
    out, err = capsys.readouterr()
    bf16 = json.loads(out)[0]["step_time_s"]
    assert "what-if: --dense-dtype bf16" in err
    assert main(["compare", HW, TINY, "--methods", "greedy_size", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["step_time_s"] != pytest.approx(bf16)
    assert main(["sweep", HW, TINY, "--gpus", "8", "--method", "greedy_size", "--json", "--dense-dtype", "fp16"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["dense_dtype"] == "fp16" and "what-if: --dense-dtype fp16" in err


def test_dense_dtype_of_the_workloads_own_changes_nothing():
    from placer.commands._common import with_dense_dtype as override

    wl = load_workload(TINY)
    assert override(wl, "fp32") is wl and override(wl, None) is wl
    changed = override(wl, "tf32")
    assert changed.dense.dtype == "tf32" and changed.sha256 != wl.sha256 and wl.dense.dtype == "fp32"
    with pytest.raises(SpecError) as exc:  # a namespace built by hand, past argparse's choices
        override(wl, "int8")
    assert exc.value.field == "--dense-dtype" and "int8" in str(exc.value)


def test_why_the_dtype_changes_little_names_what_bounds_the_dense_part():
    from placer.report_insight import why_dtype_changes_little

    def bound(issue_ms, work_ms, ops, casts=0):
        return {"issue_s": issue_ms / 1e3, "work_s": work_ms / 1e3, "ops": ops, "casts": casts,
                "host_bound": issue_ms > work_ms}

    host = why_dtype_changes_little("fp32", bound(1.0, 0.8, 200), "bf16", bound(1.2, 0.2, 240, 40), "gemm ops")
    assert "bound by the host issuing its ops" in host and "casts add 40 ops" in host
    turned = why_dtype_changes_little("fp32", bound(1.0, 1.1, 200), "bf16", bound(1.2, 0.3, 240, 40), "gemm ops")
    assert "bf16 shortens the dense part's device work, but then the host issuing its ops bounds it" in turned
    work = why_dtype_changes_little("fp32", bound(1.0, 5.0, 200), "bf16", bound(1.2, 4.8, 240, 40), "elementwise ops")
    assert "device work changes little" in work and "mostly elementwise ops" in work
    cpu = why_dtype_changes_little("fp32", None, "bf16", None, "gemm ops")
    assert "largest cost is gemm ops" in cpu
