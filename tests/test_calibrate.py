"""placer calibrate: op costs measured on the runner's own code, written as a spec the planner accepts, and
priced back to the times measured (the inversion round trip, per storage dtype); fixed_us.dense_op fitted
on synthetic dense steps, which the written spec then prices near their measured times."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from placer.calibrate import Calibration, Entry, Measurement, OpCostEntries, calibrate, price, to_yaml
from placer.calibrate import dense
from placer.calibrate.timing import sizes_for
from placer.cli import main
from placer.program.build import ProgramBuilder
from placer.program.dense import trace
from placer.program.ops import DENSE
from placer.specs import load_hardware, load_workload
from placer.specs.hardware import FIXED_COST_KINDS, OPTIMIZERS, OpCostSpec
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "workloads" / "tiny.yaml"
NUMBER = re.compile(r"^\s*-?\s*[\"A-Za-z_0-9]+(:[nt]{2})?\"?:\s*-?[0-9][0-9.]*(e-?[0-9]+)?\s*(#.*)?$")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """A quick CPU calibration (1 torch thread, the tiny workload's GEMMs) and the spec it wrote."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cal = calibrate(torch.device("cpu"), quick=True, workloads=[load_workload(TINY)])
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("cal") / "local.yaml"
    path.write_text(to_yaml(cal, name="quick-cpu"), encoding="utf-8")
    return cal, path


def test_the_spec_loads_with_every_op_cost_and_unified_memory(quick, capsys):
    cal, path = quick
    assert main(["check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out
    t = load_hardware(path).templates["local"]
    assert t.unified_memory and t.gpus.count == 1 and t.host.op_costs is None  # one RAM, one stream
    oc = t.gpus.op_costs
    for name in OpCostSpec.model_fields:
        assert getattr(oc, name) or name in ("graph_fixed_us", "torchrec"), f"op_costs.{name} is empty"
    assert not oc.graph_fixed_us and t.gpus.graph_kernel_us is None  # CUDA graphs are CUDA's
    assert any("graph_fixed_us and graph_kernel_us not measured" in n for n in cal.notes)
    assert set(oc.fixed_us) == set(FIXED_COST_KINDS) - {"collective", "all_reduce"}  # one process: no collective
    # fixed_us.dense_op (autograd's and the modules' share of a real step) is a least-squares fit on timed steps,
    # clamped at 0 when noise prices them above their times: that it comes out above 0 is timing quality,
    # checked by validation/perf_checks.py (this assert failed once in a CI run of the whole suite)
    rows = {"fp32": {16, 64, 256, 1024}, "fp16": {8, 32, 128, 512}}  # widths 4..256, each dtype its own rows
    for table in (oc.gather_GBps, oc.gather_cached_GBps, oc.host_gather_GBps):
        assert {dt: set(t) for dt, t in table.items()} == rows
    assert set(oc.update_GBps) == set(OPTIMIZERS)
    for opt, tables in oc.update_GBps.items():
        assert set(tables) == {"fp32", "fp16"} and all(len(t) == 4 for t in tables.values()), opt
    gemms = lambda wl, b: {f"{op.shape[0] * op.shape[1]}x{op.shape[2]}x{op.shape[3]}"
                           + ("" if op.layout == "nn" else f":{op.layout}") for op in trace(wl, b, "cpu").ops
                           if op.kind == "gemm"}
    wl = load_workload(TINY)
    shapes = gemms(wl, wl.batch_size)
    assert shapes <= set(oc.gemm_TFLOPs["fp32"])  # the workload's exact GEMMs, beside the grid
    fitted, checks = dense.cases(sizes_for(torch.device("cpu"), quick=True))
    for synthetic in fitted + checks:  # the synthetic dense steps' GEMMs are measured too
        assert gemms(synthetic, synthetic.batch_size) <= set(oc.gemm_TFLOPs["fp32"]), synthetic.name
    assert len(oc.gemm_TFLOPs["fp32"]) > len(shapes)
    assert {k.partition(":")[2] or "nn" for k in oc.gemm_TFLOPs["fp32"]} == {"nn", "nt", "tn"}  # the traces' layouts
    stream = oc.stream_GBps  # a table: bytes touched -> GB/s, 64 KiB and up, one point per quick size
    assert isinstance(stream, dict) and len(stream) == 3 and min(stream) == 64 * 1024
    assert t.gpus.hbm_bw_GBps == pytest.approx(stream[max(stream)], rel=1e-3)  # legacy: the largest size's rate


def test_every_number_has_a_source_comment(quick):
    _, path = quick
    text = path.read_text()
    assert text.startswith("# Hardware spec measured by `placer calibrate --quick --workload tiny`")
    lines = [ln for ln in text.splitlines() if NUMBER.match(ln)]
    assert len(lines) > 60
    for ln in lines:
        if ln.strip().startswith(("schema_version", "count: 1")) and "#" not in ln:
            continue  # the schema version and the node count are not measurements
        assert "# placer calibrate " in ln and " torch " in ln, ln


def test_placer_solve_accepts_the_spec(quick, tmp_path):
    _, path = quick
    plan = tmp_path / "plan.json"
    assert main(["solve", str(path), str(TINY), "-q", "--time-limit", "10", "-o", str(plan)]) == 0
    data = json.loads(plan.read_text())
    assert data["predicted"]["step_time_s"] > 0


def _priced(kind: str, z: dict, c) -> float:
    """The op's price, written out as placer/program/build.py prices it (fixed part + variable part)."""
    if kind == "fixed":
        return c.fixed(z["kind"])
    if kind == "lookup":
        return c.fixed("lookup") + c.lookup_s(z["dtype"], z["row_bytes"], z["lookups"], z["unique"], z["out_bytes"],
                                              False)
    if kind == "sort":
        return c.fixed("sort") + c.sort_s(z["ids"])
    if kind == "segment_reduce":
        return c.fixed("segment_reduce") + c.segment_reduce_s(z["row_bytes"], z["lookups"])
    if kind == "update":
        return c.fixed(f"update_{z['optimizer']}") + c.update_s(z["optimizer"], z["dtype"], z["row_bytes"], z["rows"],
                                                                False)
    if kind in ("copy", "copy_warm"):
        return c.fixed("copy") + c.stream_s(2 * z["bytes"], warm=kind == "copy_warm")
    if kind == "strided":
        return c.fixed("elementwise") + c.strided_s(z["bytes"])
    if kind == "indexed":
        return c.fixed("elementwise") + c.indexed_s(z["bytes"])
    assert kind == "gemm"
    return c.fixed("gemm") + c.gemm_s(z["dtype"], z["m"], z["k"], z["n"], z["batch"], z["layout"], z.get("warm", 0.0))


def test_pricing_the_timed_ops_with_the_written_spec_gives_their_times_back(quick):
    cal, path = quick
    costs = Topology(load_hardware(path)).op_costs("node0/gpu0")
    defining = [s for s in cal.samples if s.defines]
    kinds = {s.kind for s in defining}
    assert kinds == {"fixed", "lookup", "sort", "segment_reduce", "update", "copy", "copy_warm", "strided", "indexed",
                     "gemm", "dense_step"}
    updates = {(s.sizes["optimizer"], s.sizes["dtype"]) for s in defining if s.kind == "update"}
    assert updates == {(o, dt) for o in OPTIMIZERS for dt in ("fp32", "fp16")}
    clamped = [s for s in defining if not s.exact and s.kind not in ("gemm", "dense_step")]
    assert len(clamped) <= len(defining) // 10, [s.what for s in clamped]
    by_key: dict[tuple, list] = {}
    for s in defining:
        if s.kind == "gemm":  # GEMMs sharing a key share a rate: their sum comes back
            by_key.setdefault(s.defines, []).append(s)
            continue
        if s.kind == "dense_step":  # fitted over several sizes: its own test
            continue
        if s.exact:
            assert _priced(s.kind, s.sizes, costs) == pytest.approx(s.seconds, rel=0.02), s.what
    for group in by_key.values():
        if len(group) == 1 and not group[0].exact:
            continue  # faster than the fixed cost: no rate can give it back
        measured = sum(s.seconds for s in group)
        assert sum(_priced("gemm", s.sizes, costs) for s in group) == pytest.approx(measured, rel=0.02)
    copies = {s.defines for s in defining if s.kind == "copy" and s.exact}  # every point of the stream table
    assert copies == {(f"stream_GBps.{b}",) for b in load_hardware(path).templates["local"].gpus.op_costs.stream_GBps}
    layouts = {s.sizes["layout"] for s in defining if s.kind == "gemm"}  # each GEMM timed in its own layout
    assert layouts == {"nn", "nt", "tn"}
    for dt in ("fp32", "fp16"):  # both lookups of each row size, big table and cached table, of each dtype
        lookups = [s for s in defining if s.kind == "lookup" and s.exact and s.sizes["dtype"] == dt]
        assert len(lookups) >= 6, dt
        assert all(p.startswith(("gather_GBps." + dt, "gather_cached_GBps." + dt)) for s in lookups
                   for p in s.defines)


def test_sort_ns_per_id_is_a_table_by_id_count(quick):
    """A rate per id at each id count timed (each sort's time given back by its own point); between two counts
    the price per id is interpolated in log2 of the ids, beyond them it is the nearest count's."""
    cal, path = quick
    costs = Topology(load_hardware(path)).op_costs("node0/gpu0")
    table = load_hardware(path).templates["local"].gpus.op_costs.sort_ns_per_id
    sorts = [s for s in cal.samples if s.kind == "sort" and s.defines and s.exact]
    assert len({s.sizes["ids"] for s in sorts}) >= 2 and set(table) == {s.sizes["ids"] for s in sorts}
    for s in sorts:
        assert s.defines == (f"sort_ns_per_id.{s.sizes['ids']}",)
        assert price(s, costs) == pytest.approx(s.seconds, rel=0.02)
    lo, hi = sorted(table)[:2]
    mid = int(round(2 ** ((math.log2(lo) + math.log2(hi)) / 2)))
    assert costs.sort_s(mid) / mid == pytest.approx((table[lo] + table[hi]) / 2 * 1e-9, rel=0.01)
    assert costs.sort_s(1) == pytest.approx(table[lo] * 1e-9) and costs.sort_s(2**40) / 2**40 == pytest.approx(
        table[max(table)] * 1e-9)
    # the zipf checks are written beside the count they were timed at (the largest)
    line = next(x for x in path.read_text().splitlines()
                if x.strip().startswith(f"{max(table)}:") and "kernels.sort" in x)
    assert "checks, measured / priced" in line and "zipf" in line


def test_dense_op_is_a_least_squares_fit(quick):
    """Priced with the written spec, the fitted synthetic steps' residuals are orthogonal to their op counts
    (the normal equation of (measured - priced) = ops x dense_op) or, where dense_op is clamped at 0, their
    op-weighted sum is not positive (the least-squares optimum over dense_op >= 0); each case is in the
    comment."""
    cal, path = quick
    costs = Topology(load_hardware(path)).op_costs("node0/gpu0")
    steps = [s for s in cal.samples if s.kind == "dense_step" and s.defines]
    assert len(steps) == 4 and all(s.defines == ("fixed_us.dense_op",) for s in steps)
    assert all(s.what.startswith("the dense step of calibrate-") for s in steps)  # synthetic, not shipped
    residual = sum(s.sizes["ops"] * (s.seconds - price(s, costs)) for s in steps)
    scale = sum(s.sizes["ops"] * s.seconds for s in steps)
    text = path.read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("dense_op:"))
    if costs.fixed("dense_op") > 0:
        assert abs(residual) < 1e-3 * scale
    else:
        assert residual < 1e-3 * scale and "clamped to 0" in line
    assert line.count("ms measured vs") == 4 and "least squares" in line
    checks = [s for s in cal.samples if s.kind == "dense_step" and s.about == "fixed_us.dense_op"]
    assert {s.what.split()[4] for s in checks} >= {"calibrate-concat-adam", "tiny"}  # priced in the comments


def test_the_written_spec_prices_a_synthetic_dense_step_as_calibrate_did(quick):
    """A synthetic dense step (DLRM-like, dot interaction, SGD, small batch) priced as the planner prices it, by a
    ProgramBuilder's dense phase on the written one-'GPU' unified spec (each op at the stream rate for its own
    bytes, each GEMM at its layout's rate, the traffic warm as far as the step's memory sits in the caches), is
    what calibrate priced it at, and every synthetic step gets a finite positive ratio of time to price (how
    close they are is a benchmark's question: validation/, not a unit test's)."""
    cal, path = quick
    topo = Topology(load_hardware(path))
    fitted, _ = dense.cases(sizes_for(torch.device("cpu"), quick=True))
    wl = fitted[0]
    sample = next(s for s in cal.samples if s.kind == "dense_step" and f" {wl.name} " in s.what
                  and f" on {wl.batch_size} samples" in s.what)
    ops = [op for op in ProgramBuilder(topo, wl).base_ops() if op.phase == DENSE]
    assert len(ops) == sample.sizes["ops"]
    priced = sum(op.seconds for op in ops)
    assert priced == pytest.approx(price(sample, topo.op_costs("node0/gpu0")), rel=1e-9)  # as calibrate prices it
    ratios = {s.what: round(s.seconds / price(s, topo.op_costs("node0/gpu0")), 2)
              for s in cal.samples if s.kind == "dense_step"}
    assert ratios and all(0 < r < float("inf") for r in ratios.values()), ratios


def test_checks_are_priced_in_the_comments(quick):
    cal, path = quick
    checks = [s for s in cal.samples if s.about]
    assert {s.kind for s in checks} >= {"scatter", "update_dense"}
    assert "checks, measured / priced:" in path.read_text()


def test_the_command_writes_json_and_a_spec(tmp_path, capsys):
    out = tmp_path / "x.yaml"
    threads = torch.get_num_threads()
    assert main(["calibrate", "--device", "cpu", "--quick", "-o", str(out), "--json", "--threads", "1"]) == 0
    assert torch.get_num_threads() == threads
    data = json.loads(capsys.readouterr().out)
    assert data["wall_s"] > 0 and data["unified_memory"] and data["host_read_mechanism"] == "cpu"
    assert data["threads"] == 1
    exact = [s for s in data["samples"] if s["defines"] and s["exact"] and s["kind"] != "gemm"]
    assert exact and all(abs(s["priced_s"] / s["measured_s"] - 1) < 0.02 for s in exact)
    assert load_hardware(out).templates["local"].unified_memory


def _fake_gpu_calibration() -> Calibration:
    """What a CUDA calibration records, without a GPU: every legacy value, device and host op costs."""
    cal = Calibration(device=torch.device("cuda", 0), device_name="Fake GPU", torch_version="x", date="2026-01-01",
                      quick=False, host_read_mechanism="uva (test)")
    for k, v in {"hbm_GiB": 80, "hbm_bw_GBps": 3000, "hbm_gather_efficiency": 0.4, "hbm_reserve_GiB": 3,
                 "compute_efficiency": 0.6, "kernel_launch_us": 6, "host_read_efficiency": 0.7, "dram_GiB": 128,
                 "dram_bw_GBps": 90, "dram_reserve_GiB": 12.8, "cpu_cores": 16, "cpu_gather_GBps": 6,
                 "cpu_peak_TFLOPs": 1.2, "link_bw_GBps": 55, "link_efficiency": 0.97, "link_latency_us": 9}.items():
        cal.set(k, v, "test")
    cal.peaks = {"fp32": Measurement(51, "t"), "tf32": Measurement(370, "t"), "bf16": Measurement(700, "t")}

    def costs(scale: float) -> OpCostEntries:
        e = OpCostEntries()
        rows = lambda rate, fp16=1.0: {"fp32": {rb: Entry(rate / scale, "t") for rb in (16, 64, 256, 1024)},
                                       "fp16": {rb: Entry(fp16 * rate / scale, "t") for rb in (8, 32, 128, 512)}}
        e.fixed_us = {k: Entry(5.0 * scale, "t") for k in FIXED_COST_KINDS if k != "collective"}
        e.gather_GBps, e.gather_cached_GBps = rows(500.0, 0.5), rows(2000.0)
        e.host_gather_GBps = rows(20.0)
        e.stream_GBps = {2**16: Entry(4000.0 / scale, "t"), 2**29: Entry(2500.0 / scale, "t")}
        e.sort_ns_per_id = {2**16: Entry(0.1 * scale, "t")}
        e.segment_reduce_GBps = {64: Entry(800.0 / scale, "t")}
        e.update_GBps = {o: {"fp32": {64: Entry(400.0 / scale, "t")}, "fp16": {40: Entry(300.0 / scale, "t")}}
                         for o in OPTIMIZERS}
        e.gemm_TFLOPs = {"bf16": {"4096x512x256": Entry(300.0 / scale, "t"),
                                  "4096x512x256:tn": Entry(200.0 / scale, "t")}}
        return e

    cal.device_costs, cal.host_costs = costs(1.0), costs(20.0)
    return cal


def test_a_gpu_spec_has_host_op_costs_and_validates(tmp_path):
    p = tmp_path / "gpu.yaml"
    p.write_text(to_yaml(_fake_gpu_calibration(), name="fake", gpus=4))
    hw = load_hardware(p)
    t = hw.templates["local"]
    assert not t.unified_memory and t.host.op_costs.gather_GBps["fp32"][64] == 1.0 / 20 * 500
    topo = Topology(hw)
    assert len(topo.gpus) == 4 and t.gpus.peak_TFLOPs["bf16"] == 700
    host, gpu = topo.op_costs("node0/host"), topo.op_costs("node0/gpu1")
    assert host.gather["fp32"](64) == pytest.approx(25e9) and host.gather["fp16"](32) == pytest.approx(12.5e9)
    assert gpu.host_gather["fp32"](64) == pytest.approx(20e9)
    assert gpu.update["adam"]["fp16"](40) == pytest.approx(300e9) and gpu.fixed("dense_op") == pytest.approx(5e-6)
    assert gpu.stream(2**16) == pytest.approx(4000e9) and gpu.stream(2**30) == pytest.approx(2500e9)
    assert host.stream(2**29) == pytest.approx(125e9)
    assert gpu.gemm_s("bf16", 4096, 512, 256, layout="tn") == pytest.approx(2 * 4096 * 512 * 256 / 200e12)
    assert "uva (test)" in p.read_text()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_quick_cuda_calibration(tmp_path):
    cal = calibrate(torch.device("cuda"), quick=True)
    p = tmp_path / "gpu.yaml"
    p.write_text(to_yaml(cal))
    t = load_hardware(p).templates["local"]
    assert not t.unified_memory and t.host.op_costs is not None and t.gpus.op_costs.host_gather_GBps
    assert set(t.gpus.op_costs.host_gather_GBps) == set(t.gpus.op_costs.gather_GBps) == {"fp32", "fp16"}
    assert "dense_op" in t.gpus.op_costs.fixed_us and "dense_op" not in t.host.op_costs.fixed_us
    assert cal.host_read_mechanism.split()[0] in ("uva", "cpu_gather_copy")
    assert set(t.gpus.op_costs.graph_fixed_us) >= {"lookup", "sort", "segment_reduce", "update_adam"}
    assert t.gpus.graph_kernel_us is not None


def test_graph_chains_write_their_costs(tmp_path):
    """calibrate/graph_chain.py's chains (as plain calls on a CPU: the code path, not a graph's numbers) fill
    graph_fixed_us for every kind the graph step runs and graph_kernel_us, and the written spec carries them with
    their source; program/graph_price.py then prices with them."""
    from placer.calibrate import graph_chain
    from placer.program.graph_price import graph_topology

    cal = Calibration(device=torch.device("cpu"), device_name="test cpu", torch_version=torch.__version__,
                      date="2026-12-03", quick=True, threads=1, workloads=[])
    graph_chain.fit(cal, torch.device("cpu"), reps=3, plain=True)
    kinds = set(cal.device_costs.graph_fixed_us)
    assert kinds == {"elementwise", "copy", "lookup", "sort", "segment_reduce", "gemm"} | {
        f"update_{o}" for o in OPTIMIZERS}
    assert all(e.value >= 0 and "plain calls" in e.how for e in cal.device_costs.graph_fixed_us.values())
    assert cal.values["graph_kernel_us"].value == cal.device_costs.graph_fixed_us["elementwise"].value
    spec = cal.device_costs.spec()
    assert set(spec.graph_fixed_us) == kinds
    hw = load_hardware(ROOT / "hardware_specs" / "h100-pcie-host.yaml")
    name, tpl = next(iter(hw.templates.items()))
    gpus = tpl.gpus.model_copy(update={"op_costs": spec, "graph_kernel_us": cal.values["graph_kernel_us"].value})
    topo = Topology(hw.model_copy(update={"templates": {name: tpl.model_copy(update={"gpus": gpus})}}))
    costs = graph_topology(topo).op_costs(topo.gpus[0])
    assert costs.fixed("lookup") == pytest.approx(spec.graph_fixed_us["lookup"] * 1e-6)


def test_calibrate_rejects_bad_arguments(tmp_path):
    assert main(["calibrate", "--device", "cpu", "-o", str(tmp_path / "x.yaml"), "--gpus", "0"]) == 2
    assert main(["calibrate", "--device", "tpu", "-o", str(tmp_path / "x.yaml")]) == 2
    assert main(["calibrate", "--device", "cpu", "-o", str(tmp_path / "x.yaml"), "--workload", "nope.yaml"]) == 2


def test_the_cold_pool_never_hands_consecutive_repeats_the_same_memory(monkeypatch):
    """Every repeat takes a fresh stretch of a pool of >= 2 x the last-level cache (sysfs; 32 MiB where it reports
    none), capped (and said so) where memory does not allow; transposed operands are the views the trace calls
    't'."""
    from placer.calibrate import cold
    from placer.program.dense import _layout

    monkeypatch.setattr(cold, "last_level_cache_bytes", lambda: None)
    pool = cold.ColdPool(torch.device("cpu"), cap=1 << 30)
    assert pool.llc == 32 * 2**20 and pool.size == 64 * 2**20 and not pool.capped
    assert "2 x the 32 MiB cache" in pool.describe()
    f32 = torch.float32
    sets = pool.sets([(f32, (300, 200), True), (f32, (200, 100), False), (f32, (100,), False)], 40)
    spans = [(s[0].data_ptr(), s[2].data_ptr() + 400) for s in sets]
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 <= b0 or b1 <= a0  # consecutive sets disjoint
    a, b, _ = sets[0]
    assert a.shape == (300, 200) and _layout(a) == "t" and _layout(b) == "n"
    assert float(a[0, 0]) == pytest.approx(0.0115, rel=0.01)  # 0x3C bytes: a small normal number in any dtype
    big = pool.sets([(f32, (10 * 2**20,), False)], 3)  # 40 MiB sets: the pool grows to hold two
    assert pool.size >= 80 * 2**20 and big[0][0].data_ptr() != big[1][0].data_ptr()
    small = cold.ColdPool(torch.device("cpu"), cap=16 * 2**20)  # capped below 2 x the cache: said so
    assert small.capped and "capped at 16 MiB" in small.describe()
    one = small.sets([(f32, (3 * 2**20,), False)], 3)  # a 12 MiB set in a 16 MiB pool: reused, and said so
    assert one[0][0].data_ptr() == one[1][0].data_ptr() and "reuse" in small.note(12 * 2**20)


def test_tbe_costs_are_measured_and_written(tmp_path, monkeypatch, capsys):
    """calibrate/tbe.py times FBGEMM's TBE (fbgemm-gpu-cpu here: a smoke form, tiny sizes) into op_costs.torchrec:
    fixed costs, forward and backward rates per storage dtype and row bytes, each with its source; the written
    spec prices the torchrec trainer with them (program/tbe_costs.py); without fbgemm_gpu the command exits 2 before
    measuring anything."""
    import dataclasses

    from placer.calibrate import tbe
    from placer.calibrate.writer import _op_cost_items, render
    from placer.program.tbe_costs import tbe_costs

    if tbe.missing():
        pytest.skip(tbe.missing())
    cal = Calibration(device=torch.device("cpu"), device_name="test cpu", torch_version=torch.__version__,
                      date="2026-12-03", quick=True, threads=1, workloads=[])
    sizes = dataclasses.replace(sizes_for(torch.device("cpu"), True), table_bytes=8 * 2**20, gather_bytes=2**17,
                                reps=3)
    hw = load_hardware(ROOT / "hardware_specs" / "measured-cpu-2026-11-23.yaml")
    topo = Topology(hw)
    tbe.fit(cal, torch.device("cpu"), sizes, topo.op_costs(topo.gpus[0]), optimizers=("adam", "sgd", "adagrad"),
            widths=(16, 64))
    spec = cal.device_costs.tbe_spec()
    assert set(spec.fixed_us) == {"tbe_forward", "tbe_backward", "dense_forward", "dense_backward"}
    assert spec.fixed_us["tbe_forward"] > 0
    assert {dt: set(t) for dt, t in spec.forward_GBps.items()} == {"fp32": {64, 256}, "fp16": {32, 128}}
    assert {dt: set(t) for dt, t in spec.forward_cached_GBps.items()} == {"fp32": {64, 256}, "fp16": {32, 128}}
    for name in ("backward_GBps", "backward_lookup_GBps", "backward_row_GBps"):  # one table per optimizer timed
        table = getattr(spec, name)
        assert set(table) == {"sgd", "adagrad"}
        assert all(v > 0 for by in table.values() for t in by.values() for v in t.values())
    assert set(spec.dense_forward_GBps) == set(spec.dense_backward_GBps) == {64, 256}  # fp32 rows only
    assert any("no adam" in n for n in cal.notes)  # fbgemm-gpu-cpu has no Adam: its default kept, said
    text = "\n".join(render(_op_cost_items(cal.device_costs, "calibrate", {})))
    assert "torchrec:" in text and "forward_GBps:" in text and "TBE forward of one lookup" in text
    assert "backward_row_GBps:" in text and "dense_backward_GBps:" in text and "hot rows" in text
    name, tpl = next(iter(hw.templates.items()))
    gpus = tpl.gpus.model_copy(update={"op_costs": tpl.gpus.op_costs.model_copy(update={"torchrec": spec})})
    topo2 = Topology(hw.model_copy(update={"templates": {name: tpl.model_copy(update={"gpus": gpus})}}))
    priced = tbe_costs(topo2, topo2.gpus[0], "adagrad")
    assert priced.fixed("tbe_forward") == pytest.approx(spec.fixed_us["tbe_forward"] * 1e-6)
    assert priced.forward["fp16"](128) == pytest.approx(spec.forward_GBps["fp16"][128] * 1e9)
    assert priced.backward["fp32"](64) == pytest.approx(spec.backward_GBps["adagrad"]["fp32"][64] * 1e9)
    assert priced.backward_row["fp32"](64) == pytest.approx(spec.backward_row_GBps["adagrad"]["fp32"][64] * 1e9)
    assert priced.dense_forward(256) == pytest.approx(spec.dense_forward_GBps[256] * 1e9)
    # the split prices repeats apart from distinct rows: 4096 lookups of 8 rows cost less than of 4096 rows
    repeats = priced.backward_s("fp32", 64, 64, 4096, 8, 68, False)
    assert repeats < priced.backward_s("fp32", 64, 64, 4096, 4096, 68, False)
    assert repeats == pytest.approx(4096 * 64 / priced.backward_lookup["fp32"](64)
                                    + 2 * 8 * 68 / priced.backward_row["fp32"](64))
    other = tbe_costs(topo2, topo2.gpus[0], "rowwise_adagrad")  # not timed: the device's own update rate
    update = topo2.op_costs(topo2.gpus[0]).update["rowwise_adagrad"]["fp32"]
    assert other.backward["fp32"](64) == pytest.approx(update(64))
    monkeypatch.setattr(tbe, "missing", lambda: "fbgemm_gpu does not import here (test)")
    out = tmp_path / "never.yaml"
    assert main(["calibrate", "--device", "cpu", "--quick", "--trainer", "torchrec", "-o", str(out)]) == 2
    assert "fbgemm_gpu" in capsys.readouterr().err and not out.exists()
