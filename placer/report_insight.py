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
from placer.program.ops import DENSE, EVERY_GPU, HOST_ISSUE
from placer.specs.workload import Workload
from placer.topology import Topology

#: the dense dtype decides the step when the dense phase is the step's longest and at least this share of it
DENSE_DECIDES_SHARE = 0.3
#: the dtype a plan is re-priced at when its dense part is slower (fp32, tf32, fp16 all compared against it)
ALTERNATIVE_DENSE_DTYPE = "bf16"
PHASE_WORDS = {"embedding_forward": "embedding forward", "forward_exchange": "forward exchange",
               "dense": "dense", "backward_exchange": "backward exchange",
               "embedding_backward": "embedding backward", "gradient_allreduce": "gradient all-reduce"}


#: op kinds in plain words, where the kind's own name is not (program/ops.py KINDS)
KIND_WORDS = {HOST_ISSUE: "the host issuing ops"}

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


def repriced(plan: Plan, topo: Topology, wl: Workload, dtype: str) -> tuple[float, CostModel] | None:
    """(step time in s, the cost model) of the same placements with the dense model at ``dtype``: Topology and
    workload rebuilt at that dtype and the plan priced by simulate.predict. None where it cannot be priced (a spec
    without that peak rate, say)."""
    from placer.errors import PlacerError
    from placer.simulate import predict

    try:
        model = CostModel(Topology(topo.spec, dtype), with_dense_dtype(wl, dtype))
        return predict(model, plan, check_memory=False)["step_time_s"], model
    except (PlacerError, KeyError, ValueError):
        return None


def dense_bound(model: CostModel) -> dict | None:
    """What bounds the dense part of ``model``'s step on its first GPU: {'issue_s' (the host issuing its ops),
    'work_s' (the device's work: FLOPs and bytes), 'ops' (traced ops, views included), 'casts' (dtype casts among
    them: autocast's), 'host_bound' (issue_s > work_s: the device waits for the host)}, from the dense phase's
    host_issue op (program/build.py _dense_ops). None where the dense step runs on a CPU (no such op)."""
    streams = model.builder.gpu_streams
    if not streams:
        return None
    for op in model.base_ops:
        if op.phase == DENSE and op.kind == HOST_ISSUE and op.stream in (streams[0], EVERY_GPU):
            z = op.sizes
            return {"issue_s": z["issue_s"], "work_s": z["work_s"], "ops": z["ops"], "casts": z["casts"],
                    "host_bound": z["issue_s"] > z["work_s"]}
    return None


def _dense_kind(model: CostModel, plan: Plan) -> str:
    """The op kind of the most device time in the dense phase on the first GPU's stream ('gemm ops')."""
    stream = model.builder.gpu_streams[0] if model.builder.gpu_streams else None
    kinds = op_kinds_on(model, plan, DENSE, stream) if stream else {}
    kinds.pop(HOST_ISSUE, None)
    return f"{max(kinds, key=kinds.get)} ops" if kinds else "its fixed costs"


def _issued(dtype: str, b: dict) -> str:
    """'fp32: 228 ops issued in 0.688 ms against 0.546 ms of device work' (``b``: dense_bound's)."""
    casts = f" ({b['casts']} casts among them)" if b["casts"] else ""
    return f"{dtype}: {b['ops']} ops{casts} issued in {_ms(b['issue_s'])} against {_ms(b['work_s'])} of device work"


def why_dtype_changes_little(dtype: str, own: dict | None, alt_dtype: str, alt: dict | None, kind: str) -> str:
    """Why the dense part at ``alt_dtype`` is not much faster than at ``dtype`` (``own`` / ``alt``: dense_bound of
    each; ``kind``: dense phase's largest kind of device work, for a dense step on a CPU)."""
    if own is None or alt is None:
        return f"the dense part's largest cost is {kind}, which {alt_dtype} does not make faster on this spec"
    both = f"{_issued(dtype, own)}; {_issued(alt_dtype, alt)}"
    if alt["host_bound"] and own["host_bound"]:
        more = alt["ops"] - own["ops"]
        extra = f"; autocast's casts add {more} ops to issue" if more > 0 else ""
        return f"the dense part is bound by the host issuing its ops, which the dtype does not shorten ({both}{extra})"
    if alt["host_bound"]:
        return (f"{alt_dtype} shortens the dense part's device work, but then the host issuing its ops bounds it "
                f"({both})")
    return f"the dense part's device work changes little with the dtype ({both}; mostly {kind})"


def step_insights(plan: Plan, topo: Topology, wl: Workload, reprice: bool = True) -> dict:
    """The facts behind the summary's 'dominated by' lines: {'phase', 'phase_s', 'step_s', 'share', 'resource',
    'op_kinds' (kind -> s on that resource, largest first; host_issue: the device waiting for its host to issue
    the dense ops), 'dense_dtype', 'dense_share', 'alternative' ({'dtype', 'step_s', 'decides'} or None),
    'dense_bound' (where re-priced: dtype -> dense_bound), 'lines' (the sentences)}. ``reprice=False``: the plan
    is not re-priced at another dense dtype (no time left under the command's limit); the line says how to get it."""
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
        top = [f"{KIND_WORDS.get(k, k)} {v / busy:.0%}" for k, v in list(kinds.items())[:3] if v / busy >= 0.05]
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
        _add_alternative(out, plan, topo, wl, model, dense_s)
    return out


def _add_alternative(out: dict, plan: Plan, topo: Topology, wl: Workload, model: CostModel, dense_s: float) -> None:
    """The dense dtype's line of step_insights: the same plan re-priced at ALTERNATIVE_DENSE_DTYPE, faster enough
    to decide the step, or not (slower, or about the same) and why (why_dtype_changes_little); ``out`` gets its
    'alternative' ({'dtype', 'step_s', 'decides'}), 'dense_bound' (dtype -> dense_bound) and the line."""
    got = repriced(plan, topo, wl, ALTERNATIVE_DENSE_DTYPE)
    if got is None:
        return
    alt, alt_model = got
    step, dtype, alt_dtype = out["step_s"], wl.dense.dtype, ALTERNATIVE_DENSE_DTYPE
    decides = step / alt >= DECIDES_SPEEDUP
    out["alternative"] = {"dtype": alt_dtype, "step_s": alt, "decides": decides}
    own_b, alt_b = dense_bound(model), dense_bound(alt_model)
    out["dense_bound"] = {dtype: own_b, alt_dtype: alt_b}
    head = f"dense {dtype}: {dense_s / step:.0%} of the step ({_ms(dense_s)} of {_ms(step)}); "
    if decides:
        out["lines"].append(head + f"the dense dtype decides the step: {alt_dtype} would make this plan "
                            f"{_ms(alt)} ({step / alt:.1f}x faster; the same placements re-priced with "
                            f"dense.dtype: {alt_dtype} in the workload)")
        return
    change = "slower" if alt > step else "only a little faster" if alt < step else "no faster"
    why = why_dtype_changes_little(dtype, own_b, alt_dtype, alt_b, _dense_kind(model, plan))
    out["lines"].append(head + f"{alt_dtype} would make this plan {change} ({_ms(alt)}, the same placements "
                        f"re-priced): {why}")
