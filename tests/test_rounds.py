"""validation/rounds.py on synthetic data (seeded, no timing): interleaved rounds, medians with bootstrap
intervals, separation, paired verdicts, Spearman over separable plans, the ILP against the fastest."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validation import rounds  # noqa: E402


def noisy(median: float, k: int, spread: float, seed: int) -> list[float]:
    """``k`` values around ``median`` within +-``spread`` (relative), seeded."""
    rng = np.random.default_rng(seed)
    return list(median * (1 + rng.uniform(-spread, spread, size=k)))


def test_every_round_covers_every_item_in_an_order_that_changes():
    calls = []
    done = rounds.interleave("abcd", 6, lambda item, r: calls.append((r, item)) or 1.0, seed=3)
    assert done.rounds_completed == 6 and done.stopped is None and len(calls) == 24
    assert all(sorted(order) == list("abcd") for order in done.orders)
    assert [item for _, item in calls] == [i for order in done.orders for i in order]  # ran in the recorded order
    assert all(a != b for a, b in zip(done.orders, done.orders[1:]))  # consecutive rounds differ
    assert len({tuple(o) for o in done.orders}) >= 3
    assert {o[0] for o in done.orders} != {done.orders[0][0]}  # the first position is not one item's
    assert done.values == {i: [1.0] * 6 for i in "abcd"}
    again = rounds.interleave("abcd", 6, lambda item, r: 1.0, seed=3)
    assert again.orders == done.orders  # seeded


def test_a_failing_item_is_recorded_and_does_not_stop_the_others():
    def run(item, r):
        if item == "b" and r == 1:
            raise RuntimeError("out of memory")
        return {"step": {"a": 1.0, "b": 2.0, "c": 3.0}[item] + r}

    done = rounds.interleave(["a", "b", "c"], 3, run, seed=0, value=lambda x: x["step"])
    assert done.rounds_completed == 3
    assert done.values["a"] == [1.0, 2.0, 3.0] and done.values["c"] == [3.0, 4.0, 5.0]
    assert done.values["b"] == [2.0, None, None]  # not run again after its failure
    assert done.failures["b"] == [(1, "RuntimeError: out of memory")] and not done.failures["a"]
    assert done.results["a"][2] == {"step": 3.0}
    retried = rounds.interleave(["a", "b", "c"], 3, run, seed=0, value=lambda x: x["step"], retry_failed=True)
    assert retried.values["b"] == [2.0, None, 4.0]


def test_the_deadline_keeps_complete_rounds_only():
    now = [0.0]

    def run(item, r):
        now[0] += 1.0  # every run takes one second of the fake clock
        return now[0]

    seen = []
    cut = rounds.interleave("abc", 5, run, seed=1, deadline=7.5, clock=lambda: now[0],
                            on_round=lambda r, order: seen.append((r, order)))
    # rounds 1-2 end at t=6; round 3 would need 3 s with 1.5 s left: not begun
    assert cut.rounds_completed == 2 and all(len(v) == 2 for v in cut.values.values())
    assert cut.stopped.startswith("deadline") and not cut.partial
    assert seen == list(enumerate(cut.orders))  # each complete round said as it completed
    now[0] = 0.0
    mid = rounds.interleave("abc", 5, run, seed=1, deadline=1.5, clock=lambda: now[0])
    # the first round has no estimate: it starts and the deadline cuts it after two runs; nothing kept
    assert mid.rounds_completed == 0 and all(v == [] for v in mid.values.values())
    assert len(mid.partial) == 2 and "cut after 2 of 3" in mid.stopped


def test_median_interval_holds_the_median_and_needs_two_values():
    iv = rounds.median_interval([1.0, 1.2, 0.9, 1.1, 1.05])
    assert iv.median == 1.05 and iv.lo <= iv.median <= iv.hi and iv.n == 5
    assert iv.lo >= 0.9 and iv.hi <= 1.2
    assert rounds.median_interval([2.0, None, float("nan")]) == rounds.Interval(2.0, None, None, 1)
    assert rounds.median_interval([]).median is None
    same = rounds.median_interval([3.0, 3.0, 3.0])
    assert same.lo == same.hi == 3.0
    assert rounds.median_interval([1.0, 1.2, 0.9, 1.1], seed=4) == rounds.median_interval([1.0, 1.2, 0.9, 1.1], seed=4)


def test_separated_means_the_intervals_do_not_overlap():
    a, b = rounds.Interval(1.0, 0.9, 1.1, 5), rounds.Interval(2.0, 1.8, 2.2, 5)
    c = rounds.Interval(1.15, 1.05, 1.3, 5)
    assert rounds.separated(a, b) and rounds.separated(b, a)
    assert not rounds.separated(a, c)
    assert not rounds.separated(a, rounds.Interval(5.0, None, None, 1))


def test_paired_rounds_separate_a_small_steady_difference_that_overlapping_intervals_hide():
    drift = [1.0, 1.3, 0.8, 1.2, 0.9]  # the machine's state per round moves both plans
    a, b = [d * 1.0 for d in drift], [d * 1.05 for d in drift]
    assert not rounds.separated(rounds.median_interval(a), rounds.median_interval(b))
    p = rounds.paired(a, b)
    assert p["verdict"] == "faster" and p["ratio"] == pytest.approx(1 / 1.05) and p["rounds"] == 5
    assert p["sign_p"] == pytest.approx(2 / 2 ** 5)  # all 5 on one side: what equal plans do 1 time in 16
    assert rounds.paired(b, a)["verdict"] == "slower"
    flip = rounds.paired([1.0, 1.1, 0.95, 1.05, 1.0], [1.05, 1.0, 1.0, 1.0, 0.98])
    assert flip["verdict"] == "not separable" and flip["lo"] < 1 < flip["hi"]
    skip = rounds.paired([1.0, None, 1.0], [2.0, 2.0, None])  # only round 0 is in both: too few
    assert skip["rounds"] == 1 and skip["verdict"] == "not separable" and skip["sign_p"] == 1.0
    assert rounds.paired([1.0, 2.0], [1.0, 2.0])["sign_p"] is None  # no ratio off 1


def test_a_clear_order_is_found_and_ranked():
    medians = {"p1": 1.0, "p2": 2.0, "p3": 4.0, "p4": 8.0}
    measured = {k: noisy(m, 5, 0.05, seed=i) for i, (k, m) in enumerate(medians.items())}
    predicted = {"p1": 0.5, "p2": 0.9, "p3": 3.0, "p4": 3.5}  # same order, other scale
    s = rounds.spearman_separable(predicted, measured)
    assert s["plans"] == ["p1", "p2", "p3", "p4"] and s["count"] == 4 and s["of"] == 4
    assert s["rho"] == pytest.approx(1.0) and s["lo"] == pytest.approx(1.0) and s["hi"] == pytest.approx(1.0)
    wrong = rounds.spearman_separable({"p1": 4, "p2": 3, "p3": 2, "p4": 1}, measured)
    assert wrong["rho"] == pytest.approx(-1.0)


def test_noise_that_overlaps_is_not_separable():
    measured = {k: noisy(1.0, 5, 0.2, seed=i) for i, k in enumerate(["a", "b", "c", "d"])}
    s = rounds.spearman_separable({"a": 1, "b": 2, "c": 3, "d": 4}, measured)
    assert s["count"] < 3 and s["rho"] is None and "needs 3" in s["why"]
    v = rounds.ilp_vs_fastest(measured, "a")
    assert not v["any_separably_faster"] and all(p["verdict"] == "not separable" for p in v["paired"].values())


def test_the_separable_set_collapses_overlapping_plans():
    measured = {"fast": noisy(1.0, 5, 0.03, 0), "fast-twin": noisy(1.01, 5, 0.03, 1), "mid": noisy(2.0, 5, 0.03, 2),
                "slow": noisy(4.0, 5, 0.03, 3)}
    kept = rounds.separable_plans(measured)
    assert len(kept) == 3 and kept[1:] == ["mid", "slow"] and kept[0] in ("fast", "fast-twin")
    s = rounds.spearman_separable({"fast": 1, "fast-twin": 9, "mid": 2, "slow": 3}, measured)
    assert s["of"] == 4 and s["count"] == 3 and "greedy" in s["rule"]


def test_spearman_interval_comes_from_resampled_rounds():
    rng = np.random.default_rng(7)
    drift = rng.uniform(0.9, 1.1, size=5)
    measured = {"a": list(1.0 * drift), "b": list(1.5 * drift), "c": list(2.3 * drift)}
    measured["c"][2] = 1.2  # one disturbed round puts c below b's range: not separable from b
    measured["d"] = list(5.0 * drift)
    s = rounds.spearman_separable({"a": 1, "b": 2, "c": 3, "d": 4}, measured)
    assert s["count"] >= 3 and s["lo"] <= s["rho"] <= s["hi"]
    again = rounds.spearman_separable({"a": 1, "b": 2, "c": 3, "d": 4}, measured)
    assert again == s  # seeded


def test_ilp_against_the_fastest_plan_paired():
    drift = [1.0, 1.2, 0.9, 1.1, 1.0]
    measured = {"ilp": [d * 1.10 for d in drift], "greedy": [d * 1.0 for d in drift], "host": [d * 3 for d in drift]}
    v = rounds.ilp_vs_fastest(measured, "ilp")
    assert v["fastest"] == "greedy" and v["versus"] == "greedy" and not v["ilp_is_fastest"]
    assert v["ratio"] == pytest.approx(1.10) and v["lo"] > 1 and v["verdict"] == "slower"
    assert v["separably_faster"] == ["greedy"] and v["any_separably_faster"]
    assert v["paired"]["host"]["verdict"] == "faster"
    best = rounds.ilp_vs_fastest({"ilp": drift, "greedy": [d * 1.2 for d in drift]}, "ilp")
    assert best["ilp_is_fastest"] and best["versus"] == "greedy" and best["ratio"] < 1
    assert not best["any_separably_faster"]
    assert rounds.ilp_vs_fastest({"greedy": drift}, "ilp") is None
