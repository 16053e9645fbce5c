"""``placer sweep HW WL --gpus 8,16,32``: what-if over GPU counts; throughput, scaling efficiency, and
``--target-throughput N``: the fewest GPUs that reach N samples/s."""
from __future__ import annotations

import argparse
import json
import sys

from placer import argtypes as _args
from placer.commands._common import (add_dense_dtype, add_hw_wl, add_solver_options, add_trainer, allow_implausible,
                                     apply_dense_dtype, check_forced_method, limit_given, limit_line, solve_config,
                                     with_trainer)
from placer.commands._output import check_plot_path, save_figure
from placer.report import make_console
from rich.text import Text


#: the largest GPU count a sweep plans for: the cluster is built node by node and priced per count (1024 GPUs
#: take about 20 s even with a baseline method; the build time grows faster than the count)
MAX_SWEEP_GPUS = 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hw_wl(p)
    add_trainer(p)
    add_dense_dtype(p)
    p.add_argument("--gpus", metavar="N,N,...",
                   help="GPU counts to plan for, multiples of the template's GPUs per node "
                        "(default: 1, 2 and 4 nodes of the spec's first node template)")
    p.add_argument("--target-throughput", type=_args.throughput, metavar="N",
                   help="answer 'how many GPUs for N samples/s': the smallest count tried that reaches N")
    p.add_argument("--search", action="store_true",
                   help="with --target-throughput: ignore --gpus, start at one node and double the nodes until "
                        "the target is reached or --max-gpus")
    p.add_argument("--max-gpus", type=_args.int_range(1, MAX_SWEEP_GPUS, "a GPU count"), default=256, metavar="N",
                   help=f"largest count --search tries, at most {MAX_SWEEP_GPUS} (default 256)")
    p.add_argument("--fabric", metavar="KIND[:US]", default=None,
                   help="the network between the nodes a sweep adds: a kind and the switch latency in us, e.g. "
                        "infiniband:1.5; replaces the spec's fabric (default: the spec's own, or for a one-node "
                        "spec infiniband:1.5, a non-blocking NDR switch reached through the template's NICs)")
    p.add_argument("--plot", metavar="PNG", help="write throughput and scaling efficiency vs GPUs to this PNG")
    p.add_argument("--json", action="store_true", help="print the sweep as JSON instead of the table")
    add_solver_options(p)


