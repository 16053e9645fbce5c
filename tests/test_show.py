"""`placer show FILE [--plot PNG]` for every shipped hardware spec and workload."""
from __future__ import annotations

from pathlib import Path

import pytest

from placer.cli import main

ROOT = Path(__file__).resolve().parents[1]
HARDWARE = sorted((ROOT / "hardware_specs").glob("*.yaml"))
WORKLOADS = sorted((ROOT / "workloads").glob("*.yaml"))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("path", HARDWARE, ids=lambda p: p.name)
def test_show_hardware(path, capsys):
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    for words in ("GPUs of template", "Host of template", "Links of template", "Routes", "Cluster totals",
                  "HBM GB/s", "DRAM GB/s", "CPU gather GB/s", "latency us"):
        assert words in out, words


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda p: p.name)
def test_show_workload(path, capsys):
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    for words in ("Dense model", "bottom MLP", "top MLP", "interaction", "Largest", "top 1% rows", "Totals",
                  "global batch", "optimizer"):
        assert words in out, words


def test_show_lists_the_15_largest_tables_largest_first(capsys):
    assert main(["show", str(ROOT / "workloads" / "criteo-kaggle-dlrm.yaml")]) == 0
    out = capsys.readouterr().out
    assert "Largest 15 of 26 tables" in out
    lines = [line for line in out.splitlines() if line.startswith("│ C")]
    assert len(lines) == 15
    assert lines[0].split("│")[1].strip() == "C3"  # 10,131,227 rows, the largest Kaggle table
    assert "zipf(1.1)" in lines[0] and "% of lookups" in lines[0]


def test_show_cluster_totals(capsys):
    assert main(["show", str(ROOT / "hardware_specs" / "dgx-h100-16node.yaml")]) == 0
    out = capsys.readouterr().out
    assert "16 / 128" in out and "fabric" in out and "infiniband" in out and "GPU -> GPU, other node" in out


@pytest.mark.parametrize("path", [ROOT / "hardware_specs" / n for n in
                                  ("dgx-h100.yaml", "dgx-a100.yaml", "pcie-4gpu-workstation.yaml",
                                   "dgx-h100-32node.yaml", "cpu-server.yaml")]
                         + [ROOT / "workloads" / n for n in ("mlperf-dlrm-v2.yaml", "tiny.yaml",
                                                             "production-856.yaml")],
                         ids=lambda p: p.name)
def test_show_plot_writes_a_png(path, tmp_path, capsys):
    png = tmp_path / "out.png"
    assert main(["show", str(path), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    assert "wrote" in capsys.readouterr().out


def test_show_bad_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntables: []\ndense: {top_mlp: [1]}\nbatch_size: 4\n")
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "tables" in err and "Traceback" not in err


def test_show_missing_file_exits_2(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nope.yaml")]) == 2
    assert "not found" in capsys.readouterr().err
