"""The GPU campaign's plans in interleaved rounds (validation/rounds.py), within the plans stage's deadline.

A stage of 165 s cannot run every plan three times (the H100's first campaign ran 37 plans once in 179 s, most
of it building host-memory plans), so the plans run in two tiers, each in interleaved rounds:

1. "first": the FIRST plans of every workload (the ILP on the calibrated spec, the ILP, greedy_size), in
   GPU_ROUNDS rounds (a dry run: DRY_ROUNDS), every run timing ROUND_WINDOW of the workload's seconds (the rounds
   together time as many steps as the former single run);
2. "rest": every other plan, with each workload's ILP again (the one the report compares: its first FIRST
   plan), so that every plan shares rounds with the ILP for the paired verdicts; as many rounds as the deadline
   leaves.

Rounds are numbered across the tiers (tier 2's first round follows tier 1's last). Every run appends a line to
plans.jsonl (its row and round), every completed round a line to rounds.jsonl, as they come (a stage killed at
its limit keeps them). The report (merge_rounds) makes one row per plan: the median and its 90% interval over
the complete rounds and every complete round's step (None where the plan did not run in it); a plan measured
only in a round the deadline cut keeps that value as its median, without an interval (``partial_step_time_s``).
Units: seconds.
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

from validation.rounds import interleave, median_interval

GPU_ROUNDS = 3  # rounds of each tier on a GPU
DRY_ROUNDS = 2  # rounds of each tier in a dry run (the CPU, CI)
ROUND_WINDOW = 1 / GPU_ROUNDS  # each run times this fraction of the workload's seconds of timed steps
RESERVE_S = 5.0  # no run starts within this many seconds of the stage's deadline


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def tiers(todo: list, first: tuple) -> list[tuple[str, list]]:
    """(tier name, items) in the order they run, from ``todo`` ((workload, plan name, plan file) triples):
    "first", the plans named in ``first``; "rest", the others and each workload's first plan of "first" again
    (its ILP, the anchor of the paired verdicts). A tier with nothing of its own is left out."""
    top = [t for t in todo if t[1] in first]
    rest = [t for t in todo if t[1] not in first]
    anchors = {}
    for t in top:
        anchors.setdefault(t[0]["name"], t)
    rest_tier = rest + [a for a in anchors.values() if any(t[0]["name"] == a[0]["name"] for t in rest)]
    return [(name, items) for name, items, own in (("first", top, top), ("rest", rest_tier, rest)) if own]


def run_tiers(todo: list, first: tuple, rounds: int, measure: Callable, deadline: float,
              write: Callable[[str, dict], None]) -> dict:
    """Run ``todo``'s plans in tiers() of interleaved rounds; ``measure(w, name, plan_path)`` returns a plan's
    row (raises where it fails); ``write(file, record)`` appends a line to plans.jsonl or rounds.jsonl; no run
    starts after ``deadline`` - RESERVE_S (a time.time() value). The stage's result: runs done and failed, plans
    never run, each tier's rounds."""
    keys = {(w["name"], name): (w, name, path) for w, name, path in todo}
    write("rounds.jsonl", {"order": [list(k) for k in keys]})
    base, result, touched = 0, {"ran": 0, "failed": 0, "tiers": {}}, set()
    for t, (tier, items) in enumerate(tiers(todo, first)):
        def run(key, r, tier=tier, base=base):
            touched.add(key)
            _log(f"{key[0]}: {key[1]} (tier {tier}, round {r + 1} of {rounds})")
            try:
                row = measure(*keys[key])
            except Exception as exc:
                _log(f"    failed: {type(exc).__name__}: {exc}")
                result["failed"] += 1
                write("plans.jsonl", {"name": key[1], "workload": key[0], "round": base + r, "tier": tier,
                                      "error": f"{type(exc).__name__}: {exc}"})
                raise
            result["ran"] += 1
            write("plans.jsonl", dict(row, round=base + r, tier=tier))
            return row

        def on_round(r, order, tier=tier, base=base):
            write("rounds.jsonl", {"tier": tier, "round": base + r, "order": [list(k) for k in order]})

        done = interleave([(w["name"], name) for w, name, _ in items], rounds, run, seed=t,
                          deadline=deadline - RESERVE_S, value=lambda row: row["measured_step_time_s"],
                          on_round=on_round)
        record = {"tier": tier, "plans": len(items), "rounds_requested": rounds,
                  "rounds_completed": done.rounds_completed, "first_round": base, "round_s": done.round_s,
                  "stopped": done.stopped, "partial_runs": len(done.partial)}
        write("rounds.jsonl", record)
        _log(f"tier {tier}: {done.rounds_completed} of {rounds} rounds" + (f": {done.stopped}" if done.stopped else ""))
        result["tiers"][tier] = {k: record[k] for k in ("plans", "rounds_completed", "stopped")}
        base += done.rounds_completed + (0 if done.rounds_completed == rounds else 1)  # a cut round's number
    result["never_ran"] = len(set(keys) - touched)
    return result


