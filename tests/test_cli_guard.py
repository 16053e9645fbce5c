"""Bad input to the commands, the plan checks and the runner: exit 2 naming the argument or the file, checked
before the work, never a traceback (issue 16, the commands / plan / runner room)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from placer.cli import main
from placer.commands._output import check_output_path, check_plot_path, write_text
from placer.errors import SpecError
from placer.plan import Placement, Plan, Shard, SpecRef, load_plan
from placer.runner.memory import estimate_needs
from placer.specs import load_hardware, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parent.parent
HW = str(ROOT / "hardware_specs" / "h100-pcie-host.yaml")
HW4 = str(ROOT / "hardware_specs" / "pcie-4gpu-workstation.yaml")
TWO_NODE = str(ROOT / "hardware_specs" / "dgx-h100-2node.yaml")
TINY = str(ROOT / "workloads" / "tiny.yaml")
CRITEO = str(ROOT / "workloads" / "criteo-kaggle-dlrm.yaml")


@pytest.fixture(scope="module")
def plan_doc(tmp_path_factory):
    """A greedy plan of tiny on the one-GPU host, as a JSON document (hashes kept)."""
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["solve", HW, TINY, "--method", "greedy_size", "-q", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _write(tmp_path, name, doc) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return str(p)


def _small_hbm(tmp_path) -> str:
    """h100-pcie-host with 1 MiB of HBM left for tables: tiny's all-HBM plan does not fit it."""
    doc = yaml.safe_load(Path(HW).read_text())
    doc["templates"]["h100-host"]["gpus"]["hbm_GiB"] = 4.001
    doc["name"] = "small-hbm"
    return _write(tmp_path, "small.yaml", doc)


def _no_hashes(doc) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["hardware"].pop("sha256", None)
    doc["workload"].pop("sha256", None)
    return doc


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err


@pytest.fixture
def no_solve(monkeypatch):
    """Fail the test if a command starts solving: refusals must come first."""
    import placer.planner.solve as solve_mod

    def boom(*a, **k):
        raise AssertionError("the command solved before refusing its arguments")

    monkeypatch.setattr(solve_mod, "solve", boom)


# ---- 1. output paths --------------------------------------------------------------------------------------------

def _bad_paths(tmp_path):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    return {"directory": str(tmp_path / "adir"), "missing parent": str(tmp_path / "nope" / "x.json"),
            "parent is a file": str(tmp_path / "afile" / "x.json"), "fifo": str(tmp_path / "fifo"),
            "trailing slash": str(tmp_path / "adir") + "/", "proc": "/proc/placer-no-such/x.json"}


@pytest.mark.parametrize("what", ["directory", "missing parent", "parent is a file", "fifo", "trailing slash",
                                  "proc"])
