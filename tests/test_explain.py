"""`placer explain` (per table: place, what binds it, next-best option) and `--all` / `--tables` of
`placer solve` and `placer simulate`."""
from __future__ import annotations

import json

import pytest

from placer.cli import main


@pytest.fixture
def tiny_plan(tmp_path, two_gpu_path, three_tables_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["solve", str(two_gpu_path), str(three_tables_path), "--method", "greedy_size", "-q",
                 "-o", str(out), "--json"]) == 0
    capsys.readouterr()
    return out


def _explain_json(capsys, *argv) -> dict:
    assert main(["explain", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_explain_names_each_tables_location(two_gpu_path, three_tables_path, tiny_plan, capsys):
    from placer.plan import load_plan

    plan = load_plan(tiny_plan)
    res = _explain_json(capsys, two_gpu_path, three_tables_path, tiny_plan, "--all")
    assert {e["table"] for e in res["tables"]} == {"a", "b", "c"}
    for e in res["tables"]:
        p = plan.placement_of(e["table"])
        assert e["placement"] == p.label()
        assert e["devices"] == sorted({s.device for s in p.shards})
        assert e["memory"] and all(m["table_bytes"] > 0 for m in e["memory"])
        assert e["table"] in e["sentence"] and p.label() in e["sentence"]
    assert main(["explain", str(two_gpu_path), str(three_tables_path), str(tiny_plan)]) == 0
    out = capsys.readouterr().out
    for name in ("a", "b", "c"):
        assert f"- {name} is " in out
    assert "next-best option" in out


def test_next_best_step_equals_predict_of_the_swapped_plan(two_gpu_path, three_tables_path, tiny_plan, capsys):
    from placer.cost import CostModel
    from placer.plan import Placement, load_plan
    from placer.simulate import predict
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(three_tables_path)
    model = CostModel(Topology(load_hardware(two_gpu_path), wl.dense.dtype), wl)
    plan = load_plan(tiny_plan)
    res = _explain_json(capsys, two_gpu_path, three_tables_path, tiny_plan, "a", "b", "c")
    assert res["step_time_s"] == pytest.approx(predict(model, plan)["step_time_s"], rel=1e-12)
    for e in res["tables"]:
        nb = e["next_best"]
        assert nb is not None
        swapped = plan.model_copy(update={"placements": [
            Placement.model_validate(nb["placement"]) if p.table == e["table"] else p for p in plan.placements]})
        pred = predict(model, swapped)  # fits memory, or predict raises
        assert nb["step_time_s"] == pytest.approx(pred["step_time_s"], rel=1e-9)
        assert nb["delta_s"] == pytest.approx(pred["step_time_s"] - res["step_time_s"], rel=1e-6, abs=1e-12)


def test_every_other_option_infeasible_is_said(two_gpu_path, three_tables_path, tiny_plan, capsys):
    """With every memory shrunk to what the plan uses, no other option fits."""
    from placer.cost import CostModel
    from placer.explain import explain_plan
    from placer.plan import load_plan
    from placer.simulate import total_cost
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    wl = load_workload(three_tables_path)
    model = CostModel(Topology(load_hardware(two_gpu_path), wl.dense.dtype), wl)
    plan = load_plan(tiny_plan)
    placed = total_cost(model, plan).memory
    base = model.base_cost.memory
    model.__dict__["usable_memory"] = {m: placed.get(m, 0.0) - base.get(m, 0.0) for m in model.usable_memory}
    res = explain_plan(model, plan, [p.table for p in plan.placements])
    big = max(res["tables"], key=lambda e: e["size_bytes"])
    assert big["next_best"] is None and big["options_infeasible"] == big["options_priced"] > 0
    assert "Every other option is infeasible: memory" in big["sentence"]


def test_unknown_table_is_exit_2_listing_known(two_gpu_path, three_tables_path, tiny_plan, capsys):
    assert main(["explain", str(two_gpu_path), str(three_tables_path), str(tiny_plan), "a", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and "known: a, b, c" in err and str(tiny_plan) in err


def test_bad_plan_is_exit_2_naming_the_file(tmp_path, two_gpu_path, three_tables_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"placements\": 3}")
    assert main(["explain", str(two_gpu_path), str(three_tables_path), str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_top_n(two_gpu_path, three_tables_path, tiny_plan, capsys):
    res = _explain_json(capsys, two_gpu_path, three_tables_path, tiny_plan, "--top", "2")
    assert len(res["tables"]) == 2


def _table_rows(out: str) -> list[str]:
    """Names in the first column of the tables listing (rows after the 'largest'/'every'/'matching' title)."""
    lines = out.splitlines()
    heads = ("largest tables", "every table", "tables matching")
    start = next(i for i, line in enumerate(lines) if line.startswith(heads))
    return [line.split("│")[1].strip() for line in lines[start:] if line.startswith("│")]


def test_simulate_all_lists_every_table_and_device(two_gpu_path, three_tables_path, tiny_plan, capsys):
    assert main(["simulate", str(two_gpu_path), str(three_tables_path), str(tiny_plan), "--all"]) == 0
    out = capsys.readouterr().out
    assert sorted(_table_rows(out)) == ["a", "b", "c"]
    for device in ("node0/gpu0", "node0/gpu1", "node0/host"):
        assert device in out


def test_simulate_tables_host_filters(tmp_path, two_gpu_path, three_tables_path, capsys):
    out_plan = tmp_path / "host.json"
    assert main(["solve", str(two_gpu_path), str(three_tables_path), "--method", "host_cpu", "-q",
                 "-o", str(out_plan), "--json"]) == 0
    capsys.readouterr()
    assert main(["simulate", str(two_gpu_path), str(three_tables_path), str(out_plan), "--tables", "host"]) == 0
    assert sorted(_table_rows(capsys.readouterr().out)) == ["a", "b", "c"]
    assert main(["simulate", str(two_gpu_path), str(three_tables_path), str(out_plan), "--tables", "hbm"]) == 0
    assert _table_rows(capsys.readouterr().out) == []
    assert main(["simulate", str(two_gpu_path), str(three_tables_path), str(out_plan), "--tables", "[ab]"]) == 0
    assert sorted(_table_rows(capsys.readouterr().out)) == ["a", "b"]


def test_table_matches_kinds():
    from placer.plan import Placement, Shard
    from placer.report import table_matches

    def tw(hbm, prec="fp32"):
        return Placement(table="t1", sharding="table_wise", precision=prec,
                         shards=[Shard(device="g", rows=(0, 10), cols=(0, 4), hbm_rows=hbm, host_rows=10 - hbm)])
    assert table_matches(tw(10), "hbm") and not table_matches(tw(10), "uvm")
    assert table_matches(tw(0), "uvm") and table_matches(tw(5), "split") and not table_matches(tw(5), "host")
    assert table_matches(tw(10, "fp16"), "fp16") and table_matches(tw(10), "t*") and not table_matches(tw(10), "x*")
    assert table_matches(tw(10), None) and table_matches(tw(0), "host,uvm")
