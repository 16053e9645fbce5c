"""Skew what-if: the same workload with every table's access skew made flatter or steeper.

``workload_with_skew(wl, scale)`` returns a copy whose access specs are changed, so that ``predict`` (and any
other user of ``Workload.access_models``) prices a plan under the changed skew without knowing about it.

The rule, per access model (``scale`` > 0; 1 is the workload as written):

* zipf(alpha) -> zipf(alpha * scale), clamped to the alphas a spec accepts.
* uniform stays uniform: it has no skew to scale.
* cdf and histogram (and cdf files): the coverage curve c(x) (share of lookups on the hottest x of rows) is
  sampled at 257 row fractions (log-spaced from 1e-7 plus the ends) and replaced by a cdf through
    scale < 1:  c'(x) = scale * c(x) + (1 - scale) * x       (a blend toward uniform; scale 0 is uniform)
    scale > 1:  c'(x) = c(x) ** (1 / scale)                  (steeper: every hot share grows, c' >= c)
  Both keep c'(0) = 0, c'(1) = 1 and monotonicity. Between the sampled points the curve is linear, as
  every cdf spec is.
"""
from __future__ import annotations

import math

import numpy as np

from placer.errors import SpecError
from placer.executor import Background
from placer.specs import limits as L
from placer.specs.workload import CdfSpec, UniformSpec, Workload, ZipfSpec

#: Row fractions at which a cdf/histogram curve is resampled (hottest first; 0 and 1 included).
GRID = np.unique(np.concatenate([[0.0], np.geomspace(1e-7, 1.0, 256), [1.0]]))


def _check_scale(scale) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise SpecError(f"the skew scale must be a finite number > 0, got {scale!r}", field="--skew")
    return float(scale)


def scaled_coverage(coverage: np.ndarray, x: np.ndarray, scale: float) -> np.ndarray:
    """The module docstring's rule applied to coverage values ``coverage`` at row fractions ``x``."""
    c = np.clip(np.asarray(coverage, dtype=np.float64), 0.0, 1.0)
    if scale < 1:
        out = scale * c + (1 - scale) * np.asarray(x, dtype=np.float64)
    elif scale > 1:
        out = c ** (1.0 / scale)
    else:
        out = c
    return np.maximum.accumulate(np.clip(out, 0.0, 1.0))


def workload_with_skew(wl: Workload, scale: float) -> Workload:
    """``wl`` with every table's skew scaled by ``scale`` (module docstring). scale 1 returns ``wl`` itself.
    The copy keeps the name, source path and sha256, so plans made for ``wl`` check against it."""
    scale = _check_scale(scale)
    if scale == 1.0:
        return wl
    models = wl.access_models
    tables = []
    for t in wl.tables:
        spec = t.access
        if isinstance(spec, UniformSpec):
            new = spec
        elif isinstance(spec, ZipfSpec):
            alpha = min(max(spec.alpha * scale, L.MIN_ZIPF_ALPHA), L.MAX_ZIPF_ALPHA)
            new = ZipfSpec(alpha=alpha)
        else:  # cdf points, cdf file, histogram: resample the curve the model builds
            y = scaled_coverage(models[t.name].coverage(GRID), GRID, scale)
            y[0], y[-1] = 0.0, 1.0
            new = CdfSpec(points=[(float(a), float(b)) for a, b in zip(GRID, y)])
        tables.append(t if new is spec else t.model_copy(update={"access": new}))
    return wl.model_copy(update={"tables": tables})  # (Workload.model_copy: the copy builds its own access models)


#: Skew scales the robustness block of a solved plan reports besides the base.
ROBUSTNESS_SCALES = (0.8, 1.2)
#: Tables x GPUs from which the what-ifs run in two processes (production-856 on 128 GPUs: 1.3 s each).
FORK_WHAT_IF_AT = 20_000


def robustness(model, plan, base_s: float | None = None) -> dict:
    """Step time of ``plan`` at skew x0.8, x1 and x1.2 (seconds), from the cost model ``model`` (CostModel of
    the plan's topology and workload): how much the plan bets on the skew assumption. ``base_s``: the step at
    x1 where the caller has just priced it with ``model`` (else priced here)."""
    from placer.cost import CostModel
    from placer.simulate import predict

    base = base_s if base_s is not None else predict(model, plan, check_memory=False)["step_time_s"]
    out = {"rule": "zipf alpha x scale; cdf/histogram curves blended toward uniform (<1) or raised to "
                   "1/scale (>1); uniform unchanged (placer/skew.py)",
           "step_time_s": {"1": base}}

    def at(scale: float) -> float:
        wl = workload_with_skew(model.wl, scale)
        return predict(CostModel(model.topo, wl), plan, check_memory=False)["step_time_s"]

    first, *rest = ROBUSTNESS_SCALES
    # a large plan's what-ifs take a second or more each: the first in a forked child beside the others
    beside = Background(lambda: at(first)) if len(plan.placements) * len(model.topo.gpus) >= FORK_WHAT_IF_AT else None
    steps = {s: at(s) for s in rest}
    steps[first] = beside.result() if beside is not None else at(first)
    for s in ROBUSTNESS_SCALES:
        out["step_time_s"][f"{s:g}"] = steps[s]
    return out


def robustness_line(block: dict) -> str:
    """One line: 'skew x0.8: 10.6 ms (+1.2%), x1.2: 10.4 ms (-0.8%)'."""
    times = block.get("step_time_s", {})
    base = times.get("1")
    parts = []
    for key in sorted((k for k in times if k != "1"), key=float):
        v = times[key]
        rel = f" ({(v / base - 1) * 100:+.1f}%)" if base else ""
        parts.append(f"x{key}: {v * 1e3:.3f} ms{rel}")
    return f"skew what-if (step at x1: {base * 1e3:.3f} ms): " + ", ".join(parts) if base is not None else ""
