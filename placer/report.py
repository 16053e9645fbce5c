"""Human-readable reports of plans and comparisons (rich tables)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from placer import shown_text
from placer.cost import PHASES
from placer.forms.shardings import sharding_of
from placer.plan import Plan
from placer.report_sizes import stored_bytes
from placer.units import fmt_bytes, fmt_seconds

PHASE_SHORT = {"embedding_forward": "emb fwd", "forward_exchange": "fwd x", "dense": "dense",
               "backward_exchange": "bwd x", "embedding_backward": "emb bwd", "gradient_allreduce": "allreduce"}


def phase_busy(v: dict, phase: str) -> float:
    """A device's busy time in ``phase``, s (``v``: its entry of predicted['devices']): its busiest resource kind
    there, as the summary's table and the plot (report_plot.py) show it."""
    return max((s for k, s in v.get("busy_s", {}).items() if k.startswith(phase + ":")), default=0.0)


TABLE_KINDS = ("host", "hbm", "uvm", "split", "fp16", "bf16")


def add_listing_arguments(p) -> None:
    """``--all`` and ``--tables`` of the commands that print a plan summary (solve, simulate)."""
    p.add_argument("--all", action="store_true",
                   help="list every table and every device (devices busiest first), not just the largest/first")
    p.add_argument("--tables", metavar="WHICH", default=None,
                   help="list only these tables, all of them: host, hbm (all rows in HBM), uvm (none), split "
                        "(some), fp16, bf16, or a name glob such as 't1*'; several separated by commas")


def table_matches(p, which: str | None) -> bool:
    """Whether placement ``p`` is one of ``which`` (see add_listing_arguments; None: every table)."""
    if not which:
        return True
    from fnmatch import fnmatchcase

    for w in (x.strip() for x in which.split(",")):
        on_gpu = sharding_of(p).on_gpus
        if w == "host" and not on_gpu or w in ("fp16", "bf16") and p.precision == w:
            return True
        if on_gpu and (w == "hbm" and p.hot_fraction >= 1 or w == "uvm" and p.hot_fraction <= 0
                       or w == "split" and 0 < p.hot_fraction < 1):
            return True
        if w not in TABLE_KINDS and w and fnmatchcase(p.table, w):
            return True
    return False


_MEMORY_KINDS = (("hbm", "HBM"), ("host", "host"), ("tier", "tier"))


def memory_use(v: dict) -> tuple[float, float, str]:
    """(bytes used, bytes usable, 'HBM' | 'host' | 'tier') of one device of a plan's 'predicted' block: usable is
    the capacity less the spec's reserve (hbm_reserve_GiB, dram_reserve_GiB), what the planner may fill and what
    explain's 'HBM free' is left of; one figure everywhere (memory_reserve says the rest)."""
    for kind, label in _MEMORY_KINDS:
        if f"{kind}_used_bytes" in v:
            usable = v[f"{kind}_capacity_bytes"] - v.get(f"{kind}_reserve_bytes", 0.0)
            return v[f"{kind}_used_bytes"], max(0.0, usable), label
    return 0.0, 0.0, "none"


def memory_reserve(v: dict) -> tuple[float, float]:
    """(capacity, reserve) in bytes of one device's memory in a plan's 'predicted' block (reserve 0 in plans
    written before it was recorded)."""
    for kind, _label in _MEMORY_KINDS:
        if f"{kind}_used_bytes" in v:
            return v[f"{kind}_capacity_bytes"], v.get(f"{kind}_reserve_bytes", 0.0)
    return 0.0, 0.0


def usable_note(devices: dict) -> str:
    """One line under the per-device table: how usable memory follows from capacity and reserve, per distinct
    (kind, capacity, reserve) among ``devices`` (a 'predicted' block's): 'usable = capacity less the spec's
    reserve: HBM 79.6 GiB - 4.0 GiB (1 GPU); host 128.0 GiB - 16.0 GiB (1 host)'."""
    seen: dict[tuple[str, float, float], int] = {}
    for v in devices.values():
        _used, _usable, kind = memory_use(v)
        if kind != "none":
            key = (kind, *memory_reserve(v))
            seen[key] = seen.get(key, 0) + 1
    noun = {"HBM": "GPU", "host": "host", "tier": "tier"}
    parts = [f"{kind} {fmt_bytes(cap)} - {fmt_bytes(res)} ({n} {noun[kind]}{'s' if n > 1 else ''})"
             for (kind, cap, res), n in seen.items()]
    return "usable = capacity less the spec's reserve (hbm_reserve_GiB, dram_reserve_GiB): " + "; ".join(parts)


def device_busy(v: dict) -> float:
    """A device's busy time over the step, s: the sum of its phases' (``phase_busy``)."""
    return sum(phase_busy(v, ph) for ph in PHASES)


