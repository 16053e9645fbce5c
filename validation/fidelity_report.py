"""What a fidelity campaign's rows say: error statistics, the ILP against the fastest plan measured, the op
kinds that miss, a markdown table and a scatter plot (validation/fidelity.py writes the rows)."""
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
    return {"plans": len(rows), "workloads": len(per_workload), "mape": sum(errors) / len(errors),
            "spearman": None if math.isnan(rho) else float(rho), "worst_error": errors[worst],
            "worst_plan": f"{rows[worst]['workload']} {rows[worst]['name']}", "per_workload": per_workload,
            "ops": op_kinds(rows), "phases": phase_errors(rows)}


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


def markdown(data: dict) -> str:
    """The campaign as markdown: the setting, every plan, the per-workload verdicts, the op kinds."""
    s = data["summary"]
    lines = [f"Fidelity on {data['device_name']} ({data['device']}), {data['date']}, commit "
             f"{str(data.get('git_commit'))[:10]}, torch {data['torch']}, {data['threads']} torch thread(s), "
             f"{data['repeats']} runs per plan: `{data['command']}`", ""]
    if not s.get("plans"):
        return "\n".join(lines + ["(no plan ran)"])
    lines += [f"**{s['plans']} plans over {s['workloads']} workloads: MAPE {s['mape']:.1%}, Spearman "
              f"{s['spearman'] if s['spearman'] is None else round(s['spearman'], 3)}, worst {s['worst_error']:.1%} "
              f"({s['worst_plan']}).**", "",
              "| workload | plan | predicted ms | measured ms | measured / predicted | runs (ms) |",
              "| --- | --- | --: | --: | --: | --- |"]
    for r in data["rows"]:
        if "error" in r:
            lines.append(f"| {r['workload']} | {r['name']} | - | - | failed | {r['error'][:60]} |")
            continue
        runs = ", ".join(f"{x * 1e3:.3f}" for x in r["runs_step_time_s"])
        lines.append(f"| {r['workload']} | {r['name']} | {_ms(r['predicted_step_time_s'])} | "
                     f"{_ms(r['measured_step_time_s'])} | {r['ratio']:.3f} | {runs} |")
    lines += ["", "| workload | plans | MAPE | Spearman | fastest measured | ILP measured | ILP / fastest | ILP rank |",
              "| --- | --: | --: | --: | --- | --: | --: | --: |"]
    for wl, w in s["per_workload"].items():
        ratio = "-" if w["ilp_over_fastest"] is None else f"{w['ilp_over_fastest']:.3f}"
        rho = "-" if w["spearman"] is None else f"{w['spearman']:.2f}"
        lines.append(f"| {wl} | {w['plans']} | {w['mape']:.1%} | {rho} | {w['fastest']} "
                     f"({_ms(w['fastest_measured_s'])} ms) | {_ms(w['ilp_measured_s'])} | {ratio} | "
                     f"{w['ilp_rank']} of {w['plans']} |")
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
    ax.set_ylabel("measured step time (median), ms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
