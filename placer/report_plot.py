"""A picture of a plan (``placer solve/simulate --plot PNG``): per device, memory used against what is usable (HBM
for a GPU, DRAM for a host; capacity less the spec's reserve) and busy time by phase against the step, the
bottleneck marked.

With many devices (more than MAX_ALL_GPUS GPUs) the plot shows the busiest and the emptiest GPUs and hosts, the
bottleneck's device always among them, and says how many it left out; a strip under the bars shows every GPU's
busy time, sorted, so that the spread of a 128-GPU plan is visible. Times in ms, memory in GiB.
"""
from __future__ import annotations

from pathlib import Path

from placer.cost import PHASES
from placer.report import PHASE_SHORT, device_busy, memory_use, phase_busy

#: up to this many GPUs every device is drawn; above it the busiest and emptiest
MAX_ALL_GPUS = 16
#: with many GPUs: how many of the busiest and of the emptiest are drawn
BUSIEST, EMPTIEST = 6, 3
#: the phases' colours; none of them red, which marks the bottleneck (BOTTLENECK_COLOR: its bar's outline, its
#: device's name): dense was red, and a dense bottleneck's outline vanished into its bar (issue 52)
PHASE_COLORS = {"embedding_forward": "#4c72b0", "forward_exchange": "#55a868", "dense": "#8c8c8c",
                "backward_exchange": "#8fd18f", "embedding_backward": "#8172b3", "gradient_allreduce": "#ccb974"}
BOTTLENECK_COLOR = "#d62728"
GiB = float(2**30)


def bottleneck_device(pred: dict) -> tuple[str | None, str | None]:
    """(device, phase) of the predicted bottleneck ('node0/gpu3:stream (dense)'), None where it is not a
    device's resource (a link, 'none')."""
    text = pred.get("bottleneck") or ""
    if " (" not in text:
        return None, None
    resource, phase = text.rsplit(" (", 1)
    device = resource.split(":", 1)[0]
    return (device if device in pred.get("devices", {}) else None), phase.rstrip(")")


def select_devices(pred: dict) -> tuple[list[str], str]:
    """The devices drawn, busiest first, and a note on what was left out ('' when nothing)."""
    devices = pred.get("devices", {})
    gpus = sorted((d for d, v in devices.items() if "hbm_used_bytes" in v), key=lambda d: -device_busy(devices[d]))
    hosts = sorted((d for d, v in devices.items() if "host_used_bytes" in v or "tier_used_bytes" in v),
                   key=lambda d: -device_busy(devices[d]))
    if len(gpus) <= MAX_ALL_GPUS:
        return gpus + hosts, ""
    bneck, _ = bottleneck_device(pred)
    pick = gpus[:BUSIEST] + gpus[-EMPTIEST:]
    hpick = hosts if len(hosts) <= 3 else hosts[:2] + hosts[-1:]
    if bneck and bneck not in pick + hpick:
        (pick if bneck in gpus else hpick).insert(0, bneck)
    pick = sorted(set(pick), key=lambda d: -device_busy(devices[d]))
    hpick = sorted(set(hpick), key=lambda d: -device_busy(devices[d]))
    note = (f"{len(pick)} of {len(gpus)} GPUs ({BUSIEST} busiest, {EMPTIEST} emptiest"
            + (", the bottleneck's" if bneck in gpus and gpus.index(bneck) >= BUSIEST else "") + ")"
            + (f", {len(hpick)} of {len(hosts)} hosts" if len(hpick) < len(hosts) else ""))
    return pick + hpick, note