def plan_summary(plan: Plan, workload, console: Console, max_tables: int = 12, max_devices: int = 16,
                 show_all: bool = False, tables: str | None = None, insights: list[str] | None = None) -> None:
    """Print the per-device table, the largest tables' placements and the solver account. ``show_all``: every
    device (busiest first) and every table; ``tables``: only the tables ``table_matches``, all of them;
    ``insights``: sentences printed under the bottleneck (report_insight.step_insights' lines)."""
    pred = plan.predicted or {}
    devices = pred.get("devices", {})
    gpus = [d for d, v in devices.items() if "hbm_used_bytes" in v]
    hosts = [d for d, v in devices.items() if "host_used_bytes" in v or "tier_used_bytes" in v]  # tiers too
    title = Text.assemble("plan ", (plan.method, "bold"),
                          f" for {shown_text.name(plan.workload.name)} on {shown_text.name(plan.hardware.name)}: "
                          f"step {fmt_seconds(pred.get('step_time_s', 0))}, "
                          f"{pred.get('throughput_samples_per_s', 0):,.0f} samples/s")
    console.print(title)
    t = Table(title="per device (busy time by phase)", title_justify="left")
    t.add_column("device")
    t.add_column("HBM used / usable", justify="right")
    for ph in PHASES:
        t.add_column(PHASE_SHORT[ph], justify="right")
    shown = gpus[:max_devices] + hosts[:max(2, max_devices - len(gpus[:max_devices]))]
    if show_all:
        shown = sorted(gpus + hosts, key=lambda d: -device_busy(devices[d]))
    for d in shown:
        v = devices[d]
        used, usable, kind = memory_use(v)
        mem = f"{'' if kind == 'HBM' else kind + ' '}{fmt_bytes(used)} / {fmt_bytes(usable)}"
        t.add_row(d, mem, *[fmt_seconds(phase_busy(v, ph)) for ph in PHASES])
    if len(gpus) + len(hosts) > len(shown):
        t.add_row(f"... {len(gpus) + len(hosts) - len(shown)} more", "", *[""] * len(PHASES))
    t.add_row(Text("step (max per phase)", style="bold"), "",
              *[Text(fmt_seconds(pred.get("phases_s", {}).get(ph, 0)), style="bold") for ph in PHASES])
    console.print(t)
    console.print(usable_note({d: devices[d] for d in shown}), markup=False)
    console.print(f"bottleneck: {pred.get('bottleneck', '?')}")
    for line in insights or ():
        console.print(line, markup=False)

    specs = {tb.name: tb for tb in workload.tables}
    sizes = {p.table: stored_bytes(specs[p.table], p) for p in plan.placements if p.table in specs}
    largest = sorted(plan.placements, key=lambda p: -sizes.get(p.table, 0))
    kinds: dict[str, int] = {}
    for p in plan.placements:
        kinds[p.label().split(" ")[0]] = kinds.get(p.label().split(" ")[0], 0) + 1
    counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    title = f"largest tables ({len(plan.placements)} in all: {counts})"
    if show_all or tables:
        largest = [p for p in largest if table_matches(p, tables)]
        max_tables = len(largest)
        title = (f"tables matching {shown_text.name(repr(tables))}, largest first "
                 f"({len(largest)} of {len(plan.placements)}: {counts})"
                 if tables else f"every table, largest first ({counts})")
    tt = Table(title=title, title_justify="left")
    tt.add_column("table")
    tt.add_column("size stored", justify="right")
    tt.add_column("placement")
    tt.add_column("in HBM", justify="right")
    for p in largest[:max_tables]:
        tt.add_row(shown_text.name(p.table), fmt_bytes(sizes.get(p.table, 0)), p.label(),
                   "-" if not sharding_of(p).on_gpus else f"{p.hot_fraction:.0%}")
    console.print(tt)
    s = plan.solver
    if s:
        parts = [f"solver {s.backend}", f"status {s.status}"]
        if s.gap is not None:
            parts.append(f"gap {s.gap:.2%}")
        if s.lower_bound_step_time_s is not None:
            parts.append(f"lower bound {fmt_seconds(s.lower_bound_step_time_s)}")
        if s.wall_s is not None:
            parts.append(f"wall {s.wall_s:.2f} s")
        if s.work_limit is not None and s.work_used is not None:
            parts.append(f"work {s.work_used:,.0f} of {s.work_limit:,.0f} units (deterministic)")
        elif s.work_used is not None:
            parts.append(f"work {s.work_used:,.0f} units")
        if s.ran_out:
            parts.append(f"{'work' if s.work_limit is not None else 'time'} limit cut: {', '.join(s.ran_out)}")
        if s.warm_start and s.warm_start != "none":
            parts.append(f"warm start {s.warm_start}")
        console.print(", ".join(parts))