def run(args) -> int:
    from placer.errors import SpecError
    from placer.specs import load_hardware, load_workload
    from placer.sweep import check_counts, gpus_per_node, plot_sweep, run_sweep, target_answer, template_of, with_fabric

    if args.plot is not None:
        check_plot_path(args.plot, "--plot")  # before the solves, which may take minutes
    config = solve_config(args)
    if args.search and args.target_throughput is None:
        raise SpecError("--search needs --target-throughput N")
    if args.target_throughput is not None and args.target_throughput <= 0:
        raise SpecError("--target-throughput must be positive (samples/s)")
    spec = load_hardware(args.hardware, allow_implausible=allow_implausible(args))  # HW first, as on the command line
    wl = apply_dense_dtype(with_trainer(load_workload(args.workload), args), args)
    check_forced_method(wl, config.method)
    per = gpus_per_node(spec)
    fabric_note = None
    counts = _counts(args, spec, per)
    if max(counts) > per or args.fabric is not None:
        spec, fabric_note = with_fabric(spec, args.fabric)
    check_counts(spec, counts)  # refuse before solving anything
    tname, _ = template_of(spec)
    from placer.commands._progress import Heartbeat

    with Heartbeat() as heartbeat:
        def starting(gpus: int) -> None:
            what = f"{gpus} GPUs ({gpus // per} node(s))"
            limit = config.time_limit_s if config.method == "ilp" else None
            said = limit_line(config.time_limit_s, given=limit_given(args)) if limit is not None else None
            heartbeat.say(f"  {what}: solving {config.method}" + (f", {said}" if said else ""))
            heartbeat.begin(f"solving {what}", limit)

        def progress(p) -> None:
            heartbeat.end()
            if p.planned:
                heartbeat.say(f"  {p.gpus:>5} GPUs: {p.throughput_samples_per_s:,.0f} samples/s ({p.status}, "
                              f"solved in {p.solve_wall_s:.1f} s)")
            else:
                heartbeat.say(f"  {p.gpus:>5} GPUs: {p.status}")

        heartbeat.say(f"sweep {wl.name} on {', '.join(map(str, counts))} GPUs of template {tname} ({per} per node), "
                      f"method {config.method}" + (f", time limit {config.time_limit_s:g} s per count"
                                                   if config.method == "ilp" else ""))
        if fabric_note:
            heartbeat.say(f"  {fabric_note}")
        points = run_sweep(spec, wl, counts, config, progress=progress, starting=starting,
                           stop_at_throughput=args.target_throughput if args.search else None)
    answer = target_answer(points, args.target_throughput, args.search) if args.target_throughput else None
    title = f"{wl.name} on {tname} nodes ({per} GPUs each), {config.method}"
    if args.plot:
        save_figure(lambda: plot_sweep(points, args.plot, title, target=args.target_throughput), args.plot,
                    "--plot")
    if args.json:
        out = {"hardware": spec.name, "template": tname, "gpus_per_node": per, "workload": wl.name,
               "dense_dtype": wl.dense.dtype, "method": config.method, "points": [p.as_dict() for p in points],
               "fabric": spec.fabric.model_dump() if spec.fabric is not None else None}
        if answer:
            out["target"] = {"throughput_samples_per_s": args.target_throughput, "gpus": answer[0],
                             "message": answer[1]}
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
    else:
        console = make_console()
        _table(points, title, console)
        if fabric_note:
            console.print(fabric_note, markup=False)
        if answer:
            console.print(Text(f"target {answer[1]}", style="green" if answer[0] else "yellow"))
        if args.plot:
            console.print(f"plot written to {args.plot}")
    if not any(p.planned for p in points):
        from placer.errors import InfeasibleError

        notes = [p.note for p in points if p.note]
        raise InfeasibleError("no GPU count has a plan" + (f": {notes[-1]}" if notes else ""))
    return 0


def _counts(args, spec, per: int) -> list[int]:
    """The GPU counts to plan for: --search's doublings, --gpus, or 1, 2 and 4 nodes of ``per`` GPUs; SpecError
    naming --gpus above MAX_SWEEP_GPUS."""
    from placer.errors import SpecError
    from placer.sweep import doubling_counts, parse_counts

    if args.search:
        counts = doubling_counts(spec, args.max_gpus)
    elif args.gpus:
        counts = parse_counts(args.gpus)
    else:
        counts = [per, 2 * per, 4 * per]
    if max(counts) > MAX_SWEEP_GPUS:
        raise SpecError(f"{max(counts)} GPUs is more than a sweep plans for (at most {MAX_SWEEP_GPUS})",
                        field="--gpus")
    return counts


def _table(points, title: str, console) -> None:
    from rich.table import Table

    from placer.units import fmt_seconds

    t = Table(title=f"sweep: {title}", title_justify="left")
    for col, just in (("GPUs", "right"), ("nodes", "right"), ("step time", "right"), ("samples/s", "right"),
                      ("speedup", "right"), ("efficiency", "right"), ("status", "left"), ("gap", "right"),
                      ("solve", "right"), ("bottleneck", "left")):
        t.add_column(col, justify=just)
    for p in points:
        if not p.planned:
            t.add_row(str(p.gpus), str(p.nodes), "-", "-", "-", "-", p.status, "-", f"{p.solve_wall_s:.1f} s",
                      (p.note or "")[:80])
            continue
        t.add_row(str(p.gpus), str(p.nodes), fmt_seconds(p.step_time_s), f"{p.throughput_samples_per_s:,.0f}",
                  f"{p.speedup:.2f}x", f"{p.efficiency:.0%}", p.status,
                  f"{p.gap:.2%}" if p.gap is not None else "-", f"{p.solve_wall_s:.1f} s", p.bottleneck or "")
    console.print(t)
    console.print("efficiency = throughput / (throughput at the smallest planned count x GPU ratio); "
                  "100% is linear scaling")
