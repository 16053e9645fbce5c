"""The shipped specs hold the published numbers (docs/references.md and datasheets), so a typo cannot slip in."""
from __future__ import annotations

from pathlib import Path

import pytest

from placer.specs.hardware import load_hardware
from placer.specs.workload import load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parents[1]

KAGGLE_ROWS = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306,
               10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
TERABYTE_ROWS = [45833188, 36746, 17245, 7413, 20243, 3, 7114, 1441, 62, 29275261, 1572176, 345138, 10, 2209, 11267,
                 128, 4, 974, 14, 48937457, 11316796, 40094537, 452104, 12606, 104, 35]
MLPERF_ROWS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938, 155,
               4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
MLPERF_V2_HOTS = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]


def hw(name):
    return load_hardware(ROOT / "hardware_specs" / f"{name}.yaml")


def wl(name):
    return load_workload(ROOT / "workloads" / f"{name}.yaml")


# ---- workloads ----------------------------------------------------------------------------------------------

def test_criteo_kaggle_dlrm():
    w = wl("criteo-kaggle-dlrm")
    assert [t.rows for t in w.tables] == KAGGLE_ROWS and sum(KAGGLE_ROWS) == 33_762_577
    assert {t.dim for t in w.tables} == {16} and w.batch_size == 128 and w.optimizer.name == "sgd"
    assert w.dense.num_dense_features == 13 and w.dense.bottom_mlp == [512, 256, 64, 16]
    assert w.dense.top_mlp == [512, 256, 1] and w.dense.interaction.kind == "dot"
    assert all(w.lookups_per_sample(t.name) == 1 for t in w.tables)


def test_mlperf_dlrm_v1():
    w = wl("mlperf-dlrm-v1")
    assert [t.rows for t in w.tables] == MLPERF_ROWS and sum(MLPERF_ROWS) == 204_184_588
    assert w.total_bytes(with_optimizer=False) / 2**30 == pytest.approx(97.4, abs=0.05)  # docs/references.md
    assert {t.dim for t in w.tables} == {128} and w.batch_size == 16384 and w.optimizer.name == "sgd"
    assert w.dense.bottom_mlp == [512, 256, 128] and w.dense.top_mlp == [1024, 1024, 512, 256, 1]
    assert w.dense.interaction.kind == "dot"


def test_mlperf_dlrm_v2():
    w = wl("mlperf-dlrm-v2")
    assert [t.rows for t in w.tables] == MLPERF_ROWS
    assert [w.lookups_per_sample(t.name) for t in w.tables] == MLPERF_V2_HOTS
    assert w.batch_size == 65536 and w.optimizer.name == "adagrad" and {t.dim for t in w.tables} == {128}
    inter = w.dense.interaction
    assert inter.kind == "dcnv2" and inter.layers == 3 and inter.rank == 512
    assert w.dense.bottom_mlp == [512, 256, 128] and w.dense.top_mlp == [1024, 1024, 512, 256, 1]
    assert w.total_bytes() == pytest.approx(2 * w.total_bytes(with_optimizer=False))  # adagrad: one state/element
    # the reference's --adagrad: EXACT_ADAGRAD on the tables, torch.optim.Adagrad on the dense model (the header)
    assert w.resolved_dense_optimizer.name == "adagrad" and w.resolved_dense_optimizer.lr == 0.005


def test_criteo_terabyte_full():
    w = wl("criteo-terabyte-full")
    assert [t.rows for t in w.tables] == TERABYTE_ROWS and sum(TERABYTE_ROWS) == 177_944_275
    assert {t.dim for t in w.tables} == {128} and w.batch_size == 16384
    assert w.dense.top_mlp == [1024, 1024, 512, 256, 1]


@pytest.mark.parametrize("name", ["criteo-kaggle-dlrm", "mlperf-dlrm-v1", "mlperf-dlrm-v2", "criteo-terabyte-full"])
def test_criteo_skew_is_stronger_for_larger_tables(name):
    w = wl(name)
    models = w.access_models
    by_rows = sorted(w.tables, key=lambda t: t.rows)
    alphas = [models[t.name].alpha for t in by_rows]
    assert alphas == sorted(alphas) and 0.5 <= alphas[0] and alphas[-1] <= 1.2


# ---- hardware -----------------------------------------------------------------------------------------------

def test_dgx_a100():
    spec = hw("dgx-a100")
    t = spec.templates["dgx-a100"]
    assert t.gpus.count == 8 and t.gpus.hbm_bw_GBps == 2039 and t.gpus.peak_TFLOPs == {
        "fp32": 19.5, "tf32": 156, "bf16": 312}
    assert t.host.dram_GiB == 2048 and t.host.cpu_cores == 128 and t.host.dram_bw_GBps == pytest.approx(409.6)
    assert t.nics.count == 8 and t.nics.bw_GBps == 25
    nvlink = [link for link in t.links if link.kind == "nvlink"]
    assert len(nvlink) == 1 and nvlink[0].bw_GBps == 300
    assert {link.bw_GBps for link in t.links if link.kind == "pcie"} == {32}


def test_pcie_workstation_has_no_nvlink():
    spec = hw("pcie-4gpu-workstation")
    t = next(iter(spec.templates.values()))
    assert t.gpus.count == 4 and t.gpus.hbm_bw_GBps == 2000
    assert t.gpus.peak_TFLOPs == {"fp32": 51, "tf32": 378, "bf16": 756}
    assert {link.kind for link in t.links} == {"pcie"} and t.switches == []


@pytest.mark.parametrize("nodes", [2, 16, 32])
def test_dgx_h100_clusters_replicate_the_single_node_template(nodes):
    single = hw("dgx-h100").templates["dgx-h100"]
    spec = hw(f"dgx-h100-{nodes}node")
    assert spec.templates == {"dgx-h100": single}  # copied verbatim
    assert spec.num_nodes == nodes and spec.num_gpus == 8 * nodes
    assert spec.fabric.kind == "infiniband" and single.nics.bw_GBps == 50  # NDR 400 Gb/s


def test_cpu_server_models_sockets_as_ranks():
    spec = hw("cpu-server")
    t = next(iter(spec.templates.values()))
    assert t.gpus.model == "CPU socket rank" and t.gpus.count == 2
    assert t.gpus.hbm_bw_GBps == pytest.approx(307.2)  # 8 x DDR5-4800 per socket
    assert t.host.cpu_cores == 112
    topo = Topology(spec)
    assert sum(m.capacity_bytes for m in topo.memories.values()) == 1024 * 2**30


def test_hardware_peaks_are_within_datasheet_ranges():
    for path in sorted((ROOT / "hardware_specs").glob("*.yaml")):
        for name, t in load_hardware(path).templates.items():
            g = t.gpus
            assert 0 < g.hbm_gather_efficiency <= 1 and 0 < g.compute_efficiency <= 1, path.name
            assert g.hbm_GiB <= 141 or g.model == "CPU socket rank", path.name
            assert g.peak_TFLOPs.get("fp32", 0) <= g.peak_TFLOPs.get("bf16", float("inf")), path.name
            assert t.host.dram_reserve_GiB < t.host.dram_GiB and g.hbm_reserve_GiB < g.hbm_GiB, path.name
