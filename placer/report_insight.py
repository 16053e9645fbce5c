"""What dominates a plan's step, in plain words: the longest phase and its share of the step, the op kinds that
fill the busiest resource of that phase, and, when the dense model decides the step, what the same plan would
take with the dense model at another dtype (re-priced by the cost model, never guessed).

``step_insights`` returns sentences for the plan summary (report.plan_summary) and a dict for --json callers.
Times are seconds unless a name says ms.
"""
from __future__ import annotations

from collections import defaultdict

from placer.cost import PHASES, CostModel
from placer.plan import Plan
from placer.program.ops import EVERY_GPU
from placer.specs.workload import Workload
from placer.topology import Topology

#: the dense dtype decides the step when the dense phase is the step's longest and at least this share of it
DENSE_DECIDES_SHARE = 0.3
#: the dtype a plan is re-priced at when its dense part is slower (fp32, tf32, fp16 all compared against it)
ALTERNATIVE_DENSE_DTYPE = "bf16"
PHASE_WORDS = {"embedding_forward": "embedding forward", "forward_exchange": "forward exchange",
               "dense": "dense", "backward_exchange": "backward exchange",
               "embedding_backward": "embedding backward", "gradient_allreduce": "gradient all-reduce"}


#: the re-priced step must be at least this much shorter for the summary to say the dtype decides the step
DECIDES_SPEEDUP = 1.1


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e3:.3f} ms"


def op_kinds_on(model: CostModel, plan: Plan, phase: int, resource: str) -> dict[str, float]:
    """Seconds per op kind that ``resource`` (a stream or a shared resource) carries in ``phase`` for ``plan``:
    the dense model's ops and every placement's (none in the dense phase: placements are not built for it), a
    fused group's fixed cost once."""
    out: dict[str, float] = defaultdict(float)
    seen_once: set = set()
    ops = list(model.base_ops)
    if PHASES[phase] != "dense":
        for p in plan.placements:
            ops += model.placement_ops(p)
    streams = set(model.builder.gpu_streams)
    for op in ops:
        if op.phase != phase:
            continue
        if op.stream == resource or (op.stream == EVERY_GPU and resource in streams):
            if op.once:
                if op.once_key in seen_once:
                    continue
                seen_once.add(op.once_key)
            out[op.kind] += op.seconds
        for res, load in op.traffic:
            if res == resource:
                out[op.kind] += load
    return dict(out)


def with_dense_dtype(wl: Workload, dtype: str) -> Workload:
    """``wl`` with its dense model at ``dtype`` (tables unchanged)."""
    return wl.model_copy(update={"dense": wl.dense.model_copy(update={"dtype": dtype})})


def repriced_dense(plan: Plan, topo: Topology, wl: Workload, dtype: str) -> float | None:
    """The step time (s) of the same placements with the dense model at ``dtype``: Topology and workload rebuilt
    at that dtype and the plan priced by simulate.predict. None where it cannot be priced (a spec without that
    peak rate, say)."""
    from placer.errors import PlacerError
    from placer.simulate import predict

    try:
        wl2 = with_dense_dtype(wl, dtype)
        return predict(CostModel(Topology(topo.spec, dtype), wl2), plan, check_memory=False)["step_time_s"]
    except (PlacerError, KeyError, ValueError):
        return None


def _dense_kind(model: CostModel, plan: Plan) -> str:
    """The op kind that fills the dense phase on the first GPU's stream ('elementwise ops')."""
    stream = model.builder.gpu_streams[0] if model.builder.gpu_streams else None
    kinds = op_kinds_on(model, plan, PHASES.index("dense"), stream) if stream else {}
    return f"{max(kinds, key=kinds.get)} ops" if kinds else "its fixed costs"


def step_insights(plan: Plan, topo: Topology, wl: Workload, reprice: bool = True) -> dict:
    """The facts behind the summary's 'dominated by' lines: {'phase', 'phase_s', 'step_s', 'share', 'resource',
    'op_kinds' (kind -> s on that resource, largest first), 'dense_dtype', 'dense_share', 'alternative'
    ({'dtype', 'step_s'} or None), 'lines' (the sentences)}. ``reprice=False``: the plan is not re-priced at
    another dense dtype (no time left under the command's limit); the line says how to get it."""
    pred = plan.predicted or {}
    phases = pred.get("phases_s", {})
    step = float(pred.get("step_time_s") or 0.0)
    out: dict = {"lines": [], "dense_dtype": wl.dense.dtype, "alternative": None}
    if not phases or step <= 0:
        return out
    name = max(phases, key=lambda k: phases[k])
    resource = pred.get("phase_bottlenecks", {}).get(name)
    model = CostModel(topo, wl)
    kinds = op_kinds_on(model, plan, PHASES.index(name), resource) if resource else {}
    kinds = dict(sorted(kinds.items(), key=lambda kv: -kv[1]))
    share = phases[name] / step
    out.update(phase=name, phase_s=phases[name], step_s=step, share=share, resource=resource, op_kinds=kinds)
    line = f"dominated by: {PHASE_WORDS.get(name, name)} {share:.0%} of the step ({_ms(phases[name])} of {_ms(step)})"
    busy = sum(kinds.values())
    if kinds and busy > 0:
        top = [f"{k} {v / busy:.0%}" for k, v in list(kinds.items())[:3] if v / busy >= 0.05]
        line += f"; on {resource}: " + ", ".join(top)
    out["lines"].append(line)
    dense_s = phases.get("dense", 0.0)
    out["dense_share"] = dense_s / step
    dtype = wl.dense.dtype
    if dtype == ALTERNATIVE_DENSE_DTYPE or name != "dense" or dense_s / step < DENSE_DECIDES_SHARE:
        return out
    if not reprice:
        out["lines"].append(f"dense {dtype}: {dense_s / step:.0%} of the step; not re-priced at "
                            f"{ALTERNATIVE_DENSE_DTYPE} (the time limit is spent): placer simulate gives it")
    else:
        alt = repriced_dense(plan, topo, wl, ALTERNATIVE_DENSE_DTYPE)
        if alt is not None:
            decides = step / alt >= DECIDES_SPEEDUP
            out["alternative"] = {"dtype": ALTERNATIVE_DENSE_DTYPE, "step_s": alt, "decides": decides}
            head = f"dense {dtype}: {dense_s / step:.0%} of the step ({_ms(dense_s)} of {_ms(step)}); "
            alt_dtype = ALTERNATIVE_DENSE_DTYPE
            if decides:
                out["lines"].append(head + f"the dense dtype decides the step: {alt_dtype} would make this plan "
                                    f"{_ms(alt)} ({step / alt:.1f}x faster; the same placements re-priced with "
                                    f"dense.dtype: {alt_dtype} in the workload)")
            else:
                out["lines"].append(head + f"{alt_dtype} would change it little ({_ms(alt)}, the same placements "
                                    f"re-priced): the dense part is bound by {_dense_kind(model, plan)}, not its "
                                    "dtype")
    return out
