"""What a fidelity campaign's rows say: error statistics, the ILP against the fastest plan measured, the op
kinds that miss, a markdown table and a scatter plot (validation/fidelity.py writes the rows). Rows measured in
interleaved rounds (``rounds_step_time_s``: seconds by round, validation/rounds.py) add per workload the
statistics that hold on a noisy machine: the plans whose 90% intervals separate, Spearman over them with its
interval, the ILP against the fastest plan and against each other plan on paired rounds."""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path


def summarize(rows: list[dict]) -> dict:
    """MAPE and worst relative error of the predicted step time (vs measured), Spearman's rank correlation,
    per workload where the ILP's plan lands among the measured ones, and per op kind measured / priced."""
    if not rows:
        return {"plans": 0}
    from scipy.stats import spearmanr

    pred = [r["predicted_step_time_s"] for r in rows]
    meas = [r["measured_step_time_s"] for r in rows]
    errors = [abs(p - m) / m for p, m in zip(pred, meas)]
    worst = max(range(len(rows)), key=lambda i: errors[i])
    rho = spearmanr(pred, meas).statistic if len(rows) > 2 else float("nan")
    per_workload = {}
    for wl in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == wl]
        fastest = min(mine, key=lambda r: r["measured_step_time_s"])
        ilp = next((r for r in mine if r["method"] == "ilp"), None)
        order = sorted(mine, key=lambda r: r["measured_step_time_s"])
        sub_rho = spearmanr([r["predicted_step_time_s"] for r in mine],
                            [r["measured_step_time_s"] for r in mine]).statistic if len(mine) > 2 else float("nan")
        per_workload[wl] = {
            "plans": len(mine), "fastest": fastest["name"], "fastest_measured_s": fastest["measured_step_time_s"],
            "ilp_measured_s": ilp["measured_step_time_s"] if ilp else None,
            "ilp_over_fastest": ilp["measured_step_time_s"] / fastest["measured_step_time_s"] if ilp else None,
            "ilp_rank": order.index(ilp) + 1 if ilp else None,
            "mape": sum(abs(r["predicted_step_time_s"] - r["measured_step_time_s"]) / r["measured_step_time_s"]
                        for r in mine) / len(mine),
            "spearman": None if math.isnan(sub_rho) else float(sub_rho)}
        if all(r.get("rounds_step_time_s") for r in mine):
            per_workload[wl].update(round_statistics(mine))
    return {"plans": len(rows), "workloads": len(per_workload), "mape": sum(errors) / len(errors),
            "spearman": None if math.isnan(rho) else float(rho), "worst_error": errors[worst],
            "worst_plan": f"{rows[worst]['workload']} {rows[worst]['name']}", "per_workload": per_workload,
            "ops": op_kinds(rows), "phases": phase_errors(rows)}


def round_statistics(rows: list[dict]) -> dict:
    """One workload's rows measured in rounds (validation/rounds.py): ``separable_plans`` (how many plans
    separate, and which: ``separable``), ``spearman_separable`` (rho over them with its 90% interval and the rule
    that chose them), ``ilp_vs_fastest`` (the ILP's time over the fastest plan's, paired rounds, with its
    interval; None without an ILP row) and ``ilp_paired`` (the ILP against each other plan: ratio, interval,
    verdict faster / slower / not separable)."""
    from validation.rounds import ilp_vs_fastest, spearman_separable

    measured = {r["name"]: r["rounds_step_time_s"] for r in rows}
    sp = spearman_separable({r["name"]: r["predicted_step_time_s"] for r in rows}, measured)
    ilp = next((r["name"] for r in rows if r["method"] == "ilp"), None)
    vs = ilp_vs_fastest(measured, ilp) if ilp is not None else None
    return {"separable_plans": sp["count"], "separable": sp["plans"], "spearman_separable": sp,
            "ilp_vs_fastest": None if vs is None else {k: v for k, v in vs.items() if k != "paired"},
            "ilp_paired": None if vs is None else vs["paired"]}


