"""solve/simulate --plot (placer/report_plot.py) and the summary's 'dominated by' lines (placer/report_insight.py)."""
from __future__ import annotations

import json

import pytest

from placer.cli import main
from placer.cost import CostModel
from placer.planner.solve import SolveConfig, solve
from placer.report_insight import step_insights, with_dense_dtype
from placer.report_plot import bottleneck_device, plot_plan, select_devices
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from tests.conftest import ROOT

HW = str(ROOT / "hardware_specs" / "dgx-h100.yaml")
PCIE = str(ROOT / "hardware_specs" / "h100-pcie-host.yaml")
TINY = str(ROOT / "workloads" / "tiny.yaml")
V1 = str(ROOT / "workloads" / "mlperf-dlrm-v1.yaml")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _plan(hw: str, wl_path: str):
    wl = load_workload(wl_path)
    topo = Topology(load_hardware(hw), wl.dense.dtype)
    return solve(topo, wl, SolveConfig(method="greedy_size")), topo, wl


def _many_gpu_pred(n_gpus: int = 128, per_node: int = 8) -> dict:
    devices = {}
    for g in range(n_gpus):
        node = g // per_node
        busy = {"dense:stream": 1e-3 + g * 1e-6, "embedding_forward:stream": 1e-4}
        devices[f"node{node}/gpu{g % per_node}"] = {"hbm_used_bytes": g * 1e8, "hbm_capacity_bytes": 8e10,
                                                    "busy_s": busy}
        devices.setdefault(f"node{node}/host", {"host_used_bytes": 0.0, "host_capacity_bytes": 2e12, "busy_s": {}})
    return {"devices": devices, "step_time_s": 2e-3, "throughput_samples_per_s": 1e6,
            "phases_s": {"dense": 1.2e-3, "embedding_forward": 1e-4}, "bottleneck": "node3/gpu2:stream (dense)"}


def test_many_gpus_show_the_busiest_the_emptiest_and_the_bottleneck():
    pred = _many_gpu_pred()
    shown, note = select_devices(pred)
    gpus = [d for d in shown if "gpu" in d]
    assert 9 <= len(gpus) <= 10 and "of 128 GPUs" in note
    assert "node15/gpu7" in gpus and "node0/gpu0" in gpus  # busiest and emptiest
    assert "node3/gpu2" in gpus  # the bottleneck's device, neither
    assert bottleneck_device(pred) == ("node3/gpu2", "dense")
    assert sum("host" in d for d in shown) == 3


def test_few_gpus_show_every_device():
    pred = _many_gpu_pred(8)
    shown, note = select_devices(pred)
    assert note == "" and len(shown) == 9


def test_plot_plan_writes_a_small_png(tmp_path):
    plan, topo, wl = _plan(HW, TINY)
    out = plot_plan(plan, tmp_path / "plan.png", notes=step_insights(plan, topo, wl)["lines"])
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and 10_000 < len(data) < 200_000


def test_plot_of_128_gpus_is_small(tmp_path):
    class _Plan:  # only what plot_plan reads
        method = "test"
        predicted = _many_gpu_pred()

        class workload:
            name = "w"

        class hardware:
            name = "h"

    data = plot_plan(_Plan, tmp_path / "many.png").read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) < 200_000


def test_dense_dtype_line_is_the_same_plan_repriced():
    plan, topo, wl = _plan(PCIE, V1)
    facts = step_insights(plan, topo, wl)
    assert facts["phase"] == "dense" and facts["lines"][0].startswith("dominated by: dense")
    assert "gemm" in facts["op_kinds"]
    bf16 = with_dense_dtype(wl, "bf16")
    expected = predict(CostModel(Topology(topo.spec, "bf16"), bf16), plan, check_memory=False)["step_time_s"]
    assert facts["alternative"]["step_s"] == pytest.approx(expected)
    assert expected < plan.predicted["step_time_s"]
    assert any(line.startswith("dense fp32: ") and "bf16 would make this plan" in line for line in facts["lines"])
    spent = step_insights(plan, topo, wl, reprice=False)  # no time left under --time-limit: said, not re-priced
    assert spent["alternative"] is None
    assert any("not re-priced at bf16 (the time limit is spent)" in line for line in spent["lines"])


def test_no_dtype_line_at_bf16():
    plan, topo, wl = _plan(HW, TINY)
    wl16 = with_dense_dtype(wl, "bf16")
    topo16 = Topology(topo.spec, "bf16")
    plan16 = plan.model_copy(update={"predicted": predict(CostModel(topo16, wl16), plan)})
    facts = step_insights(plan16, topo16, wl16)
    assert facts["alternative"] is None and not any(line.startswith("dense ") for line in facts["lines"])


def test_cli_solve_plot_json_stays_json(tmp_path, capsys):
    png, plan = tmp_path / "p.png", tmp_path / "plan.json"
    assert main(["solve", HW, TINY, "--method", "greedy_size", "--plot", str(png), "-o", str(plan), "--json"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "plot written to" in cap.err and "time limit 60 s (the default" in cap.err and "ends by" in cap.err
    png.unlink()
    assert main(["simulate", HW, TINY, str(plan), "--plot", str(png)]) == 0
    cap = capsys.readouterr()
    assert png.read_bytes()[:8] == PNG_MAGIC and "dominated by: dense" in cap.out
    assert main(["simulate", HW, TINY, str(plan), "--json"]) == 0  # the same facts for scripts
    facts = json.loads(capsys.readouterr().out)["insights"]
    assert facts["phase"] == "dense" and facts["lines"][0].startswith("dominated by: dense")


def test_cli_solve_says_its_time_limit(capsys):
    assert main(["solve", HW, TINY, "--method", "greedy_size", "--time-limit", "7"]) == 0
    err = capsys.readouterr().err
    assert "time limit 7 s (--time-limit): ends by" in err


@pytest.mark.parametrize("name", ["plan.xyz", "missing-dir/plan.png"])
def test_cli_bad_plot_path_exits_2(tmp_path, capsys, name):
    assert main(["solve", HW, TINY, "--method", "greedy_size", "--plot", str(tmp_path / name)]) == 2
    cap = capsys.readouterr()
    assert "--plot" in cap.err and "Traceback" not in cap.err


def test_no_phase_is_drawn_in_the_bottleneck_colour():
    """Issue 52: dense was red (#c44e52) and the bottleneck's outline red: a dense bottleneck was not visible. Every
    phase's colour is grey or at least 40 degrees of hue from the bottleneck's (orange is 30)."""
    import colorsys

    from matplotlib.colors import to_rgb

    from placer.report_plot import BOTTLENECK_COLOR, PHASE_COLORS

    bh, _, bs = colorsys.rgb_to_hls(*to_rgb(BOTTLENECK_COLOR))
    for phase, colour in PHASE_COLORS.items():
        h, _, s = colorsys.rgb_to_hls(*to_rgb(colour))
        apart = min(abs(h - bh), 1 - abs(h - bh)) * 360
        assert s < 0.15 or apart >= 40, (phase, colour, apart)
    assert bs > 0.5