def test_output_path_refused_before_the_solve(tmp_path, capsys, no_solve, what):
    path = _bad_paths(tmp_path)[what]
    assert main(["solve", HW, TINY, "-q", "-o", path]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert "-o/--output" in err


def test_output_path_helpers(tmp_path):
    paths = _bad_paths(tmp_path)
    for path in paths.values():
        with pytest.raises(SpecError, match="--out"):
            check_output_path(path, "--out")
    ok = tmp_path / "new.json"
    assert check_output_path(ok, "--out") == ok and not ok.exists()  # the probe leaves nothing behind
    assert check_output_path(os.devnull, "--out")
    with pytest.raises(SpecError, match="-o"):
        check_output_path("", "-o")
    with pytest.raises(SpecError, match=r"\.bogus"):
        check_plot_path(tmp_path / "x.bogus", "--plot")
    assert check_plot_path(tmp_path / "x.svg", "--plot")
    with pytest.raises(SpecError, match="--out"):
        write_text(tmp_path / "adir", "x", "--out")


def test_plan_write_error_is_spec_error(tmp_path, plan_doc):
    plan = Plan.model_validate(plan_doc)
    (tmp_path / "d").mkdir()
    with pytest.raises(SpecError, match="cannot write"):
        plan.write(tmp_path / "d")


def test_write_failure_after_the_solve_is_exit_2(tmp_path, capsys, monkeypatch):
    """A path that passes the early check and fails at the write (a race): exit 2 naming the argument."""
    import placer.commands.solve as solve_cmd

    monkeypatch.setattr(solve_cmd, "check_output_path", lambda path, argument: path)
    (tmp_path / "d").mkdir()
    assert main(["solve", HW, TINY, "-q", "--method", "greedy_size", "-o", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert "-o/--output" in err


@pytest.mark.parametrize("argv", [
    ["show", TINY, "--plot", "{dir}"],
    ["show", HW, "--plot", "{missing}"],
    ["show", TINY, "--plot", "{bogus}"],
    ["sweep", TWO_NODE, TINY, "--gpus", "8", "--plot", "{dir}"],
    ["solve", HW, TINY, "--plot", "{dir}"],
    ["solve", HW, TINY, "--plot", "{bogus}"],
    ["calibrate", "--device", "cpu", "--quick", "-o", "{dir}"],
    ["calibrate", "--device", "cpu", "--quick", "-o", "{missing}"],
])
def test_every_writer_checks_its_path_first(tmp_path, capsys, no_solve, monkeypatch, argv):
    import placer.calibrate as cal

    monkeypatch.setattr(cal, "calibrate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("measured")))
    (tmp_path / "adir").mkdir()
    subs = {"{dir}": str(tmp_path / "adir"), "{missing}": str(tmp_path / "no" / "x.png"),
            "{bogus}": str(tmp_path / "x.bogus")}
    argv = [subs.get(a, a) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert ("--plot" in err) or ("-o/--output" in err)


# ---- 2. numeric arguments ---------------------------------------------------------------------------------------

SOLVE = ["solve", HW, TINY, "-q"]
COMPARE = ["compare", HW, TINY]
SWEEP = ["sweep", TWO_NODE, TINY, "--gpus", "8"]
RUN = ["run", HW, TINY, "PLAN", "--device", "cpu"]
CAL = ["calibrate", "--device", "cpu", "-o", "OUT"]


@pytest.mark.parametrize("base,flag,value", [
    *[(SOLVE, "--seed", v) for v in ("-1", "1e3", "99999999999", "")],
    *[(SOLVE, "--time-limit", v) for v in ("inf", "nan", "0", "-5", "1e9", "1e400", "abc")],
    *[(SOLVE, "--gap", v) for v in ("nan", "1", "-0.1", "inf")],
    *[(SOLVE, "--threads", v) for v in ("-1", "0", "1.5", "100000")],
    *[(COMPARE, "--time-limit", v) for v in ("inf", "nan")],
    *[(COMPARE, "--threads", v) for v in ("-1",)],
    *[(SWEEP, "--time-limit", v) for v in ("inf", "-1")],
    *[(SWEEP, "--target-throughput", v) for v in ("nan", "inf", "0", "-5")],
    *[(SWEEP, "--max-gpus", v) for v in ("0", "-3", "1e9", "999999")],
    *[(RUN, "--steps", v) for v in ("0", "-1", "nan", "1e12")],
    *[(RUN, "--warmup", v) for v in ("-1", "x")],
    *[(RUN, "--phase-steps", v) for v in ("-1",)],
    *[(RUN, "--scale", v) for v in ("nan", "inf", "0", "-2", "0.5", "1e400")],
    *[(RUN, "--seed", v) for v in ("-1", "2.5")],
    *[(RUN, "--threads", v) for v in ("-1", "0")],
    *[(RUN, "--pool", v) for v in ("-3", "0", "10000000")],
    *[(RUN, "--nproc", v) for v in ("0", "-1", "100000")],
    *[(CAL, "--gpus", v) for v in ("0", "-1", "100000")],
    *[(CAL, "--threads", v) for v in ("0", "-2")],
])
def test_numeric_arguments_are_checked(tmp_path, capsys, no_solve, base, flag, value):
    argv = [str(tmp_path / "x.json") if a == "PLAN" else str(tmp_path / "x.yaml") if a == "OUT" else a
            for a in base] + [f"{flag}={value}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert f"argument {flag}" in err


def test_time_limit_cap_is_documented():
    from placer.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices["solve"]
    assert "86400" in sub.format_help()


@pytest.mark.parametrize("methods", ["ilp,nope", ",", ""])
def test_compare_methods_checked(capsys, no_solve, methods):
    assert main(["compare", HW, TINY, "--methods", methods]) == 2
    assert "--methods" in capsys.readouterr().err


def test_sweep_gpu_count_capped(capsys, no_solve):
    assert main(["sweep", TWO_NODE, TINY, "--gpus", "8,99999992"]) == 2
    err = capsys.readouterr().err
    assert "--gpus" in err and "1024" in err


# ---- 3. check runs the same capacity check as simulate and run; predicted/solver are claims ---------------------

def test_check_refuses_over_capacity_like_simulate_and_run(tmp_path, capsys, plan_doc):
    small = _small_hbm(tmp_path)
    plan = _write(tmp_path, "plan.json", _no_hashes(plan_doc))
    for argv in (["check", plan, "--hardware", small, "--workload", TINY], ["simulate", small, TINY, plan],
                 ["run", small, TINY, plan, "--device", "cpu", "--steps", "1", "--threads", "1"],
                 ["run", small, TINY, plan, "--device", "cpu", "--steps", "1", "--threads", "1", "--scale", "8"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        _no_traceback(err)
        assert plan in err and "node0/gpu0" in err and "placements" in err, (argv, err)


def test_check_reprices_and_reports_claims(tmp_path, capsys, plan_doc):
    doc = _no_hashes(plan_doc)
    doc["predicted"]["step_time_s"] = 1e-9  # a hand-edited claim
    doc["solver"] = {"backend": "cbc", "status": "optimal", "gap": 0.0}
    plan = _write(tmp_path, "plan.json", doc)
    assert main(["check", plan]) == 0
    out = capsys.readouterr().out
    assert "not re-checked" in out and "optimal" in out
    assert main(["check", plan, "--hardware", HW, "--workload", TINY]) == 0
    out = capsys.readouterr().out
    assert "re-priced step" in out and "the file records 0.000 ms" in out and "not re-checked" in out


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["predicted"].__setitem__("step_time_s", "fast"), "predicted.step_time_s"),
    (lambda d: d["predicted"].__setitem__("step_time_s", -1.0), "predicted.step_time_s"),
    (lambda d: d["predicted"].__setitem__("phases_s", {"dense": "slow"}), "predicted.phases_s.dense"),
    (lambda d: d["predicted"].__setitem__("phases_s", [1, 2]), "predicted.phases_s"),
    (lambda d: d["predicted"]["devices"]["node0/gpu0"].__setitem__("hbm_used_bytes", "lots"),
     "predicted.devices.node0/gpu0.hbm_used_bytes"),
    (lambda d: d.__setitem__("predicted", "fast"), "predicted"),
    (lambda d: d["solver"].__setitem__("gap", -0.5), "solver.gap"),
    (lambda d: d["solver"].__setitem__("wall_s", "long"), "solver.wall_s"),
    (lambda d: d["solver"].__setitem__("status", "proven"), "solver.status"),
])
def test_bad_predicted_and_solver_blocks(tmp_path, capsys, plan_doc, edit, field):
    doc = json.loads(json.dumps(plan_doc))
    edit(doc)
    plan = _write(tmp_path, "plan.json", doc)
    assert main(["check", plan]) == 2
    err = capsys.readouterr().err
    _no_traceback(err)
    assert plan in err and field in err


def test_predicted_block_with_missing_keys_is_fine(tmp_path, capsys, plan_doc):
    doc = json.loads(json.dumps(plan_doc))
    doc["predicted"] = {"bottleneck": "hand"}
    plan = _write(tmp_path, "plan.json", doc)
    assert main(["check", plan, "--hardware", HW, "--workload", TINY]) == 0
    assert "re-priced step" in capsys.readouterr().out


def test_check_hardware_needs_workload(tmp_path, capsys, plan_doc):
    plan = _write(tmp_path, "plan.json", plan_doc)
    assert main(["check", plan, "--hardware", HW]) == 2
    assert "--hardware and --workload" in capsys.readouterr().err


# ---- 4. run --scale keeps the capacity check; the memory estimate covers many shards ---------------------------

def test_run_scale_does_not_skip_the_capacity_check(tmp_path, capsys, plan_doc):
    """The plan as given must fit the spec; scaling it down for this machine does not excuse it."""
    small = _small_hbm(tmp_path)
    plan = _write(tmp_path, "plan.json", _no_hashes(plan_doc))
    assert main(["run", small, TINY, plan, "--device", "cpu", "--steps", "1", "--scale", "1000",
                 "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert plan in err and "node0/gpu0" in err


def _one_row_shards(n: int):
    hw, wl = load_hardware(HW), load_workload(TINY)
    placements = []
    for t in wl.tables:
        if t.name == "t_users":
            shards = [Shard(device="node0/gpu0", rows=(i, i + 1), cols=(0, t.dim), hbm_rows=1, host_rows=0)
                      for i in range(n)]
            shards.append(Shard(device="node0/gpu0", rows=(n, t.rows), cols=(0, t.dim), hbm_rows=t.rows - n,
                                host_rows=0))
            placements.append(Placement(table=t.name, sharding="row_wise", shards=shards))
        else:
            placements.append(Placement(table=t.name, sharding="host", shards=[
                Shard(device="node0/host", rows=(0, t.rows), cols=(0, t.dim), hbm_rows=0, host_rows=t.rows)]))
    return hw, wl, Plan(hardware=SpecRef(name=hw.name), workload=SpecRef(name=wl.name), method="hand",
                        placements=placements)


def test_memory_estimate_grows_with_every_shard():
    """Per one-row shard the runner holds its pooled output, autograd's gradient and the packed gradient
    (3 x bags x width x 4 bytes) plus its objects; the estimate must grow at least that fast (measured: ~76 KB
    per shard on tiny, batch 256, width 32; the estimate gives ~98 KB)."""
    hw, wl, few = _one_row_shards(10)
    _, _, many = _one_row_shards(1010)
    topo = Topology(hw, wl.dense.dtype)
    a = estimate_needs(few, wl, topo, "cpu", 1)
    b = estimate_needs(many, wl, topo, "cpu", 1)
    per_shard = ((b.device_total + b.host_total) - (a.device_total + a.host_total)) / 1000
    bags, width = 256, 32  # tiny: f_user pools t_users once per sample
    assert per_shard >= 3 * bags * width * 4


def test_many_shards_build_quickly(one_torch_thread):
    """A plan of 2,000 one-row shards runs (the init draws each chunk once, not once per shard)."""
    import time

    from placer.runner.run import RunConfig, run_plan

    hw, wl, plan = _one_row_shards(2000)
    t0 = time.perf_counter()
    r = run_plan(hw, wl, plan, RunConfig(device="cpu", steps=1, warmup=0, phase_steps=0, threads=1))
    assert r["measured"]["step_time_s"] > 0
    assert time.perf_counter() - t0 < 120  # was ~10 s on its own at 2,000 shards, minutes at 20,000


# ---- 5. user mistakes inside commands ----------------------------------------------------------------------------

def test_plan_for_other_hardware_or_workload(tmp_path, capsys, plan_doc):
    plan = _write(tmp_path, "plan.json", _no_hashes(plan_doc))
    doc = _no_hashes(plan_doc)
    doc["placements"][0]["shards"][0]["device"] = "node0/gpu7"
    other_dev = _write(tmp_path, "dev.json", doc)
    for argv, words in ((["run", HW, CRITEO, plan, "--device", "cpu"], [plan, "unknown table"]),
                        (["simulate", HW, CRITEO, plan], [plan, "unknown table"]),
                        (["run", HW, TINY, other_dev, "--device", "cpu"], [other_dev, "node0/gpu7"]),
                        (["check", other_dev, "--hardware", HW, "--workload", TINY], [other_dev, "node0/gpu7"]),
                        (["run", HW, TINY, TINY, "--device", "cpu"], ["tiny.yaml", "not a plan"]),
                        (["simulate", HW, TINY, HW], ["h100-pcie-host.yaml", "not a plan"])):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        _no_traceback(err)
        for w in words:
            assert w in err, (argv, err)


def test_load_plan_names_the_kind(tmp_path):
    with pytest.raises(SpecError, match="workload spec, not a plan"):
        load_plan(TINY)
