"""How a run's result is written: the table ``placer run`` prints, and JSON (``jsonable``: the ``default=`` for
json.dumps). Shared by ``placer run`` and the runner's rank 0 (runner/worker.py), without importing torch."""
from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from placer.cost import PHASES
from placer.units import fmt_bytes, fmt_seconds


def jsonable(x):
    """json.dumps ``default=``: None for a NaN or infinite float, else the value's string."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return str(x)


def _ratio(m, p) -> str:
    if not p or m is None:
        return "-"
    return f"{m / p:,.2f}x"


def print_result(r: dict, console: Console) -> None:
    m, p = r["measured"], r["predicted"]
    console.print(f"placer run: [bold]{escape(r['workload'])}[/] with plan {escape(r['plan_method'])}, predicted "
                  f"for {escape(r['hardware'])}; ran on {escape(r['device'])} ({escape(r['device_name'])}), torch "
                  f"{escape(r['torch_version'])}; host reads: {r['host_read_mechanism']}; {r['steps']} steps after "
                  f"{r['warmup']} warm-up" + (f"; rows / {r['scale']:g}" if r["scale"] != 1 else ""))
    if r.get("nproc"):
        console.print(f"{r['nproc']} processes ({r['backend']}); plan GPU i on rank i mod {r['nproc']}"
                      + (f", up to {r['devices_folded']} plan GPUs per rank: a rank's step is their summed work"
                         if r.get("devices_folded", 1) > 1 else ""))
    elif r.get("devices_folded", 1) > 1:
        console.print(f"[yellow]note:[/] the plan's {r['devices_folded']} GPUs all ran on this one device, one "
                      "after another: the measured step is their summed work")
    t = Table(title_justify="left")
    t.add_column("")
    t.add_column("measured", justify="right")
    t.add_column("predicted", justify="right")
    t.add_column("measured / predicted", justify="right")
    t.add_row("step time (median)", fmt_seconds(m["step_time_s"]), fmt_seconds(p["step_time_s"]),
              _ratio(m["step_time_s"], p["step_time_s"]))
    t.add_row("throughput, samples/s", f"{m['throughput_samples_per_s']:,.0f}",
              f"{p['throughput_samples_per_s']:,.0f}",
              _ratio(m["throughput_samples_per_s"], p["throughput_samples_per_s"]))
    for ph in PHASES:
        mv, pv = m["phases_s"].get(ph, 0.0), p["phases_s"].get(ph, 0.0)
        if mv or pv:
            t.add_row(f"  {ph}", fmt_seconds(mv), fmt_seconds(pv), _ratio(mv, pv))
    t.add_row("  sum of phases (synchronized pass)", fmt_seconds(m["phases_sum_s"]), fmt_seconds(p["step_time_s"]),
              _ratio(m["phases_sum_s"], p["step_time_s"]))
    peak_dev = m.get("peak_device_bytes")
    t.add_row("peak device memory", fmt_bytes(peak_dev) if peak_dev is not None else "(CPU run)",
              "", "")
    t.add_row("peak host memory (RSS)", fmt_bytes(m["peak_host_bytes"]), "", "")
    t.add_row("tables: device / host", f"{fmt_bytes(m['device_table_bytes'])} / {fmt_bytes(m['host_table_bytes'])}",
              "", "")
    if m.get("loss_first") is not None:
        t.add_row("loss first -> last steps", f"{m['loss_first']:.4f} -> {m['loss_last']:.4f}", "", "")
    console.print(t)
    err = r.get("relative_error")
    if err is not None:
        console.print(f"relative error of the step time: {err:+.1%}  (bottleneck predicted: "
                      f"{escape(str(p.get('bottleneck')))})")
    ops = m.get("ops")
    if ops:
        t = Table(title="per op kind and stream (synchronized pass, per step)", title_justify="left")
        for col in ("op kind", "stream", "measured", "priced", "measured / priced"):
            t.add_column(col, justify="left" if col in ("op kind", "stream") else "right")
        for row in sorted(ops, key=lambda x: -max(x["measured_s"], x["priced_s"])):
            t.add_row(row["kind"], escape(row["stream"]), fmt_seconds(row["measured_s"]), fmt_seconds(row["priced_s"]),
                      _ratio(row["measured_s"], row["priced_s"]))
        console.print(t)
    if r.get("hardware_note"):
        console.print(f"[yellow]note:[/] {escape(r['hardware_note'])}")
