"""Measurement that separates plans on a noisy machine: the plans run in interleaved rounds, each plan's median
step comes with a bootstrap interval, and the comparisons (rank correlation with the predictions, the ILP against
the fastest plan, the ILP against each other plan) are made only where the measurements separate.

Units: every measured value is seconds (a step time); ratios are unitless; ``level`` is a probability (0.90: a
90% interval). One round runs every plan once, in an order shuffled per round (seeded), so that a machine's drift
or warm-up does not favour a position; a round is the unit the bootstrap resamples where plans are compared, as
the plans of one round ran under the same state of the machine.

What an interval means here: a percentile bootstrap of the median over the rounds. With 3 to 5 rounds the 90%
interval of a median is (nearly) the rounds' range, min..max: two plans separate when their ranges do not
overlap, and a paired verdict says "faster" when (nearly) every round's ratio is below 1. Few rounds make weak
verdicts: two equal plans give every one of n paired ratios on one side by chance with probability 2 / 2^n
(n = 2: 0.5, 3: 0.25, 5: 0.06), so each paired result carries its sign test's p-value (``sign_p``) and rounds.

    from validation.rounds import interleave, median_interval
    done = interleave(["a", "b", "c"], 5, lambda item, r: time_it(item), seed=0)
    median_interval(done.values["a"])        # Interval(median=..., lo=..., hi=..., n=5), seconds
"""
from __future__ import annotations

import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

import numpy as np

LEVEL = 0.90  # the intervals' confidence level
RESAMPLES = 2000  # bootstrap resamples per interval
SEED = 0  # the bootstrap's default seed (every statistic here is deterministic for a seed)
#: how spearman_separable chooses the plans it ranks (said in its result)
SEPARABLE_RULE = ("greedy by measured median, fastest first: a plan is kept when its interval separates from the "
                  "interval of every plan kept before it")


@dataclass
class Rounds:
    """What interleave measured. ``values[item]``: one entry per completed round, seconds, None where the item
    failed in that round or was not run again after a failure; ``results[item]``: what ``run`` returned, by
    round (None likewise); ``failures[item]``: (round index, reason) per failure; ``orders``: the order each
    completed round ran in; ``partial``: the values of a round the deadline cut (not in ``values``)."""
    items: list
    rounds_requested: int
    rounds_completed: int = 0
    values: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    failures: dict = field(default_factory=dict)
    orders: list = field(default_factory=list)
    partial: dict = field(default_factory=dict)
    round_s: list = field(default_factory=list)  # wall time of each completed round, s
    stopped: str | None = None  # why fewer rounds completed than were asked for (None: all of them)


def interleave(items: Sequence[Hashable], rounds: int, run: Callable[[Any, int], Any], *, seed: int,
               deadline: float | None = None, value: Callable[[Any], float] = float, retry_failed: bool = False,
               clock: Callable[[], float] = time.time, on_round: Callable[[int, list], None] | None = None) -> Rounds:
    """Run ``run(item, round_index)`` for every item in each of ``rounds`` rounds, the order within a round a
    permutation drawn per round from ``random.Random(seed)`` (drawn again when it equals the previous round's, so
    that consecutive rounds differ). ``value(result)`` is the measured seconds (default: the result itself).

    A run that raises (any Exception) is a failure of that item, recorded with its reason; the other items go on,
    and the failed item is not run again in later rounds unless ``retry_failed``. ``deadline`` (a ``clock()``
    time, s): no run starts after it, and a round starts only while the time left exceeds the longest round so
    far; a round the deadline cuts is dropped (its values kept in ``partial``), so that every kept round holds
    every item that ran. ``run`` itself is not interrupted: bound its time inside it (a subprocess timeout).
    ``on_round(round_index, order)`` is called after each completed round (to record it as it comes)."""
    items = list(items)
    if len(set(items)) != len(items):
        raise ValueError("interleave: items must be distinct")
    rng = random.Random(seed)
    done = Rounds(items=items, rounds_requested=rounds, values={i: [] for i in items},
                  results={i: [] for i in items}, failures={i: [] for i in items})
    dropped: set = set()
    previous: list | None = None
    for r in range(rounds):
        if deadline is not None:
            left = deadline - clock()
            if left <= 0 or (done.round_s and max(done.round_s) > left):
                done.stopped = (f"deadline: {left:.1f} s left before round {r + 1}, the longest round took "
                                f"{max(done.round_s, default=0.0):.1f} s")
                break
        order = items[:]
        rng.shuffle(order)
        while len(items) > 1 and order == previous:
            rng.shuffle(order)
        t0, got, res, cut = clock(), {}, {}, False
        for item in order:
            if item in dropped:
                continue
            if deadline is not None and clock() >= deadline:
                cut = True
                break
            try:
                out = run(item, r)
                got[item], res[item] = float(value(out)), out
            except Exception as exc:  # noqa: BLE001 -- a failing item must not stop the others
                done.failures[item].append((r, f"{type(exc).__name__}: {exc}"))
                if not retry_failed:
                    dropped.add(item)
        if cut:
            done.partial = got
            done.stopped = f"deadline: round {r + 1} cut after {len(got)} of {len(order)} runs (dropped)"
            break
        done.round_s.append(clock() - t0)
        for item in items:
            done.values[item].append(got.get(item))
            done.results[item].append(res.get(item))
        done.orders.append(order)
        done.rounds_completed += 1
        previous = order
        if on_round is not None:
            on_round(r, order)
    return done


