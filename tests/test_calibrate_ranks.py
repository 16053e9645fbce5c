"""placer calibrate --nproc N: the collectives between CPU rank processes fitted and written as the link of an
N-rank spec (placer/calibrate/ranks.py), and the command's guards."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from placer.calibrate import Calibration, Entry, Measurement, OpCostEntries, to_yaml
from placer.calibrate.ranks import Collectives, Fit, apply, fit, measure_collectives
from placer.cli import main
from placer.specs import load_hardware
from placer.specs.hardware import FIXED_COST_KINDS
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent


def test_fit_recovers_latency_and_bandwidth():
    rows = [(s, 300e-6 + s / 1.5e9) for s in (4, 4096, 1 << 20, 4 << 20)]
    f = fit(rows)
    assert f.latency_s == pytest.approx(300e-6) and f.bw_Bps == pytest.approx(1.5e9)
    assert f.seconds(1 << 20) == pytest.approx(rows[2][1])
    # a line through negative latency is clamped at 0; a flat (or falling) one keeps a positive bandwidth
    assert fit([(1000, 1e-6), (2000, 3e-6)]).latency_s == 0.0
    assert fit([(1000, 2e-3), (2000, 1e-3)]).bw_Bps > 0


def _cpu_calibration() -> Calibration:
    """What one CPU rank's calibration records (values invented), before the collectives are applied."""
    cal = Calibration(device=torch.device("cpu"), device_name="Fake CPU rank", torch_version="x",
                      date="2026-01-01", quick=True, host_read_mechanism="cpu")
    for k, v in {"hbm_GiB": 16, "hbm_bw_GBps": 15, "hbm_gather_efficiency": 0.3, "hbm_reserve_GiB": 1,
                 "compute_efficiency": 0.5, "kernel_launch_us": 2, "host_read_efficiency": 1, "dram_GiB": 16,
                 "dram_bw_GBps": 15, "dram_reserve_GiB": 2, "cpu_cores": 2, "cpu_gather_GBps": 4,
                 "cpu_peak_TFLOPs": 0.1, "link_bw_GBps": 6, "link_efficiency": 0.9, "link_latency_us": 1}.items():
        cal.set(k, v, "test")
    cal.peaks = {"fp32": Measurement(0.1, "t")}
    e = OpCostEntries()
    e.fixed_us = {k: Entry(3.0, "t") for k in FIXED_COST_KINDS if k not in ("collective", "all_reduce")}
    e.gather_GBps = {"fp32": {64: Entry(4.0, "t")}, "fp16": {32: Entry(2.0, "t")}}
    e.stream_GBps = {1 << 20: Entry(15.0, "t")}
    cal.device_costs = e
    return cal


def test_the_collectives_become_the_link_of_an_n_rank_spec(tmp_path):
    cal = _cpu_calibration()
    assert any(n.startswith("fixed_us.collective and fixed_us.all_reduce are not measured")
               for n in cal.all_notes)  # until --nproc
    col = Collectives(world=2, all_to_all=Fit(400e-6, 1.2e9, [(4, 4e-4)]), all_reduce=Fit(900e-6, 0.8e9, [(4, 9e-4)]),
                      how="test", wake_s=80e-6, wake_burst_s=1e-3)
    apply(cal, col)
    p = tmp_path / "ranks.yaml"
    p.write_text(to_yaml(cal, gpus=2), encoding="utf-8")
    text = p.read_text()
    hw = load_hardware(p)
    t = next(iter(hw.templates.values()))
    assert t.unified_memory and t.gpus.count == 2
    link = t.links[0]
    assert link.kind == "network" and link.bw_GBps == pytest.approx(1.2) and link.efficiency == 1
    assert link.latency_us == pytest.approx(200.0)  # two hops rank -> host -> rank: half the fitted latency each
    assert t.gpus.op_costs.fixed_us["collective"] == pytest.approx(80.0)
    assert "--nproc 2" in text and "all-reduce between the 2 ranks" in text
    assert "are not measured (one process)" not in text
    topo = Topology(hw)
    assert topo.path_latency_s("node0/gpu0", "node0/gpu1") == pytest.approx(400e-6)
    assert topo.op_costs("node0/gpu1").fixed("collective") == pytest.approx(80e-6)
    # the all-reduce's latency beyond its ring's 2 rank -> rank hops (the all-to-all's 400 us each): 900 - 800 us
    assert topo.op_costs("node0/gpu1").fixed("all_reduce") == pytest.approx(100e-6)


def test_two_processes_are_measured():
    col = measure_collectives(2, quick=True)
    for f in (col.all_to_all, col.all_reduce):
        assert f.latency_s >= 0 and f.bw_Bps > 0 and len(f.rows) == 3
        assert all(t > 0 for _, t in f.rows)
    assert col.wake_s >= 0 and col.wake_burst_s > 0
    assert set(col.to_json()) >= {"world", "all_to_all", "all_reduce", "wake_s"}


@pytest.mark.parametrize("extra", [["--nproc", "1"], ["--nproc", "2", "--gpus", "3"],
                                   ["--nproc", "2", "--threads", "2"]])
def test_bad_nproc_arguments_exit_2(tmp_path, extra):
    assert main(["calibrate", "--device", "cpu", "-o", str(tmp_path / "x.yaml"), *extra]) == 2
    assert not (tmp_path / "x.yaml").exists()