def op_kinds(rows: list[dict]) -> dict:
    """Per op kind, over every plan: measured and priced seconds summed, and their ratio (a miss here points
    at that op kind's calibration)."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        for op in r["ops"]:
            acc[op["kind"]][0] += op["measured_s"]
            acc[op["kind"]][1] += op["priced_s"]
    return {k: {"measured_s": m, "priced_s": p, "measured_over_priced": (m / p) if p > 0 else None}
            for k, (m, p) in sorted(acc.items())}


def phase_errors(rows: list[dict]) -> dict:
    """Per phase: measured (synchronized pass) and predicted seconds summed over every plan, and their ratio."""
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        for ph, v in r["phases"].items():
            acc[ph][0] += v["measured_s"]
            acc[ph][1] += v["predicted_s"]
    return {ph: {"measured_s": m, "predicted_s": p, "measured_over_predicted": (m / p) if p > 0 else None}
            for ph, (m, p) in acc.items()}


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _iv(x, lo, hi, fmt: str) -> str:
    """``x`` with its interval where it has one: '1.23 [1.20, 1.25]' (``fmt``: the numbers' format)."""
    if x is None:
        return "-"
    return format(x, fmt) + ("" if lo is None or hi is None else f" [{format(lo, fmt)}, {format(hi, fmt)}]")


def measured_ms(row: dict) -> str:
    """A row's measured step, ms, with its 90% interval where it has one: '1.234 [1.200, 1.250]'."""
    lo, hi = row.get("measured_interval_s") or (None, None)
    return _iv(row["measured_step_time_s"] * 1e3, None if lo is None else lo * 1e3, None if hi is None else hi * 1e3,
               ".3f")


def rounds_ms(row: dict) -> str:
    """A row's measured steps by round (or by run, for rows without rounds), ms; '-' where a round failed."""
    vals = row.get("rounds_step_time_s") or row.get("runs_step_time_s") or []
    return ", ".join("-" if x is None else f"{x * 1e3:.3f}" for x in vals)


def runs_said(data: dict) -> str:
    """How many measurements each plan had: interleaved rounds, or (older campaigns) runs per plan."""
    if data.get("rounds") is not None:
        return f"{data['rounds']} interleaved rounds per plan"
    return f"{data.get('repeats')} runs per plan"


def rounds_lines(per_workload: dict) -> list[str]:
    """Markdown of the rounds statistics (round_statistics) of the workloads that have them: separable plans,
    Spearman over them, the ILP over the fastest plan and the plans separably faster than it, then the ILP
    against each plan; every number with its 90% interval."""
    mine = [(wl, w) for wl, w in per_workload.items() if "separable_plans" in w]
    if not mine:
        return []
    lines = ["", "Interleaved rounds (90% intervals: bootstrap of the median over rounds; the ILP's comparisons "
             "on paired rounds, the ratio ILP / plan per round):", "",
             "| workload | separable plans | Spearman, separable plans | ILP / fastest (paired) | "
             "separably faster than the ILP |", "| --- | --: | --: | --- | --- |"]
    for wl, w in mine:
        sp, v = w["spearman_separable"], w["ilp_vs_fastest"]
        ilp = "-" if v is None else (f"{_iv(v['ratio'], v['lo'], v['hi'], '.3f')} vs {v['versus']}"
                                     + (" (the ILP is the fastest)" if v["ilp_is_fastest"] else ""))
        faster = "-" if v is None else (", ".join(v["separably_faster"]) or "none")
        lines.append(f"| {wl} | {sp['count']} of {sp['of']} | {_iv(sp['rho'], sp['lo'], sp['hi'], '.2f')} | "
                     f"{ilp} | {faster} |")
    lines += ["", "| workload | the ILP against | ILP / plan (paired) | rounds | sign test p | the ILP is |",
              "| --- | --- | --: | --: | --: | --- |"]
    for wl, w in mine:
        for name, p in (w["ilp_paired"] or {}).items():
            sign = "-" if p.get("sign_p") is None else f"{p['sign_p']:.2f}"
            lines.append(f"| {wl} | {name} | {_iv(p['ratio'], p['lo'], p['hi'], '.3f')} | {p['rounds']} | {sign} | "
                         f"{p['verdict']} |")
    return lines


def markdown(data: dict) -> str:
    """The campaign as markdown: the setting, every plan, the per-workload verdicts, the op kinds."""
    s = data["summary"]
    lines = [f"Fidelity on {data['device_name']} ({data['device']}), {data['date']}, commit "
             f"{str(data.get('git_commit'))[:10]}, torch {data['torch']}, {data['threads']} torch thread(s), "
             f"{runs_said(data)}: `{data['command']}`", ""]
    if not s.get("plans"):
        return "\n".join(lines + ["(no plan ran)"])
    lines += [f"**{s['plans']} plans over {s['workloads']} workloads: MAPE {s['mape']:.1%}, Spearman "
              f"{s['spearman'] if s['spearman'] is None else round(s['spearman'], 3)}, worst {s['worst_error']:.1%} "
              f"({s['worst_plan']}).**", "",
              "| workload | plan | predicted ms | measured ms [90%] | measured / predicted | rounds (ms) |",
              "| --- | --- | --: | --: | --: | --- |"]
    for r in data["rows"]:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['name']} | - | - | failed | {r['error'][:60]} |")
            continue
        lines.append(f"| {r['workload']} | {r['name']} | {_ms(r['predicted_step_time_s'])} | {measured_ms(r)} | "
                     f"{r['ratio']:.3f} | {rounds_ms(r)} |")
    lines += ["", "| workload | plans | MAPE | Spearman | fastest measured | ILP measured | ILP / fastest | ILP rank |",
              "| --- | --: | --: | --: | --- | --: | --: | --: |"]
    for wl, w in s["per_workload"].items():
        ratio = "-" if w["ilp_over_fastest"] is None else f"{w['ilp_over_fastest']:.3f}"
        rho = "-" if w["spearman"] is None else f"{w['spearman']:.2f}"
        lines.append(f"| {wl} | {w['plans']} | {w['mape']:.1%} | {rho} | {w['fastest']} "
                     f"({_ms(w['fastest_measured_s'])} ms) | {_ms(w['ilp_measured_s'])} | {ratio} | "
                     f"{w['ilp_rank']} of {w['plans']} |")
    lines += rounds_lines(s["per_workload"])
    lines += ["", "| op kind | measured s (all plans) | priced s | measured / priced |", "| --- | --: | --: | --: |"]
    for k, v in s["ops"].items():
        ratio = "-" if v["measured_over_priced"] is None else f"{v['measured_over_priced']:.2f}"
        lines.append(f"| {k} | {v['measured_s']:.4f} | {v['priced_s']:.4f} | {ratio} |")
    return "\n".join(lines) + "\n"