@dataclass(frozen=True)
class Interval:
    """A median with its bootstrap interval, seconds (lo, hi None: fewer than 2 values, no interval); n values."""
    median: float | None
    lo: float | None
    hi: float | None
    n: int

    def as_dict(self) -> dict:
        return {"median": self.median, "lo": self.lo, "hi": self.hi, "n": self.n}


def _clean(xs) -> np.ndarray:
    """The finite values of ``xs`` (None and NaN left out), as floats."""
    arr = np.array([np.nan if x is None else float(x) for x in xs], dtype=float)
    return arr[np.isfinite(arr)]


def median_interval(xs, level: float = LEVEL, n: int = RESAMPLES, seed: int = SEED) -> Interval:
    """The median of ``xs`` (None and NaN left out) with the percentile bootstrap interval of the median at
    ``level`` (scipy.stats.bootstrap, ``n`` resamples, seeded): lo and hi None with fewer than 2 values."""
    from scipy.stats import bootstrap

    x = _clean(xs)
    if len(x) == 0:
        return Interval(None, None, None, 0)
    med = float(np.median(x))
    if len(x) < 2:
        return Interval(med, None, None, 1)
    ci = bootstrap((x,), np.median, n_resamples=n, confidence_level=level, method="percentile",
                   rng=np.random.default_rng(seed), vectorized=True).confidence_interval
    return Interval(med, float(ci.low), float(ci.high), len(x))


def separated(a: Interval, b: Interval) -> bool:
    """Whether the intervals of ``a`` and ``b`` do not overlap (False where either has no interval)."""
    if None in (a.lo, a.hi, b.lo, b.hi):
        return False
    return a.hi < b.lo or b.hi < a.lo


def paired(a_rounds, b_rounds, level: float = LEVEL, n: int = RESAMPLES, seed: int = SEED) -> dict:
    """``a`` against ``b`` on the rounds both completed (entries None or NaN skipped; the lists align by round):
    the per-round ratios a/b, their median with its bootstrap interval, the verdict: "faster" (a takes less
    time: the interval below 1), "slower" (above 1) or "not separable" (it holds 1, or fewer than 2 rounds), and
    ``sign_p``: the two-sided sign test's p-value of the ratios' sides of 1 (ties left out; None without a
    ratio off 1), how often equal plans would look this one-sided."""
    from scipy.stats import binomtest

    pairs = [(float(a), float(b)) for a, b in zip(a_rounds, b_rounds)
             if a is not None and b is not None and np.isfinite(a) and np.isfinite(b) and b > 0]
    iv = median_interval([a / b for a, b in pairs], level, n, seed)
    verdict = "not separable"
    if iv.hi is not None and iv.hi < 1.0:
        verdict = "faster"
    elif iv.lo is not None and iv.lo > 1.0:
        verdict = "slower"
    below = sum(a < b for a, b in pairs)
    off = below + sum(a > b for a, b in pairs)
    sign_p = float(binomtest(below, off, 0.5).pvalue) if off else None
    return {"ratio": iv.median, "lo": iv.lo, "hi": iv.hi, "rounds": iv.n, "verdict": verdict, "sign_p": sign_p}