def plot_plan(plan, path: str | Path, title: str | None = None, notes: list[str] = ()) -> Path:
    """Draw ``plan``'s prediction (plan.predicted) to ``path`` (PNG, or any type matplotlib writes); ``notes``:
    sentences written under the title (report_insight.step_insights' lines)."""
    from placer.pyplot_agg import pyplot

    plt = pyplot()
    pred = plan.predicted or {}
    devices = pred.get("devices", {})
    shown, note = select_devices(pred)
    many = bool(note)
    step_ms = pred.get("step_time_s", 0.0) * 1e3
    bneck, bphase = bottleneck_device(pred)
    rows = ["step"] + shown
    height = 2.2 + 0.3 * len(rows) + (2.0 if many else 0) + 0.2 * len(notes)
    fig = plt.figure(figsize=(12, height), layout="constrained")
    grid = fig.add_gridspec(2 if many else 1, 2, width_ratios=[1, 2.2],
                            height_ratios=[0.3 * len(rows) + 0.8, 1.6] if many else None)
    ax_mem = fig.add_subplot(grid[0, 0])
    ax_t = fig.add_subplot(grid[0, 1], sharey=ax_mem)
    ys = list(range(len(rows)))[::-1]
    y_of = dict(zip(rows, ys))
    # memory: used share of the usable (capacity less the spec's reserve: the summary's figure), amounts written
    for d in shown:
        used, cap, kind = memory_use(devices[d])
        share = 100 * used / cap if cap else 0.0
        ax_mem.barh(y_of[d], share, color="#1f77b4" if kind == "HBM" else "#ff7f0e", height=0.65)
        ax_mem.text(min(share, 100) + 2, y_of[d], f"{used / GiB:,.1f} / {cap / GiB:,.1f} GiB {kind}", va="center",
                    fontsize=7)
    ax_mem.axvline(100, color="k", lw=0.8)
    ax_mem.set_xlim(0, 200)
    ax_mem.set_xticks([0, 25, 50, 75, 100])
    ax_mem.set_xlabel("memory used, % of usable (capacity less the reserve)", fontsize=9)
    ax_mem.set_title("memory (HBM: GPU, host: DRAM)", fontsize=10)
    # busy time by phase: the step's phases on top, each device's busiest resource per phase below
    left = 0.0
    for ph in PHASES:
        w = pred.get("phases_s", {}).get(ph, 0.0) * 1e3
        ax_t.barh(y_of["step"], w, left=left, color=PHASE_COLORS[ph], height=0.65, label=PHASE_SHORT[ph])
        left += w
    for d in shown:
        left = 0.0
        for ph in PHASES:
            w = phase_busy(devices[d], ph) * 1e3
            mark = d == bneck and ph == bphase
            ax_t.barh(y_of[d], w, left=left, color=PHASE_COLORS[ph], height=0.65,
                      edgecolor=BOTTLENECK_COLOR if mark else "none", linewidth=2 if mark else 0)
            left += w
        ax_t.text(left + step_ms * 0.01, y_of[d], f"{left:.2f} ms", va="center", fontsize=7)
    ax_t.axvline(step_ms, color="k", ls="--", lw=0.8)
    ax_t.text(step_ms, len(rows) - 0.45, f" step {step_ms:.2f} ms", fontsize=8, va="bottom")
    ax_t.set_xlim(0, step_ms * 1.15 if step_ms else 1)
    ax_t.set_xlabel("busy time, ms (per phase: the device's busiest stream or link; dashed: the step)", fontsize=9)
    ax_t.set_title(f"busy time by phase; bottleneck (red outline): {pred.get('bottleneck', '?')}", fontsize=10)
    fig.legend(*ax_t.get_legend_handles_labels(), ncol=6, fontsize=8, loc="outside lower center")
    ax_mem.set_yticks(ys)
    ax_mem.set_yticklabels(rows, fontsize=8)
    plt.setp(ax_t.get_yticklabels(), visible=False)
    for label in ax_mem.get_yticklabels():
        if label.get_text() == bneck:
            label.set_color(BOTTLENECK_COLOR)
            label.set_fontweight("bold")
        if label.get_text() == "step":
            label.set_fontweight("bold")
    ax_mem.set_ylim(-0.6, len(rows) + 0.1)
    if many:
        _spread(fig.add_subplot(grid[1, :]), devices, step_ms)
    head = title or (f"plan {plan.method}: {plan.workload.name} on {plan.hardware.name}, step {step_ms:.2f} ms, "
                     f"{pred.get('throughput_samples_per_s', 0):,.0f} samples/s")
    fig.suptitle("\n".join([head] + ([f"showing {note}"] if note else []) + [_wrap(n) for n in notes]), fontsize=10)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)


def _wrap(text: str, width: int = 150) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _spread(ax, devices: dict, step_ms: float) -> None:
    """Every GPU's busy time (ms) and HBM use (% of capacity), GPUs sorted by busy time."""
    gpus = sorted((d for d, v in devices.items() if "hbm_used_bytes" in v), key=lambda d: -device_busy(devices[d]))
    busy = [device_busy(devices[d]) * 1e3 for d in gpus]
    x = range(1, len(gpus) + 1)
    ax.plot(x, busy, color="#444444", lw=1.2, label="busy time, ms")
    ax.axhline(step_ms, color="k", ls="--", lw=0.8)
    ax.set_ylim(0, step_ms * 1.1 if step_ms else 1)
    ax.set_xlim(1, max(2, len(gpus)))
    ax.set_ylabel("busy, ms", fontsize=8)
    ax.set_xlabel(f"all {len(gpus)} GPUs, busiest first", fontsize=8)
    twin = ax.twinx()
    hbm = [100 * used / usable if usable else 0.0 for used, usable, _ in (memory_use(devices[d]) for d in gpus)]
    twin.plot(x, hbm, color="#1f77b4", lw=1.0, label="HBM used, %")
    twin.set_ylim(0, 105)
    twin.set_ylabel("HBM, %", fontsize=8)
    lines = ax.get_lines()[:1] + twin.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="lower left")
    ax.set_title("every GPU: busy time and HBM used", fontsize=9)