def scatter(data: dict, path: Path) -> None:
    """Predicted vs measured step time, log-log, one colour per workload, the y = x line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["rows"] if "error" not in r]
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    for wl in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == wl]
        ax.scatter([r["predicted_step_time_s"] * 1e3 for r in mine], [r["measured_step_time_s"] * 1e3 for r in mine],
                   label=wl, s=28, alpha=0.8)
        bars = [r for r in mine if (r.get("measured_interval_s") or [None])[0] is not None]
        if bars:  # the 90% interval of each measured median
            below = [(r["measured_step_time_s"] - r["measured_interval_s"][0]) * 1e3 for r in bars]
            above = [(r["measured_interval_s"][1] - r["measured_step_time_s"]) * 1e3 for r in bars]
            ax.errorbar([r["predicted_step_time_s"] * 1e3 for r in bars],
                        [r["measured_step_time_s"] * 1e3 for r in bars], yerr=[below, above], fmt="none",
                        ecolor="grey", elinewidth=0.8, alpha=0.7)
        for r in mine:
            if r["method"] == "ilp":
                ax.scatter([r["predicted_step_time_s"] * 1e3], [r["measured_step_time_s"] * 1e3], marker="*", s=160,
                           facecolors="none", edgecolors="black")
    if rows:
        lo = min(min(r["predicted_step_time_s"], r["measured_step_time_s"]) for r in rows) * 1e3 * 0.8
        hi = max(max(r["predicted_step_time_s"], r["measured_step_time_s"]) for r in rows) * 1e3 * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="measured = predicted")
        ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="grey", alpha=0.15,
                        label="within 15%")
        ax.set_xscale("log")
        ax.set_yscale("log")
    s = data["summary"]
    title = f"{data['device_name']}: {s.get('plans', 0)} plans"
    if s.get("plans"):
        title += f", MAPE {s['mape']:.1%}, Spearman {s['spearman']:.2f}" if s["spearman"] is not None else ""
    ax.set_title(title + "\n(star: the ILP's plan)", fontsize=10)
    ax.set_xlabel("predicted step time, ms")
    ax.set_ylabel("measured step time (median; bars: 90% interval), ms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
