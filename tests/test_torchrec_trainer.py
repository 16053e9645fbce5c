"""The step priced as TorchRec's DistributedModelParallel runs it (--trainer torchrec, program/torchrec_build.py):
one TBE per rank and sharding type, the ids' input distribution, only TorchRec's forms planned."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from placer.cli import main
from placer.cost import CostModel
from placer.errors import SpecError
from placer.forms import data_parallel
from placer.plan import Placement, Plan, Shard, SpecRef
from placer.planner.solve import SolveConfig, solve
from placer.program.build import plan_ops
from placer.program.tbe_costs import TBE_BACKWARD_EFFICIENCY, TBE_FORWARD_EFFICIENCY, tbe_costs
from placer.simulate import predict
from placer.specs import load_hardware, load_workload
from placer.topology import Topology
from placer.units import GB

ROOT = Path(__file__).resolve().parent.parent
HW4 = ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml"
TINY = ROOT / "workloads" / "tiny.yaml"


def _setup(trainer: str = "torchrec"):
    hw, wl = load_hardware(HW4), load_workload(TINY)
    wl = wl.model_copy(update={"trainer": trainer})
    return hw, wl, Topology(hw, wl.dense.dtype)


def _plan(hw, wl, placements) -> Plan:
    return Plan(hardware=SpecRef(name=hw.name, sha256=hw.sha256), workload=SpecRef(name=wl.name, sha256=wl.sha256),
                method="hand", placements=placements)


def _tw(t, gpu="node0/gpu0", hbm=None, precision="fp32"):
    k = t.rows if hbm is None else hbm
    return Placement(table=t.name, sharding="table_wise", precision=precision,
                     shards=[Shard(device=gpu, rows=(0, t.rows), cols=(0, t.dim), hbm_rows=k, host_rows=t.rows - k)])


def _groups(ops) -> set:
    return {op.group for op in ops if op.once}


def test_one_tbe_per_rank_and_sharding_type_whatever_the_widths():
    """Tables of widths 8, 16 and 32 table-wise on one GPU: placer's runner has a group per width, TorchRec one TBE
    (one forward call, one fused backward) and one input distribution of the ids, whose bytes are the ids and
    lengths the GPU's lookups need."""
    hw, wl, topo = _setup()
    plan = _plan(hw, wl, [_tw(t) for t in wl.tables])
    trec = plan_ops(CostModel(topo, wl).builder, plan.placements)
    placer_ops = plan_ops(CostModel(topo, wl.model_copy(update={"trainer": "placer"})).builder, plan.placements)
    tbes = {g for g in _groups(trec) if g.location != "input"}
    assert len({g.width for g in _groups(placer_ops)}) == 3 and len(tbes) == 1
    (tbe,) = tbes
    assert tbe.form == "tbe:table_wise" and tbe.width == 0
    fixed = sorted(op.kind for op in trec if op.once)
    assert fixed == ["input_dist", "lookup", "tbe_backward"]
    assert not {"sort", "segment_reduce", "update"} & {op.kind for op in trec}
    dist = [op for op in trec if op.kind == "input_dist" and not op.once]
    ids = sum(wl.batch_size * wl.lookups_per_sample(t.name) * 8 + wl.batch_size * wl.outputs_per_sample(t.name) * 4
              for t in wl.tables)
    assert sum(op.sizes["bytes"] for op in dist) == pytest.approx(ids)
    assert all(op.traffic for op in dist)  # the ids cross the links


