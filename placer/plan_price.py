"""A plan checked against its hardware spec and workload and priced, every refusal naming the plan file: the one
pre-flight that ``placer check --hardware --workload``, ``placer simulate`` and ``placer run`` share (structure,
devices, coverage, then the capacity of every memory of the spec, then the cost model's prediction)."""
from __future__ import annotations

from placer.cost import CostModel
from placer.errors import SpecError
from placer.plan import Plan, load_plan
from placer.plan_check import check_plan
from placer.simulate import predict
from placer.specs.workload import Workload
from placer.topology import Topology


def _named(exc: SpecError, file: str | None) -> SpecError:
    """``exc`` with the plan file named when it names no file yet."""
    if exc.file or not file:
        return exc
    return SpecError(exc.detail, file=file, field=exc.field)


def priced_plan(plan: Plan, topology: Topology, workload: Workload, *, file: str | None = None,
                check_hashes: bool = True) -> dict:
    """``check_plan`` then ``predict`` (which refuses a plan over any memory's capacity): the 'predicted' block.
    A spec that differs from the one the plan was made for is a what-if, not a refusal: with ``check_hashes`` a
    SpecWarning names what changed (plan.spec_changes) and the plan is priced against the spec as given; it is
    refused only when it no longer maps (unknown devices or tables, rows not covered, a memory over capacity).
    SpecError names ``file`` for every refusal; InfeasibleError passes through."""
    check_plan(plan, topology, workload, file=file, check_hashes=check_hashes)
    try:
        return predict(CostModel(topology, workload), plan)
    except SpecError as exc:
        raise _named(exc, file) from None
    except (KeyError, ValueError, IndexError) as exc:  # a plan check_plan let through and the model could not price
        raise SpecError(f"the plan cannot be priced on this hardware and workload ({type(exc).__name__}: {exc})",
                        file=file, field="placements") from None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def check_plan_file(path: str, hardware_path: str | None, workload_path: str | None, *,
                    allow_implausible: bool = False) -> str:
    """Validate a plan file; with hardware and workload, also check it against them (devices, coverage, every
    memory's capacity) and re-price it. Returns a one-line summary. The file's 'predicted' and 'solver' blocks
    are claims: reported as recorded, never as checked facts (the re-priced step is)."""
    if bool(hardware_path) != bool(workload_path):
        raise SpecError("--hardware and --workload go together: give both to check a plan against them",
                        field="--workload" if hardware_path else "--hardware")
    plan = load_plan(path)
    recorded = (plan.predicted or {}).get("step_time_s")
    head = f"plan ({plan.method}) for {plan.hardware.name} x {plan.workload.name}: {len(plan.placements)} placements"
    claims = []
    if plan.solver:
        claims.append(f"solver status {plan.solver.status}")
    if not (hardware_path and workload_path):
        if recorded is not None:
            claims.insert(0, f"predicted step {_ms(recorded)}")
        tail = f"; as recorded in the file, not re-checked: {', '.join(claims)}" if claims else ""
        return head + tail + " (give --hardware and --workload to check and re-price it)"
    from placer.specs import load_hardware, load_workload

    wl = load_workload(workload_path)
    topo = Topology(load_hardware(hardware_path, allow_implausible=allow_implausible), wl.dense.dtype)
    step = priced_plan(plan, topo, wl, file=path)["step_time_s"]
    out = f"{head}, maps onto the hardware and workload and fits their memories; re-priced step {_ms(step)}"
    if recorded is not None and abs(recorded - step) > 1e-6 * max(step, 1e-12):
        out += f" (the file records {_ms(recorded)})"
    if claims:
        out += f"; as recorded in the file, not re-checked: {', '.join(claims)}"
    return out