def merge_rounds(lines: list[dict], records: list[dict]) -> list[dict]:
    """One row per plan from plans.jsonl's ``lines`` and rounds.jsonl's ``records`` (module doc), in the order
    the stage listed the plans; a plan with no successful run: an error row (its failures, or skipped)."""
    order = [tuple(k) for r in records if "order" in r and "tier" not in r for k in r["order"]]
    complete = sorted({r["round"] for r in records if "round" in r})
    by_plan: dict = {}
    for line in lines:
        by_plan.setdefault((line["workload"], line["name"]), []).append(line)
    keys = list(dict.fromkeys(order + list(by_plan)))
    rows = []
    for key in keys:
        mine = by_plan.get(key, [])
        ok = [x for x in mine if "error" not in x]
        fails = [f"round {x['round'] + 1}: {x['error']}" for x in mine if "error" in x]
        if not ok:
            why = "; ".join(fails) or "skipped: the stage's time ran out"
            rows.append({"name": key[1], "workload": key[0], "error": why})
            continue
        rows.append(merged_row(ok, fails, complete))
    return rows


def merged_row(runs: list[dict], failures: list[str], complete: list[int]) -> dict:
    """A plan's row from its runs' rows (each with its ``round``): step and embedding phases by complete round,
    the median with its 90% interval, phases and op kinds as medians over the runs, the rest from the first."""
    at = {x["round"]: x for x in runs}
    steps = [at[g]["measured_step_time_s"] if g in at else None for g in complete]
    emb = [at[g]["measured_embedding_s"] if g in at else None for g in complete]
    partial = [x["measured_step_time_s"] for x in runs if x["round"] not in complete]
    part_emb = [x["measured_embedding_s"] for x in runs if x["round"] not in complete]
    use_rounds = any(v is not None for v in steps)
    iv = median_interval(steps if use_rounds else partial)
    iv_emb = median_interval(emb if use_rounds else part_emb)
    med = statistics.median
    base = {k: v for k, v in runs[0].items() if k not in ("round", "tier")}
    phases = {ph: {"measured_s": med([x["phases"][ph]["measured_s"] for x in runs]), "predicted_s": v["predicted_s"]}
              for ph, v in base["phases"].items()}
    ops = [dict(op, measured_s=med([next((o["measured_s"] for o in x["ops"] if (o["kind"], o["stream"]) ==
                                          (op["kind"], op["stream"])), 0.0) for x in runs])) for op in base["ops"]]
    row = dict(base, measured_step_time_s=iv.median, measured_interval_s=[iv.lo, iv.hi],
               ratio=iv.median / base["predicted_step_time_s"], rounds_step_time_s=steps,
               runs_step_time_s=[x["measured_step_time_s"] for x in runs], phases=phases, ops=ops,
               measured_embedding_s=iv_emb.median, measured_embedding_interval_s=[iv_emb.lo, iv_emb.hi],
               rounds_embedding_s=emb, rounds=[x["round"] for x in runs],
               embedding_share_measured=iv_emb.median / max(sum(v["measured_s"] for v in phases.values()), 1e-12))
    if partial:
        row["partial_step_time_s"] = partial
    return dict(row, failures=failures) if failures else row