def test_a_split_is_a_caching_tbe_with_its_cache_in_hbm():
    """A hot/cold split is fused_uvm_caching (as the export maps it): one TBE for both parts, its hot rows' weights
    a cache in HBM, the whole table (and its state) in host memory, the cold lookups across the link."""
    hw, wl, topo = _setup()
    t = wl.tables[0]
    p = _tw(t, hbm=t.rows // 4)
    model = CostModel(topo, wl)
    keys = {k for k, _ in model.builder.members(p)}
    assert len(keys) == 1 and next(iter(keys)).form == "tbe:table_wise:caching"
    cache = [b for b in model.builder.shard_buffers(p) if b.purpose == "TBE cache"]
    assert len(cache) == 1 and cache[0].bytes == pytest.approx(t.rows // 4 * t.dim * 4)
    link = "node0/host->node0/gpu0"
    over_link = lambda q: sum(s for op in model.builder.shard_ops(q) if op.kind == "lookup"
                              for r, s in op.traffic if r == link)
    hit = wl.access_models[t.name].coverage(0.25)
    assert over_link(p) == pytest.approx((1 - hit) * over_link(_tw(t, hbm=0)))  # only the misses cross
    fixed = {op.kind for op in model.builder.shard_ops(p) if op.once}
    assert "cache" in fixed  # the cache's upkeep, once per caching TBE


def test_placer_only_forms_are_refused_and_never_planned(capsys):
    """A table on the host CPU is not a TorchRec sharding: pricing such a plan under torchrec is refused, naming
    the table; --method host_cpu is refused (exit 2); the ILP plans none (and is no slower than any baseline)."""
    hw, wl, topo = _setup()
    host = Placement(table=wl.tables[0].name, sharding="host", shards=[Shard(
        device="node0/host", rows=(0, wl.tables[0].rows), cols=(0, wl.tables[0].dim), hbm_rows=0,
        host_rows=wl.tables[0].rows)])
    with pytest.raises(SpecError, match=wl.tables[0].name):
        predict(CostModel(topo, wl), _plan(hw, wl, [host] + [_tw(t) for t in wl.tables[1:]]))
    assert main(["solve", str(HW4), str(TINY), "--trainer", "torchrec", "--method", "host_cpu", "-q"]) == 2
    assert "torchrec" in capsys.readouterr().err
    plan = solve(topo, wl, SolveConfig(method="ilp", time_limit_s=30))
    assert all(p.sharding != "host" and p.compression is None for p in plan.placements)
    model = CostModel(topo, wl)
    for method in ("greedy_size", "uvm", "fae"):
        other = solve(topo, wl, SolveConfig(method=method, time_limit_s=30))
        assert plan.predicted["step_time_s"] <= predict(model, other)["step_time_s"] * (1 + 1e-9), method


def test_tbe_rates_default_to_the_datasheet_and_take_calibrated_ones():
    """On a GPU: the forward at TBE_FORWARD_EFFICIENCY and the backward at TBE_BACKWARD_EFFICIENCY of the HBM
    bandwidth; a spec's op_costs.torchrec replaces them where given."""
    hw, wl, topo = _setup()
    gpu = topo.gpus[0]
    costs = tbe_costs(topo, gpu, "sgd")
    hbm = topo.gpu_spec(gpu).hbm_bw_GBps * GB
    assert costs.forward["fp32"](128) == pytest.approx(hbm * TBE_FORWARD_EFFICIENCY)
    assert costs.backward["fp16"](64) == pytest.approx(hbm * TBE_BACKWARD_EFFICIENCY)
    name, tpl = next(iter(hw.templates.items()))
    from placer.specs.hardware import OpCostSpec, TbeCostSpec

    measured = TbeCostSpec(fixed_us={"tbe_forward": 11.0}, forward_GBps={"fp32": {64: 100.0, 256: 400.0}})
    gpus = tpl.gpus.model_copy(update={"op_costs": OpCostSpec(torchrec=measured)})
    topo2 = Topology(hw.model_copy(update={"templates": {name: tpl.model_copy(update={"gpus": gpus})}}))
    c2 = tbe_costs(topo2, topo2.gpus[0], "sgd")
    assert c2.fixed("tbe_forward") == pytest.approx(11e-6) and c2.forward["fp32"](64) == pytest.approx(100e9)
    assert c2.backward["fp32"](64) == pytest.approx(hbm * TBE_BACKWARD_EFFICIENCY)


def test_repeats_and_data_parallel_tables_take_their_own_measured_rates():
    """Where the spec measures the split rates, a table's repeated lookups are priced at forward_cached and
    backward_lookup (its distinct rows at forward and backward_row), and a data-parallel table at the dense TBE's
    rates with its fixed costs; without them every lookup is a distinct row at the one rate."""
    from placer.specs.hardware import OpCostSpec, TbeCostSpec

    hw, wl, topo = _setup()
    name, tpl = next(iter(hw.templates.items()))
    split = {"sgd": {"fp32": {16: 1.0, 1024: 1.0}}}
    measured = TbeCostSpec(fixed_us={"dense_forward": 3.0, "dense_backward": 4.0},
                           forward_GBps={"fp32": {16: 2.0, 1024: 2.0}}, forward_cached_GBps={"fp32": {16: 20.0}},
                           backward_GBps={"sgd": {"fp32": {16: 0.5}}}, backward_lookup_GBps=split,
                           backward_row_GBps={"sgd": {"fp32": {16: 0.25}}}, dense_forward_GBps={16: 8.0},
                           dense_backward_GBps={16: 4.0})
    gpus = tpl.gpus.model_copy(update={"op_costs": OpCostSpec(torchrec=measured)})
    topo2 = Topology(hw.model_copy(update={"templates": {name: tpl.model_copy(update={"gpus": gpus})}}))
    tbe = tbe_costs(topo2, topo2.gpus[0], "sgd")
    out = tbe.device.stream_s(4096.0)
    assert tbe.forward_s("fp32", 64, 1000, 10, 4096, False) == pytest.approx(10 * 64 / 2e9 + 990 * 64 / 20e9 + out)
    assert tbe.backward_s("fp32", 64, 64, 1000, 10, 64, False) == pytest.approx(1000 * 64 / 1e9 + 2 * 10 * 64 / 0.25e9)
    assert tbe.dense_forward_s("fp32", 64, 1000, 10, 4096) == pytest.approx(1000 * 64 / 8e9 + out)
    assert tbe.dense_backward_s("fp32", 64, 64, 1000, 250, 10, 64) == pytest.approx(250 * 64 / 4e9)  # per bag
    single = tbe_costs(topo, topo.gpus[0], "sgd")  # the datasheet: one rate, repeats as distinct rows
    assert single.forward_s("fp32", 64, 1000, 10, 0, False) == pytest.approx(1000 * 64 / single.forward["fp32"](64))
    # the builder: a data-parallel group's fixed costs are the dense TBE's
    t = wl.tables[0]
    dp = data_parallel.placement(t, list(topo2.gpus), "fp32")
    fixed = {op.kind: op.seconds for op in plan_ops(CostModel(topo2, wl).builder, [dp]) if op.once and op.group
             and op.group.location == "replica" and op.kind in ("lookup", "tbe_backward")}
    assert fixed == pytest.approx({"lookup": 3e-6, "tbe_backward": 4e-6})


def test_cli_prices_by_the_trainer(tmp_path, capsys):
    """simulate --trainer torchrec prices the same plan as DMP runs it: another step than placer's runner, the
    ops' kinds TorchRec's; a workload's own trainer field is the default."""
    plan = tmp_path / "plan.json"
    assert main(["solve", str(HW4), str(TINY), "--method", "greedy_size", "-q", "-o", str(plan)]) == 0
    capsys.readouterr()
    steps = {}
    for trainer in ("placer", "torchrec"):
        assert main(["simulate", str(HW4), str(TINY), str(plan), "--trainer", trainer, "--json"]) == 0
        steps[trainer] = json.loads(capsys.readouterr().out)["predicted"]["step_time_s"]
    assert steps["placer"] != steps["torchrec"] and steps["torchrec"] > 0
    wl_file = tmp_path / "tiny-torchrec.yaml"
    wl_file.write_text(TINY.read_text() + "\ntrainer: torchrec\n")
    assert main(["simulate", str(HW4), str(wl_file), str(plan), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["predicted"]["step_time_s"] == pytest.approx(steps["torchrec"])
    # explain under torchrec weighs only the alternatives TorchRec runs (no host-CPU table to price)
    assert main(["explain", str(HW4), str(TINY), str(plan), "--trainer", "torchrec", "--json"]) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert tables and all("host" not in (t.get("sentence") or "").split("Next best:")[-1] for t in tables)


def test_dmp_own_cost_is_fitted_on_synthetic_steps(monkeypatch):
    """calibrate/dmp.py: three synthetic models (one sharding type, two, and the first at a large batch of wide
    tables) priced under the torchrec trainer; their measured-less-priced residuals give dmp_step (per step),
    input_dist's extra per sharding type and DMP's rate per pooled-embedding byte, which the builder then charges
    (a dmp_step op on every rank). DMP's runs are stubbed here: the arithmetic, not a timing."""
    import torch

    from placer.calibrate import Calibration, dmp
    from placer.torchrec_io import dmp_train

    hw, _, topo = _setup()
    models = dmp._models(topo, len(topo.gpus))
    kinds = {n: {p.sharding for p in plan.placements} for n, (_, plan) in models.items()}
    assert kinds == {"one sharding type": {"table_wise"}, "two sharding types": {"table_wise", "row_wise"},
                     "large batch": {"table_wise"}}
    priced = {n: predict(CostModel(topo, w), p, check_memory=False)["step_time_s"] for n, (w, p) in models.items()}
    large = models["large batch"][0]
    pooled = large.batch_size // len(topo.gpus) * sum(t.dim for t in large.tables) * 4  # bytes per rank
    small = models["one sharding type"][0]
    pooled_small = small.batch_size // len(topo.gpus) * sum(t.dim for t in small.tables) * 4
    # S + K, S + 2K, S + K + (pooled_C - pooled_A) / G: S = 1 ms, K = 2 ms, G = 1 GB/s
    extra = {"one sharding type": 0.003, "two sharding types": 0.005,
             "large batch": 0.003 + (pooled - pooled_small) / 1e9}

    def stub(doc, wl, **kw):
        types = {t["parameter_sharding"]["sharding_type"] for t in doc["tables"].values()}
        name = ("large batch" if len(doc["tables"]) == len(large.tables) else
                {1: "one sharding type", 2: "two sharding types"}[len(types)])
        return {"median_step_s": priced[name] + extra[name]}

    monkeypatch.setattr(dmp_train, "train", stub)
    cal = Calibration(device=torch.device("cpu"), device_name="t", torch_version=torch.__version__,
                      date="2026-12-03", quick=True, threads=1, workloads=[])
    dmp.fit(cal, HW4.read_text(), len(topo.gpus))
    fixed = cal.device_costs.torchrec_fixed_us
    assert not cal.notes and fixed["dmp_step"].value == pytest.approx(1000.0, rel=1e-6)
    default = tbe_costs(topo, topo.gpus[0], "sgd").fixed("input_dist") * 1e6
    assert fixed["input_dist"].value == pytest.approx(default + 2000.0, rel=1e-6)
    assert cal.device_costs.torchrec_dmp_GBps["pooled"].value == pytest.approx(1.0, rel=1e-6)
    from placer.specs.hardware import OpCostSpec

    name, tpl = next(iter(hw.templates.items()))
    gpus = tpl.gpus.model_copy(update={"op_costs": OpCostSpec(torchrec=cal.device_costs.tbe_spec())})
    topo2 = Topology(hw.model_copy(update={"templates": {name: tpl.model_copy(update={"gpus": gpus})}}))
    steps = [op for op in CostModel(topo2, large).builder.base_ops() if op.kind == "dmp_step"]
    assert len(steps) == len(topo2.gpus) and all(op.seconds == pytest.approx(1e-3 + pooled / 1e9) for op in steps)