def _spearman_rows(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Spearman's rho of ``x`` (P,) against each row of ``ys`` (B, P): Pearson's r of the average ranks; NaN
    where a row's ranks are all equal."""
    from scipy.stats import rankdata

    rx = rankdata(x)
    rx = rx - rx.mean()
    ry = rankdata(ys, axis=1)
    ry = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((ry ** 2).sum(axis=1) * (rx ** 2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, ry @ rx / np.where(den > 0, den, 1.0), np.nan)


def separable_plans(measured: dict, level: float = LEVEL, n: int = RESAMPLES, seed: int = SEED) -> list:
    """The plans SEPARABLE_RULE keeps from ``measured`` (name -> values by round, seconds), fastest first."""
    ivs = {k: median_interval(v, level, n, seed) for k, v in measured.items()}
    order = sorted((k for k in ivs if ivs[k].lo is not None), key=lambda k: (ivs[k].median, str(k)))
    kept: list = []
    for k in order:
        if all(separated(ivs[k], ivs[j]) for j in kept):
            kept.append(k)
    return kept


def spearman_separable(predicted: dict, measured: dict, level: float = LEVEL, n: int = RESAMPLES,
                       seed: int = SEED) -> dict:
    """Spearman's rho of ``predicted`` (name -> seconds) against the measured medians (``measured``: name ->
    values by round, seconds; the lists align by round) over the plans whose intervals separate
    (separable_plans: SEPARABLE_RULE), with a percentile bootstrap interval of rho from resampling whole rounds
    (the same rounds for every plan; a plan's median over the rounds drawn, None entries left out). The
    interval is conditional on the plans chosen. rho is None with fewer than 3 separable plans."""
    names = [k for k in measured if k in predicted]
    kept = separable_plans({k: measured[k] for k in names}, level, n, seed)
    out = {"rho": None, "lo": None, "hi": None, "plans": kept, "count": len(kept), "of": len(names),
           "rule": SEPARABLE_RULE}
    if len(kept) < 3:
        out["why"] = f"{len(kept)} separable plan(s): a rank correlation needs 3"
        return out
    rounds = max(len(measured[k]) for k in kept)
    m = np.full((len(kept), rounds), np.nan)
    for i, k in enumerate(kept):
        vals = [np.nan if v is None else float(v) for v in measured[k]]
        m[i, :len(vals)] = vals
    x = np.array([float(predicted[k]) for k in kept])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a plan absent from every round drawn: NaN, dropped
        rho = float(_spearman_rows(x, np.nanmedian(m, axis=1)[None, :])[0])
        idx = np.random.default_rng(seed).integers(0, rounds, size=(n, rounds))
        meds = np.nanmedian(m[:, idx], axis=2).T  # (n, plans)
    ok = np.all(np.isfinite(meds), axis=1)
    rhos = _spearman_rows(x, meds[ok]) if ok.any() else np.array([])
    rhos = rhos[np.isfinite(rhos)]
    out["rho"] = None if not np.isfinite(rho) else rho
    if len(rhos) >= n // 2:
        tail = (1 - level) / 2 * 100
        out["lo"], out["hi"] = (float(v) for v in np.percentile(rhos, [tail, 100 - tail]))
    return out


def ilp_vs_fastest(measured: dict, ilp, level: float = LEVEL, n: int = RESAMPLES, seed: int = SEED) -> dict | None:
    """The ILP's plan (``ilp``, a key of ``measured``: name -> values by round, seconds) against the fastest plan
    by measured median; where the ILP is itself the fastest, against the next fastest (the ratio then below 1).
    ``ratio``, ``lo``, ``hi``: the ILP's time over that plan's, the median of the per-round ratios with its
    interval (paired); ``median_ratio``: the ratio of the two medians; ``paired``: the ILP against every other
    plan (paired); ``separably_faster``: the plans whose paired verdict says the ILP is slower. None without the
    ILP or another plan measured."""
    meds = {k: median_interval(v, level, n, seed).median for k, v in measured.items()}
    meds = {k: v for k, v in meds.items() if v is not None}
    if ilp not in meds or len(meds) < 2:
        return None
    fastest = min(meds, key=lambda k: (meds[k], str(k)))
    versus = fastest if fastest != ilp else min((k for k in meds if k != ilp), key=lambda k: (meds[k], str(k)))
    verdicts = {k: paired(measured[ilp], measured[k], level, n, seed) for k in meds if k != ilp}
    p = verdicts[versus]
    slower = [k for k, v in verdicts.items() if v["verdict"] == "slower"]
    return {"ilp": ilp, "fastest": fastest, "versus": versus, "ilp_is_fastest": fastest == ilp,
            "ratio": p["ratio"], "lo": p["lo"], "hi": p["hi"], "rounds": p["rounds"], "verdict": p["verdict"],
            "sign_p": p["sign_p"],
            "median_ratio": meds[ilp] / meds[versus], "separably_faster": slower,
            "any_separably_faster": bool(slower), "paired": verdicts}
