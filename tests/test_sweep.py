"""placer sweep: GPU counts from a node template, scaling efficiency, target throughput, refusals, plot."""
from __future__ import annotations

import json

import pytest

from placer.cli import main
from placer.errors import SpecError
from placer.planner.solve import SolveConfig
from placer.specs import load_hardware, load_workload
from placer.sweep import (check_counts, doubling_counts, parse_counts, run_sweep, smallest_reaching,
                          target_answer)
from tests.conftest import ROOT

TWO_NODE = str(ROOT / "hardware_specs" / "dgx-h100-2node.yaml")
ONE_NODE = str(ROOT / "hardware_specs" / "dgx-h100.yaml")
WORKSTATION = str(ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml")
TINY = str(ROOT / "workloads" / "tiny.yaml")
V2 = str(ROOT / "workloads" / "mlperf-dlrm-v2.yaml")

# 2 GPUs per node, small memories, NICs and a fabric: one big table fits on two nodes, not on one.
SMALL_CLUSTER_YAML = """
schema_version: 1
name: small-cluster
templates:
  box:
    gpus:
      model: test GPU
      count: 2
      hbm_GiB: 1
      hbm_bw_GBps: 1000
      hbm_gather_efficiency: 0.5
      hbm_reserve_GiB: 0.25
      peak_TFLOPs: {fp32: 10}
      compute_efficiency: 0.5
    host:
      dram_GiB: 4
      dram_bw_GBps: 100
      dram_reserve_GiB: 1
      cpu_cores: 8
      cpu_gather_GBps: 10
    switches: [sw]
    nics: {count: 2, bw_GBps: 25}
    links:
      - {kind: nvlink, between: [gpu*, sw], bw_GBps: 100}
      - {kind: pcie, between: [gpu*, host], bw_GBps: 20}
      - {kind: pcie, between: [gpu*, nic*], bw_GBps: 20}
nodes:
  - {template: box, count: 1}
fabric: {kind: infiniband, latency_us: 5}
"""

BIG_TABLE_YAML = """
schema_version: 1
name: one-big-table
batch_size: 256
optimizer: {name: sgd, lr: 0.1}
tables:
  - {name: big, rows: 83886080, dim: 16, access: {kind: zipf, alpha: 1.1}}
  - {name: small, rows: 1000, dim: 16, access: {kind: uniform}}
dense:
  num_dense_features: 4
  bottom_mlp: [16]
  interaction: {kind: concat}
  top_mlp: [8, 1]
"""


def _sweep_json(capsys, *argv) -> tuple[int, dict]:
    code = main(["sweep", *argv, "--json"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else {})


def test_parse_counts():
    assert parse_counts("32,8, 16,8") == [8, 16, 32]
    for bad in ("8,x", "0", "-8", ""):
        with pytest.raises(SpecError):
            parse_counts(bad)


def test_refuses_counts_the_template_cannot_make():
    with pytest.raises(SpecError, match="not a multiple of 8"):
        check_counts(load_hardware(TWO_NODE), [8, 12])
    with pytest.raises(SpecError, match="no 'fabric'"):
        check_counts(load_hardware(ONE_NODE), [8, 16])
    with pytest.raises(SpecError, match="no NICs"):
        check_counts(load_hardware(WORKSTATION), [4, 8])
    check_counts(load_hardware(ONE_NODE), [8])  # one node needs no fabric
    assert doubling_counts(load_hardware(TWO_NODE), 64) == [8, 16, 32, 64]


@pytest.mark.parametrize("argv", [
    [TWO_NODE, TINY, "--gpus", "8,12"],
    [ONE_NODE, TINY, "--gpus", "8,16", "--fabric", "infini band"],
    [ONE_NODE, TINY, "--gpus", "8,16", "--fabric", "infiniband:fast"],
    [ONE_NODE, TINY, "--gpus", "8,16", "--fabric", "infiniband:-1"],
    [WORKSTATION, TINY, "--gpus", "4,8"],
    [TWO_NODE, TINY, "--gpus", "8,abc"],
    [TWO_NODE, TINY, "--search"],
    [TWO_NODE, TINY, "--gpus", "8", "--target-throughput", "-5"],
])
def test_cli_bad_input_exits_2(argv, capsys):
    assert main(["sweep", *argv]) == 2
    assert "error" in capsys.readouterr().err


def test_cli_ilp_sweep_json(capsys):
    code, out = _sweep_json(capsys, TWO_NODE, TINY, "--gpus", "16,8", "--time-limit", "10")
    assert code == 0
    assert out["method"] == "ilp" and out["gpus_per_node"] == 8 and out["template"] == "dgx-h100"
    pts = out["points"]
    assert [p["gpus"] for p in pts] == [8, 16] and [p["nodes"] for p in pts] == [1, 2]
    assert all(p["status"] in ("optimal", "feasible") for p in pts)
    assert pts[0]["efficiency"] == pytest.approx(1.0)
    for p in pts:  # efficiency = throughput / (base throughput x GPU ratio)
        assert p["efficiency"] == pytest.approx(
            p["throughput_samples_per_s"] / (pts[0]["throughput_samples_per_s"] * p["gpus"] / 8))
        assert p["throughput_samples_per_s"] == pytest.approx(256 / p["step_time_s"])


def test_cli_table_target_and_plot(tmp_path, capsys):
    png = tmp_path / "sweep.png"
    code = main(["sweep", TWO_NODE, TINY, "--gpus", "8,16,32", "--method", "greedy_size",
                 "--target-throughput", "1", "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert "efficiency" in out and "target" in out and "8 GPUs" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_target_not_reached_says_so(capsys):
    code, out = _sweep_json(capsys, TWO_NODE, TINY, "--gpus", "8,16", "--method", "greedy_size",
                            "--target-throughput", "1e12")
    assert code == 0
    assert out["target"]["gpus"] is None and "not reached" in out["target"]["message"]


def test_search_doubles_until_the_target_is_reached():
    spec, wl = load_hardware(TWO_NODE), load_workload(V2)
    cfg = SolveConfig(method="fae")
    pts = run_sweep(spec, wl, [8, 16, 32], cfg)
    thr = {p.gpus: p.throughput_samples_per_s for p in pts}
    assert thr[16] > thr[8]
    target = (thr[8] + thr[16]) / 2
    assert smallest_reaching(pts, target).gpus == 16
    searched = run_sweep(spec, wl, doubling_counts(spec, 256), cfg, stop_at_throughput=target)
    assert [p.gpus for p in searched] == [8, 16]  # stopped at the first count that reaches it
    gpus, msg = target_answer(searched, target, searched=True)
    assert gpus == 16 and "16 GPUs" in msg


def test_infeasible_counts_are_rows_and_efficiency_starts_at_first_plan(tmp_path, capsys):
    hw = tmp_path / "small-cluster.yaml"
    hw.write_text(SMALL_CLUSTER_YAML)
    wl = tmp_path / "big.yaml"
    wl.write_text(BIG_TABLE_YAML)
    code, out = _sweep_json(capsys, str(hw), str(wl), "--gpus", "2,4,8", "--time-limit", "10")
    assert code == 0
    pts = {p["gpus"]: p for p in out["points"]}
    assert pts[2]["status"] == "infeasible" and pts[2]["throughput_samples_per_s"] is None
    assert "does not fit" in pts[2]["note"] or "fits" in pts[2]["note"]
    assert pts[4]["status"] in ("optimal", "feasible") and pts[4]["efficiency"] == pytest.approx(1.0)
    # nothing fits anywhere: exit 3 (infeasible)
    assert main(["sweep", str(hw), str(wl), "--gpus", "2"]) == 3


def test_one_node_spec_gets_the_default_fabric_or_the_named_one(capsys):
    from placer.sweep import DEFAULT_FABRIC, parse_fabric, with_fabric

    one = load_hardware(ONE_NODE)
    spec, note = with_fabric(one, None)
    assert spec.fabric.kind == "infiniband" and spec.fabric.latency_us == float(DEFAULT_FABRIC.split(":")[1])
    assert "the default" in note
    check_counts(spec, [8, 16])
    spec, note = with_fabric(one, "roce:3")
    assert (spec.fabric.kind, spec.fabric.latency_us) == ("roce", 3.0) and "--fabric" in note
    two = load_hardware(TWO_NODE)
    assert with_fabric(two, None) == (two, None)  # the spec's own fabric kept
    assert parse_fabric("infiniband").latency_us == float(DEFAULT_FABRIC.split(":")[1])
    with pytest.raises(SpecError, match="no NICs"):  # a fabric cannot make up NICs
        check_counts(with_fabric(load_hardware(WORKSTATION), None)[0], [4, 8])


def test_cli_one_node_sweep_replicates_the_node(capsys):
    code, out = _sweep_json(capsys, ONE_NODE, TINY, "--gpus", "8,16", "--method", "greedy_size")
    assert code == 0 and [p["gpus"] for p in out["points"]] == [8, 16]
    assert out["fabric"] == {"kind": "infiniband", "latency_us": 1.5}
    code, out = _sweep_json(capsys, ONE_NODE, TINY, "--gpus", "8,16", "--method", "greedy_size",
                            "--fabric", "ethernet:4")
    assert code == 0 and out["fabric"] == {"kind": "ethernet", "latency_us": 4.0}


def test_cli_sweep_says_each_count_on_stderr(capsys):
    assert main(["sweep", TWO_NODE, TINY, "--gpus", "8,16", "--time-limit", "5", "--json"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)
    assert "8 GPUs (1 node(s)): solving ilp, time limit 5 s" in cap.err
    assert "16 GPUs (2 node(s)): solving ilp" in cap.err and "ends by" in cap.err
