"""What-if sweeps: the same workload on 1..N nodes of one node template, and "how many GPUs for N samples/s".

For every GPU count the cluster is the hardware spec's FIRST node group replicated to ``gpus / gpus_per_node``
nodes (``HardwareSpec.with_gpu_count``): same template, same fabric. Counts that are not a multiple of the
template's GPUs per node are refused, and so is more than one node when the template has no NICs (the network
between nodes would be made up). A spec without a fabric (one node) gets the one ``--fabric`` names, or
DEFAULT_FABRIC (``with_fabric``), and the sweep says which.

Scaling efficiency of a point = its throughput / (throughput at the base point x gpus / base gpus), where the
base point is the smallest count that has a plan (1.0 = linear scaling, the ideal).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Callable

from placer.errors import InfeasibleError, PlacerError, SpecError
from placer.specs.hardware import FabricSpec, HardwareSpec, NodeTemplate
from placer.specs.workload import Workload

#: the fabric a sweep adds to a spec that has none (one node) when --fabric is not given: a non-blocking NDR
#: InfiniBand leaf-spine switch, 1.5 us between NICs as in hardware_specs/dgx-h100-16node.yaml (an assumption);
#: each node reaches it through its template's NICs at their bandwidth
DEFAULT_FABRIC = "infiniband:1.5"

#: statuses that come with a plan
PLANNED = ("optimal", "feasible", "heuristic")


@dataclass
class SweepPoint:
    """One GPU count of a sweep. Times in seconds, throughput in samples/s; None where there is no plan."""

    gpus: int
    nodes: int
    status: str  # optimal | feasible | heuristic | infeasible | no_solution
    step_time_s: float | None = None
    throughput_samples_per_s: float | None = None
    efficiency: float | None = None  # vs linear scaling from the base point
    speedup: float | None = None  # throughput / base point's throughput
    gap: float | None = None
    lower_bound_step_time_s: float | None = None
    solve_wall_s: float = 0.0
    bottleneck: str | None = None
    note: str | None = None

    @property
    def planned(self) -> bool:
        return self.status in PLANNED and self.throughput_samples_per_s is not None

    def as_dict(self) -> dict:
        return asdict(self)


def template_of(spec: HardwareSpec) -> tuple[str, NodeTemplate]:
    """(name, template) of the first node group: the node a sweep replicates."""
    name = spec.nodes[0].template
    return name, spec.templates[name]


def gpus_per_node(spec: HardwareSpec) -> int:
    return template_of(spec)[1].gpus.count


def parse_counts(text: str) -> list[int]:
    """'8,16,32' -> [8, 16, 32] (sorted, unique). SpecError on anything that is not a positive integer."""
    out = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise SpecError(f"--gpus: {part!r} is not an integer (expected a list like 8,16,32)") from None
        if n <= 0:
            raise SpecError(f"--gpus: {n} is not a positive GPU count")
        out.add(n)
    if not out:
        raise SpecError("--gpus: no GPU count given (expected a list like 8,16,32)")
    return sorted(out)


def check_counts(spec: HardwareSpec, counts: list[int]) -> None:
    """Refuse counts the template cannot make: not a multiple of its GPUs per node, or several nodes without
    NICs or a fabric. Raises SpecError (exit 2) naming the count and the fix."""
    name, t = template_of(spec)
    per = t.gpus.count
    bad = [c for c in counts if c % per]
    if bad:
        raise SpecError(f"--gpus: {', '.join(map(str, bad))} not a multiple of {per}, the GPUs per node of "
                        f"template {name!r}: a sweep adds whole nodes (try "
                        f"{', '.join(str(per * k) for k in (1, 2, 4))})")
    if any(c > per for c in counts):
        where = spec.source_path or spec.name
        if t.nics is None:
            raise SpecError(f"template {name!r} has no NICs, so nodes built from it cannot be connected: "
                            f"more than {per} GPUs needs a template with 'nics' and a 'fabric' "
                            "(e.g. hardware_specs/dgx-h100-2node.yaml)", file=where)
        if spec.fabric is None:
            raise SpecError(f"the spec has no 'fabric' between nodes: more than {per} GPUs (one node of "
                            f"template {name!r}) needs one; give --fabric KIND[:LATENCY_US] (placer sweep adds "
                            f"{DEFAULT_FABRIC} by default) or use a multi-node spec of the same template "
                            "(e.g. hardware_specs/dgx-h100-2node.yaml for dgx-h100)", file=where)


def parse_fabric(text: str) -> FabricSpec:
    """'infiniband' or 'infiniband:1.5' (KIND[:LATENCY_US], the switch latency between NICs in us; default
    DEFAULT_FABRIC's) -> FabricSpec. SpecError naming --fabric on anything else."""
    kind, _, latency = (text or "").strip().partition(":")
    kind = kind.strip()
    if not kind or not kind.replace("_", "").replace("-", "").isalnum():
        raise SpecError(f"--fabric: {text!r} is not KIND[:LATENCY_US] (e.g. infiniband or infiniband:1.5)")
    try:
        us = float(latency) if latency.strip() else float(DEFAULT_FABRIC.split(":")[1])
    except ValueError:
        raise SpecError(f"--fabric: latency {latency!r} is not a number of microseconds (e.g. infiniband:1.5)") \
            from None
    if not 0 <= us <= 1000:
        raise SpecError(f"--fabric: latency {us:g} us is outside 0..1000 us")
    return FabricSpec(kind=kind, latency_us=us)


def with_fabric(spec: HardwareSpec, text: str | None) -> tuple[HardwareSpec, str | None]:
    """(spec with a fabric between nodes, a sentence saying where it came from or None): ``text`` (--fabric)
    replaces the spec's fabric; a spec without one (one node) gets DEFAULT_FABRIC; a spec with one and no
    ``text`` is returned as it is."""
    if text is None and spec.fabric is not None:
        return spec, None
    fabric = parse_fabric(DEFAULT_FABRIC if text is None else text)
    source = "--fabric" if text is not None else (f"the default ({DEFAULT_FABRIC}; --fabric "
                                                  "KIND[:LATENCY_US] to change)")
    what = "replaces the spec's" if spec.fabric is not None else "the spec has none"
    note = (f"nodes joined by fabric {fabric.kind}, {fabric.latency_us:g} us between NICs: {source}; {what}")
    return spec.model_copy(update={"fabric": fabric}), note


def spec_for_gpus(spec: HardwareSpec, gpus: int) -> HardwareSpec:
    """The spec's first node group replicated to ``gpus`` GPUs (check_counts first)."""
    check_counts(spec, [gpus])
    return spec.with_gpu_count(gpus // gpus_per_node(spec))


def solve_point(spec: HardwareSpec, wl: Workload, gpus: int, config) -> SweepPoint:
    """Plan ``wl`` on ``gpus`` GPUs of the template; infeasibility and solver failures become the status."""
    from placer.planner.solve import solve
    from placer.topology import Topology

    cluster = spec_for_gpus(spec, gpus)
    nodes = gpus // gpus_per_node(spec)
    t0 = time.perf_counter()
    try:
        plan = solve(Topology(cluster, wl.dense.dtype), wl, config)
    except InfeasibleError as exc:
        return SweepPoint(gpus, nodes, "infeasible", solve_wall_s=time.perf_counter() - t0, note=str(exc))
    except SpecError:
        raise
    except PlacerError as exc:
        return SweepPoint(gpus, nodes, "no_solution", solve_wall_s=time.perf_counter() - t0, note=str(exc))
    pred, s = plan.predicted, plan.solver
    return SweepPoint(gpus, nodes, s.status if s else "heuristic", step_time_s=pred["step_time_s"],
                      throughput_samples_per_s=pred["throughput_samples_per_s"],
                      gap=s.gap if s else None, lower_bound_step_time_s=s.lower_bound_step_time_s if s else None,
                      solve_wall_s=time.perf_counter() - t0, bottleneck=pred.get("bottleneck"))


def fill_efficiency(points: list[SweepPoint]) -> None:
    """Set speedup and efficiency of every planned point against the smallest planned count."""
    planned = sorted((p for p in points if p.planned), key=lambda p: p.gpus)
    if not planned:
        return
    base = planned[0]
    for p in planned:
        p.speedup = p.throughput_samples_per_s / base.throughput_samples_per_s
        p.efficiency = p.speedup / (p.gpus / base.gpus)


def run_sweep(spec: HardwareSpec, wl: Workload, counts: list[int], config,
              progress: Callable[[SweepPoint], None] | None = None,
              stop_at_throughput: float | None = None,
              starting: Callable[[int], None] | None = None) -> list[SweepPoint]:
    """Solve every count (ascending), each an entry of a portfolio (planner/portfolio.py) whose searches get the
    limit SCHEDULE.sweep_count_s gives them (the whole --time-limit each). With ``stop_at_throughput``, stop at the
    first count that reaches it. ``starting(gpus)`` is called before each count's solve, ``progress(point)`` after."""
    from placer.forms.storage import FORCED_FORMS
    from placer.planner import portfolio
    from placer.planner.schedule import SCHEDULE

    check_counts(spec, counts)

    def point(gpus: int, seconds: float | None) -> SweepPoint:
        if starting:
            starting(gpus)
        return solve_point(spec, wl, gpus, config if seconds is None else replace(config, time_limit_s=seconds))

    searches = config.method == "ilp" or config.method in FORCED_FORMS
    entries = [portfolio.Entry(f"{gpus} GPUs", partial(point, gpus), searches) for gpus in sorted(counts)]
    points = []
    for _, _, p in portfolio.run(entries, lambda n: SCHEDULE.sweep_count_s(config.time_limit_s)):
        points.append(p)
        if progress:
            progress(p)
        if stop_at_throughput is not None and p.planned and p.throughput_samples_per_s >= stop_at_throughput:
            break
    fill_efficiency(points)
    return points


def doubling_counts(spec: HardwareSpec, max_gpus: int) -> list[int]:
    """One node's GPUs, doubled until ``max_gpus``: 8, 16, 32, ... for an 8-GPU template."""
    per = gpus_per_node(spec)
    if max_gpus < per:
        raise SpecError(f"--max-gpus {max_gpus} is less than one node ({per} GPUs)")
    out, n = [], per
    while n <= max_gpus:
        out.append(n)
        n *= 2
    return out


def smallest_reaching(points: list[SweepPoint], target: float) -> SweepPoint | None:
    """The point with the fewest GPUs whose throughput is at least ``target`` samples/s, or None."""
    hits = [p for p in points if p.planned and p.throughput_samples_per_s >= target]
    return min(hits, key=lambda p: p.gpus) if hits else None


def target_answer(points: list[SweepPoint], target: float, searched: bool) -> tuple[int | None, str]:
    """(GPU count or None, a sentence answering 'how many GPUs for ``target`` samples/s')."""
    hit = smallest_reaching(points, target)
    tried = ", ".join(str(p.gpus) for p in points)
    if hit:
        how = "doubling nodes" if searched else "in the list"
        return hit.gpus, (f"{target:,.0f} samples/s: {hit.gpus} GPUs ({hit.nodes} node(s)) reach it with "
                          f"{hit.throughput_samples_per_s:,.0f} samples/s ({hit.status}); the smallest count "
                          f"tried {how} ({tried})")
    planned = [p for p in points if p.planned]
    if not planned:
        return None, f"{target:,.0f} samples/s: no GPU count tried ({tried}) has a plan at all"
    best = max(planned, key=lambda p: p.throughput_samples_per_s)
    hint = "raise --max-gpus" if searched else "try larger counts or --search"
    return None, (f"{target:,.0f} samples/s: not reached by any count tried ({tried}); the best is "
                  f"{best.throughput_samples_per_s:,.0f} samples/s at {best.gpus} GPUs "
                  f"({best.throughput_samples_per_s / target:.0%} of the target); {hint}")


def plot_sweep(points: list[SweepPoint], path: str, title: str, target: float | None = None) -> None:
    """Throughput and scaling efficiency vs GPUs, side by side, to a PNG."""
    from placer.pyplot_agg import pyplot

    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, NullLocator

    planned = [p for p in points if p.planned]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [p.gpus for p in points]
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("GPUs")
        ax.grid(True, alpha=0.3)
    if planned:
        gx = [p.gpus for p in planned]
        thr = [p.throughput_samples_per_s for p in planned]
        base = planned[0]
        ax1.plot(gx, thr, "o-", color="tab:blue", label="predicted")
        ax1.plot(gx, [base.throughput_samples_per_s * g / base.gpus for g in gx], "--", color="gray",
                 label=f"linear from {base.gpus} GPUs")
        for p in planned:
            ax1.annotate(_si(p.throughput_samples_per_s), (p.gpus, p.throughput_samples_per_s),
                         textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
        ax2.plot(gx, [100 * p.efficiency for p in planned], "o-", color="tab:green")
        for p in planned:
            ax2.annotate(f"{100 * p.efficiency:.0f}%", (p.gpus, 100 * p.efficiency), textcoords="offset points",
                         xytext=(0, 7), ha="center", fontsize=8)
        ax2.set_ylim(0, max(110, 10 + max(100 * p.efficiency for p in planned)))
    for p in points:
        if not p.planned:
            ax1.axvline(p.gpus, color="tab:red", alpha=0.3)
            ax1.annotate(p.status, (p.gpus, 0), xycoords=("data", "axes fraction"), xytext=(3, 5),
                         textcoords="offset points", fontsize=8, color="tab:red", rotation=90)
    if target:
        ax1.axhline(target, color="tab:red", linestyle=":", label=f"target {_si(target)}")
    ax2.axhline(100, color="gray", linestyle="--", linewidth=1)
    ax1.set_ylabel("throughput, samples/s")
    ax1.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _si(v)))
    ax1.set_ylim(bottom=0)
    ax1.set_title("throughput")
    ax1.legend(loc="upper left", fontsize=8)
    ax2.set_ylabel("scaling efficiency, % of linear")
    ax2.set_title("scaling efficiency")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _si(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"