def compare_table(rows: list[dict], console: Console) -> None:
    """Print `placer compare` rows side by side."""
    t = Table(title="methods on the same cost model", title_justify="left")
    for col, just in (("method", "left"), ("step time", "right"), ("samples/s", "right"),
                      ("vs host_cpu", "right"), ("HBM used", "right"), ("solve", "right"), ("status", "left"),
                      ("bottleneck", "left")):
        t.add_column(col, justify=just)
    for r in rows:
        if r["step_time_s"] is None:
            t.add_row(r["method"], "-", "-", "-", "-", f"{r['solve_wall_s']:.2f} s", r["status"], r.get("note", ""))
            continue
        speed = f"{r['speedup_over_host_cpu']:.2f}x" if r.get("speedup_over_host_cpu") else "-"
        t.add_row(r["method"], fmt_seconds(r["step_time_s"]), f"{r['throughput_samples_per_s']:,.0f}", speed,
                  fmt_bytes(r["hbm_used_bytes"]), f"{r['solve_wall_s']:.2f} s", r["status"], r["bottleneck"])
    console.print(t)


def make_console(stderr: bool = False) -> Console:
    """A console for reports: soft-wrapped, no auto highlighting, at least 140 columns when not a terminal
    (rich assumes 80 for pipes and files, which folds the per-device table), and no markup: every string is
    printed as written (names hold brackets); styled parts are rich Text (shown_text.py)."""
    c = Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=True, markup=False, width=140)
    return c


def explain_report(result: dict, console: Console) -> None:
    """Print `placer explain`: one row per table (place, memory, load, next-best option), then a sentence each."""
    console.print(Text.assemble("plan ", (result["method"], "bold"),
                                f": step {fmt_seconds(result['step_time_s'])}, bottleneck {result['bottleneck']}; "
                                f"{len(result['tables'])} tables ({result['selection']})"))
    t = Table(title="why each table is where it is", title_justify="left")
    for col, just in (("table", "left"), ("placement", "left"), ("memory used", "right"), ("HBM free", "right"),
                      ("largest load", "left"), ("of bneck", "right"), ("next-best option", "left"),
                      ("step change", "right")):
        t.add_column(col, justify=just)
    for e in result["tables"]:
        used = " + ".join(f"{fmt_bytes(m['table_bytes'])} {'HBM' if m['kind'] == 'HBM' else 'host'}"
                          for m in e["memory"])
        ml = e["main_load"]
        load = f"{fmt_seconds(ml['seconds'])} {ml['resource']} ({PHASE_SHORT.get(ml['phase'], ml['phase'])})" \
            if ml["resource"] else "-"
        nb = e["next_best"]
        if nb is None:
            alt, delta = "every other option is infeasible: memory", "-"
        else:
            alt = nb["label"]
            delta = f"{nb['delta_s'] * 1e3:+.3f} ms ({nb['delta_pct']:+.2f}%)"
        has_gpu = any(m["kind"] == "HBM" for m in e["memory"]) or sharding_of(e["sharding"]).on_gpus
        free = fmt_bytes(max(e["hbm_free_bytes"], 0)) if has_gpu else "-"
        t.add_row(shown_text.name(e["table"]), e["placement"], used, free,
                  load, f"{e['bottleneck_share']:.1%}", alt, delta)
    console.print(t)
    if result.get("hbm_note"):
        console.print(result["hbm_note"], markup=False)
    verdict = result.get("not_locally_optimal")
    if verdict:
        console.print(f"not locally optimal ({verdict['verdict'].replace('_', ' ')}): {verdict['reason']}",
                      markup=False)
    for e in result["tables"]:
        console.print(f"- {e['sentence']}", markup=False)
    for line in constraint_lines(result.get("constraints") or []):
        console.print(line, markup=False)


def constraint_lines(rows: list[dict]) -> list[str]:
    """The workload's constraints in explain's words: which bind the plan and what each costs (explain_constraints:
    the fastest move one constraint alone forbids, the other tables kept)."""
    if not rows:
        return []
    out = [f"constraints: {sum(r['binds'] for r in rows)} of {len(rows)} bind this plan (one table moved at a time)"]
    for r in rows:
        if r["binds"]:
            out.append(f"- {r['constraint']} binds: without it {r['table']} as {r['placement']} gives "
                       f"{fmt_seconds(r['step_time_without_s'])}, {fmt_seconds(r['cost_s'])} faster")
        else:
            out.append(f"- {r['constraint']} does not bind: no placement it alone forbids is faster "
                       f"({r['tables']} table(s) tried)")
    return out
