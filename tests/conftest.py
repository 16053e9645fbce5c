"""Shared fixtures: small hand-made specs written to tmp files."""
from __future__ import annotations

import functools
import os
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def every_warning():
    """Each warning shown every time (the CLI runs once per process; tests run it many times in one, and
    pyproject's filterwarnings ignores SpecWarning in the suite): ``pytestmark = usefixtures("every_warning")``."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        yield


def require_torchrec() -> None:
    """Skip the calling test when torchrec is missing, except under CI, which installs torchrec (README's test
    command) and must run these tests: there the import fails the test."""
    if os.environ.get("CI"):
        import torchrec  # noqa: F401 -- CI must have it: fail, never skip
        return
    pytest.importorskip("torchrec")


@functools.lru_cache(maxsize=None)
def shipped_pair(hw: str, wl: str):
    """(Topology, Workload) of a shipped hardware spec and workload, by file stem; cached."""
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    w = load_workload(ROOT / f"workloads/{wl}.yaml")
    return Topology(load_hardware(ROOT / f"hardware_specs/{hw}.yaml"), w.dense.dtype), w


def baseline_steps(topo, wl, methods) -> dict[str, float]:
    """Predicted step time (s) of each method of ``methods`` that has a plan for ``wl`` on ``topo`` (those that
    raise InfeasibleError are left out)."""
    from placer.errors import InfeasibleError
    from placer.planner.solve import SolveConfig, solve

    steps = {}
    for method in methods:
        try:
            steps[method] = solve(topo, wl, SolveConfig(method=method)).predicted["step_time_s"]
        except InfeasibleError:
            continue
    return steps


@pytest.fixture
def one_torch_thread():
    """One torch thread: fast and steady on a loaded 2-core CI machine (OpenMP spins badly when oversubscribed)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

TWO_GPU_YAML = """
schema_version: 1
name: two-gpu
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
      kernel_launch_us: 2
      host_read_efficiency: 0.5
    host:
      dram_GiB: 4
      dram_bw_GBps: 100
      dram_reserve_GiB: 1
      cpu_cores: 8
      cpu_gather_GBps: 10
    switches: [sw]
    links:
      - {kind: nvlink, between: [gpu*, sw], bw_GBps: 100, latency_us: 1}
      - {kind: pcie, between: [gpu*, host], bw_GBps: 20, latency_us: 2}
nodes:
  - {template: box, count: 1}
"""

THREE_TABLE_YAML = """
schema_version: 1
name: three-tables
batch_size: 100
optimizer: {name: sgd, lr: 0.1}
tables:
  - {name: a, rows: 1000, dim: 16, access: {kind: uniform}}
  - {name: b, rows: 4000, dim: 8, pooling_factor: 2, access: {kind: uniform}}
  - {name: c, rows: 100, dim: 4, access: {kind: zipf, alpha: 1.1}}
dense:
  num_dense_features: 4
  bottom_mlp: [8]
  interaction: {kind: concat}
  top_mlp: [1]
"""


@pytest.fixture
def two_gpu_path(tmp_path) -> Path:
    p = tmp_path / "two-gpu.yaml"
    p.write_text(TWO_GPU_YAML)
    return p


@pytest.fixture
def three_tables_path(tmp_path) -> Path:
    p = tmp_path / "three-tables.yaml"
    p.write_text(THREE_TABLE_YAML)
    return p


@pytest.fixture
def two_gpu_model(two_gpu_path, three_tables_path):
    from placer.cost import CostModel
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(three_tables_path)
    return CostModel(Topology(load_hardware(two_gpu_path), wl.dense.dtype), wl)
