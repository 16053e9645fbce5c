"""Human descriptions of specs: rich tables for a hardware spec or a workload, and a plot of either.

Used by ``placer show``. Every number printed comes from the spec (or the Topology/access models built from
it); nothing is recomputed with other assumptions. Units follow the spec fields: GiB = 2**30 bytes for
capacities, GB/s = 1e9 bytes/s per direction for bandwidths, us for latencies.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from placer import shown_text
from placer.specs.hardware import HardwareSpec, NodeTemplate
from placer.specs.kinds import DEVICE_KINDS, FABRIC_LINK, GPU, HOST, LINK_KINDS, MEMORY, NIC, SWITCH
from placer.specs.workload import Workload
from placer.topology import FABRIC, Topology
from placer.units import fmt_bytes

TOP_TABLES = 15
#: edge colours per link kind, node colours per device kind in the topology plot (specs/kinds.py), and the fabric's
#: and a node box's
LINK_COLORS = {k.name: k.color for k in LINK_KINDS.values()}
NODE_COLORS = {**{k.name: k.color for k in DEVICE_KINDS.values()}, "fabric": "#d62728", "node": "#c7c7c7"}


def _num(x: float, digits: int = 3) -> str:
    """Compact number: 3 significant digits, thousands separators for big values."""
    if x >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


# ---- hardware -----------------------------------------------------------------------------------------------

def template_usage(spec: HardwareSpec) -> dict[str, int]:
    """Template name -> number of nodes built from it."""
    count: Counter = Counter()
    for g in spec.nodes:
        count[g.template] += g.count
    return dict(count)


def gpu_table(name: str, t: NodeTemplate) -> Table:
    g = t.gpus
    tab = Table(title=f"GPUs of template {name}", title_justify="left")
    for col in ("model", "count", "HBM GiB (reserve)", "HBM GB/s", "gather eff", "peak TFLOP/s", "compute eff",
                "launch us", "host read eff"):
        tab.add_column(col, justify="left" if col == "model" else "right", no_wrap=col == "peak TFLOP/s")
    peaks = ", ".join(f"{k} {_num(v)}" for k, v in g.peak_TFLOPs.items())
    tab.add_row(g.model, str(g.count), f"{_num(g.hbm_GiB)} ({_num(g.hbm_reserve_GiB)})", _num(g.hbm_bw_GBps),
                f"{g.hbm_gather_efficiency:.2f}", peaks, f"{g.compute_efficiency:.2f}", _num(g.kernel_launch_us),
                f"{g.host_read_efficiency:.2f}")
    return tab


def host_table(name: str, t: NodeTemplate) -> Table:
    h = t.host
    tab = Table(title=f"Host of template {name}", title_justify="left")
    for col in ("DRAM GiB (reserve)", "DRAM GB/s", "CPU cores", "CPU gather GB/s", "CPU peak TFLOP/s", "NICs"):
        tab.add_column(col, justify="right")
    nics = f"{t.nics.count} x {_num(t.nics.bw_GBps)} GB/s, {_num(t.nics.latency_us)} us" if t.nics else "none"
    tab.add_row(f"{_num(h.dram_GiB)} ({_num(h.dram_reserve_GiB)})", _num(h.dram_bw_GBps), str(h.cpu_cores),
                _num(h.cpu_gather_GBps), _num(h.cpu_peak_TFLOPs), nics)
    return tab


def tier_table(name: str, t: NodeTemplate) -> Table:
    """The memory tiers of a template beyond HBM and host DRAM (the spec's ``tiers``)."""
    tab = Table(title=f"Memory tiers of template {name} (cold rows of GPU shards)", title_justify="left")
    for col in ("tier", "GiB (reserve)", "GB/s", "read efficiency"):
        tab.add_column(col, justify="left" if col == "tier" else "right")
    for m in t.tiers:
        tab.add_row(m.name, f"{_num(m.GiB)} ({_num(m.reserve_GiB)})", _num(m.bw_GBps), f"{m.read_efficiency:.2f}")
    return tab


def link_table(name: str, t: NodeTemplate) -> Table:
    """One row per kind of link: link entries with the same kind, bandwidth, efficiency and latency merge."""
    tab = Table(title=f"Links of template {name} (bandwidth per direction)", title_justify="left")
    for col in ("kind", "between", "links", "GB/s", "efficiency", "effective GB/s", "latency us"):
        tab.add_column(col, justify="left" if col in ("kind", "between") else "right")
    groups: dict[tuple, list] = {}
    for link in t.links:
        key = (link.kind, link.pcie_gen, link.bw_GBps, link.efficiency, link.latency_us)
        groups.setdefault(key, []).append(link)
    for (kind, gen, bw, eff, lat), links in groups.items():
        between = [" - ".join(link.between) for link in links]
        shown = ", ".join(between[:3]) + (f", ... ({len(between)} entries)" if len(between) > 3 else "")
        n = sum(len(t.link_pairs(link)) for link in links)
        tab.add_row(kind + (f" (Gen{gen})" if gen else ""), shown, str(n), _num(bw), f"{eff:.2f}", _num(bw * eff),
                    _num(lat))
    return tab


def example_paths(topo: Topology) -> list[tuple[str, str, str]]:
    """(description, source, destination) of the paths worth showing: GPU-GPU inside and across nodes, GPU-host."""
    out = []
    gpus0 = topo.gpus_of_node(topo.nodes[0])
    if len(gpus0) > 1:
        out.append(("GPU -> GPU, same node", gpus0[0], gpus0[-1]))
    out.append(("GPU -> own host", gpus0[0], topo.host_of(gpus0[0])))
    out += [(f"GPU -> memory tier {m.rsplit('/', 1)[-1]}", gpus0[0], m) for m in topo.tiers_of(gpus0[0])]
    if len(topo.nodes) > 1:
        other = topo.gpus_of_node(topo.nodes[1])
        out.append(("GPU -> GPU, other node", gpus0[0], other[min(1, len(other) - 1)]))
        out.append(("GPU -> other node's host", gpus0[0], topo.host_of(other[0])))
    return out


def route_shares(topo: Topology, src: str, dst: str) -> dict[str, float]:
    """Directed link resource -> share of the src->dst traffic it carries (accepts either form of
    Topology.route: link names, or (link name, share) pairs)."""
    out: dict[str, float] = {}
    for item in topo.route(src, dst):
        name, share = (item, 1.0) if isinstance(item, str) else item
        out[name] = out.get(name, 0.0) + share
    return out


def paths_table(topo: Topology) -> Table:
    tab = Table(title="Routes (fixed shortest paths by 1/bandwidth)", title_justify="left")
    for col in ("path", "from", "to", "via", "bottleneck GB/s", "latency us"):
        tab.add_column(col, justify="right" if col in ("bottleneck GB/s", "latency us") else "left")
    for what, src, dst in example_paths(topo):
        shares = route_shares(topo, src, dst)
        hops = []
        for name in shares:
            dev = name.split("->")[1]
            if dev != dst and dev not in hops:
                hops.append(dev)
        via = " > ".join(h.split("/")[-1] for h in hops) or "direct"
        if any(v < 1 - 1e-9 for v in shares.values()):
            via += " (split over equal paths)"
        tab.add_row(what, src, dst, via, _num(topo.bottleneck_bw(src, dst) / 1e9),
                    _num(topo.path_latency_s(src, dst) * 1e6))
    return tab


def totals_table(spec: HardwareSpec, topo: Topology) -> Table:
    s = topo.summary()
    hbm_usable = sum(m.usable_bytes for m in topo.memories.values() if m.kind == "hbm")
    dram_usable = sum(m.usable_bytes for m in topo.memories.values() if m.kind == "dram")
    hbm_bw = 0.0  # GB/s, from the spec (the topology has no HBM resources: HBM traffic is priced per op)
    unified = 0
    peaks: Counter = Counter()
    nic_bw = 0.0
    for _, t in spec.node_templates():
        if t.unified_memory:  # the "HBM" of CPU processes is the host's one RAM: not added as HBM
            unified += t.gpus.count
        else:
            hbm_bw += t.gpus.hbm_bw_GBps * t.gpus.count
        for k, v in t.gpus.peak_TFLOPs.items():
            peaks[k] += v * t.gpus.count
        if t.nics:
            nic_bw += t.nics.count * t.nics.bw_GBps
    tab = Table(title=f"Cluster totals: {spec.name}", title_justify="left", show_header=False)
    tab.add_column("what")
    tab.add_column("value", justify="right")
    tab.add_row("nodes / GPUs", f"{s['nodes']} / {s['gpus']}")
    tab.add_row("HBM (usable after reserve)", f"{fmt_bytes(s['hbm_bytes'])} ({fmt_bytes(hbm_usable)})")
    tab.add_row("host DRAM (usable after reserve)", f"{fmt_bytes(s['dram_bytes'])} ({fmt_bytes(dram_usable)})")
    if unified < s["gpus"]:
        tab.add_row("HBM bandwidth, all GPUs", f"{_num(hbm_bw)} GB/s")
    if unified:
        tab.add_row("HBM bandwidth", f"none on {unified} unified-memory 'GPU(s)' (CPU processes: host DRAM)")
    tab.add_row("peak compute, all GPUs", ", ".join(f"{k} {_num(v)} TFLOP/s" for k, v in peaks.items()))
    tab.add_row("links", ", ".join(f"{n} {k}" for k, n in sorted(s["links"].items())))
    if spec.num_nodes > 1:
        tab.add_row("NIC bandwidth, all nodes", f"{_num(nic_bw)} GB/s per direction")
        tab.add_row("fabric", f"{spec.fabric.kind}, {_num(spec.fabric.latency_us)} us")
    return tab


def show_hardware(spec: HardwareSpec, console: Console) -> Topology:
    """Print the spec: per template GPUs, host and links, then routes and cluster totals. Returns the Topology."""
    topo = Topology(spec)
    console.print(Text.assemble((f"hardware {shown_text.name(spec.name)}", "bold"), ": ",
                                shown_text.clipped(spec.description)))
    if spec.source_path:
        console.print(f"file {spec.source_path}, sha256 {spec.sha256[:12]}")
    used = template_usage(spec)
    for name, t in spec.templates.items():
        console.print(Text.assemble("\n", (f"template {shown_text.name(name)}", "bold"),
                                    f": used by {used.get(name, 0)} node(s). ", shown_text.clipped(t.description)))
        console.print(gpu_table(name, t))
        console.print(host_table(name, t))
        if t.tiers:
            console.print(tier_table(name, t))
        console.print(link_table(name, t))
    console.print()
    console.print(paths_table(topo))
    console.print(totals_table(spec, topo))
    return topo


# ---- workload -----------------------------------------------------------------------------------------------

def table_rows_by_size(wl: Workload) -> list:
    """Tables sorted by weight bytes, largest first (ties by name)."""
    return sorted(wl.tables, key=lambda t: (-t.size_bytes(), t.name))


def hot_share(model, fraction: float = 0.01) -> float:
    """Share of lookups on the hottest ``fraction`` of rows (at least one row)."""
    f = max(fraction, 1.0 / model.rows)
    return float(model.coverage(f))


def dense_table(wl: Workload) -> Table:
    d = wl.dense
    tab = Table(title="Dense model", title_justify="left", show_header=False)
    tab.add_column("what")
    tab.add_column("value")
    inter = d.interaction
    inter_s = inter.kind + (f" ({inter.layers} layers, rank {inter.rank})" if inter.kind == "dcnv2" else "")
    tab.add_row("dense features", str(d.num_dense_features))
    tab.add_row("bottom MLP", "-".join(str(x) for x in [d.num_dense_features, *d.bottom_mlp]))
    tab.add_row("interaction", inter_s)
    tab.add_row("top MLP", "-".join(str(x) for x in d.top_mlp))
    tab.add_row("dense dtype", d.dtype)
    tab.add_row("pooled embeddings per sample",
                f"{wl.num_pooled_features} features, {wl.embedding_dim_total:,} floats wide")
    return tab


def largest_tables_table(wl: Workload, n: int = TOP_TABLES) -> Table:
    """The ``n`` largest tables; where any table allows a compressed form, a column 'stored compressed' with the
    bytes each form it allows stores it in (QR at its max_collisions: the smallest; report_sizes.allowed_forms)."""
    from placer.report_sizes import allowed_forms

    models = wl.access_models
    forms = any(allowed_forms(t) for t in wl.tables)
    tab = Table(title=f"Largest {min(n, len(wl.tables))} of {len(wl.tables)} tables", title_justify="left")
    cols = ("table", "rows", "dim", "dtype", "bytes", "lookups/sample", "access", "top 1% rows ->") \
        + (("stored compressed",) if forms else ())
    for col in cols:
        tab.add_column(col, justify="left" if col in ("table", "dtype", "access", "stored compressed") else "right")
    for t in table_rows_by_size(wl)[:n]:
        m = models[t.name]
        row = [t.name, f"{t.rows:,}", str(t.dim), t.dtype, fmt_bytes(t.size_bytes()),
               _num(wl.lookups_per_sample(t.name)), m.describe(), f"{hot_share(m):.1%} of lookups"]
        if forms:
            row.append("; ".join(f"{form}: {fmt_bytes(b)}" for form, b in allowed_forms(t)) or "-")
        tab.add_row(*row)
    return tab


def workload_totals_table(wl: Workload) -> Table:
    rows = sum(t.rows for t in wl.tables)
    lookups = sum(wl.lookups_per_sample(t.name) for t in wl.tables)
    gathered = sum(wl.lookups_per_sample(t.name) * t.row_bytes() for t in wl.tables) * wl.batch_size
    tab = Table(title=f"Totals: {wl.name}", title_justify="left", show_header=False)
    tab.add_column("what")
    tab.add_column("value", justify="right")
    tab.add_row("tables / features", f"{len(wl.tables)} / {len(wl.resolved_features)}")
    tab.add_row("rows", f"{rows:,}")
    tab.add_row("weights", fmt_bytes(wl.total_bytes(with_optimizer=False)))
    tab.add_row(f"weights + {wl.optimizer.name} state", fmt_bytes(wl.total_bytes()))  # the tables' optimizer
    tab.add_row("global batch", f"{wl.batch_size:,}")
    tab.add_row("lookups per sample / per step", f"{_num(lookups)} / {lookups * wl.batch_size:,.0f}")
    tab.add_row("row bytes gathered per step", fmt_bytes(gathered))
    dense = wl.resolved_dense_optimizer
    tab.add_row("optimizer (tables)", f"{wl.optimizer.name}, lr {_num(wl.optimizer.lr)}")
    tab.add_row("dense optimizer", f"{dense.name}, lr {_num(dense.lr)}" + ("" if wl.dense_optimizer else
                                                                           " (the tables')"))
    return tab


def show_workload(wl: Workload, console: Console) -> None:
    """Print the workload: dense model, batch and optimizer, the largest tables with their skew, totals."""
    console.print(Text.assemble((f"workload {shown_text.name(wl.name)}", "bold"), ": ",
                                shown_text.clipped(wl.description)))
    if wl.source_path:
        console.print(f"file {wl.source_path}, sha256 {wl.sha256[:12]}")
    console.print(dense_table(wl))
    console.print(largest_tables_table(wl))
    console.print(workload_totals_table(wl))


# ---- plots --------------------------------------------------------------------------------------------------

def _pyplot():
    from placer.pyplot_agg import pyplot

    return pyplot()


def _node_layout(topo: Topology, node: str, width: float) -> dict[str, tuple[float, float]]:
    """Positions of one node's devices: NVLink switches on top, GPUs in a row, PCIe switches and NICs below,
    the host at the bottom, its memory tiers beside it."""
    pos = {}
    devices = [d for d in topo.graph.nodes if topo.node_of.get(d) == node]
    kind = topo.graph.nodes
    gpus = [d for d in devices if kind[d]["kind"] == GPU]
    nics = [d for d in devices if kind[d]["kind"] == NIC]
    switches = [d for d in devices if kind[d]["kind"] == SWITCH]
    nv_switches = [s for s in switches if any(topo.graph.edges[s, n]["kind"] == "nvlink" for n in topo.graph[s])]
    other_switches = [s for s in switches if s not in nv_switches]

    def row(items, y):
        for i, d in enumerate(items):
            pos[d] = (width * (i + 0.5) / len(items), y)

    row(nv_switches, 3.0)
    row(gpus, 2.0)
    row(other_switches, 1.1)
    row(nics, 0.3 if other_switches else 1.0)
    pos[f"{node}/host"] = (width / 2, -0.7)
    tiers = [d for d in devices if kind[d]["kind"] == MEMORY]
    for i, d in enumerate(tiers):
        pos[d] = (width * (0.5 + (i + 1) / (2 * len(tiers) + 1)), -1.6)
    return pos


def plot_hardware(spec: HardwareSpec, path: str | Path, topo: Topology | None = None) -> Path:
    """Draw the device graph. One node is drawn in full; with several nodes, the others are summarized as one
    box each (at most 8 drawn, the rest counted) on the fabric."""
    import networkx as nx

    plt = _pyplot()
    topo = topo or Topology(spec)
    node0 = topo.nodes[0]
    n_nodes = len(topo.nodes)
    width = max(6.0, 1.2 * len(topo.gpus_of_node(node0)))
    fig, ax = plt.subplots(figsize=(max(10.0, width + (6 if n_nodes > 1 else 2)), 7.5))
    pos = _node_layout(topo, node0, width)
    sub_nodes = list(pos)
    g = topo.graph.subgraph(sub_nodes).copy()
    labels = {d: d.split("/", 1)[1] for d in sub_nodes}
    for d in sub_nodes:  # capacities on the memories
        if topo.graph.nodes[d]["kind"] in (GPU, HOST, MEMORY):
            labels[d] += f"\n{topo.memories[d].capacity_bytes / 2**30:,.0f} GiB"
    summary_edges = []
    if n_nodes > 1:
        fx = width + 2.0
        pos[FABRIC] = (fx, -1.8)
        labels[FABRIC] = f"{spec.fabric.kind}\nfabric"
        g.add_node(FABRIC, kind="fabric")
        for nic in [d for d in sub_nodes if g.nodes[d]["kind"] == NIC]:
            g.add_edge(nic, FABRIC, **topo.graph.edges[nic, FABRIC])
        shown = topo.nodes[1:9]
        for i, node in enumerate(shown):
            box = f"{node} (summary)"
            t = topo.template_of[topo.gpus_of_node(node)[0]]
            pos[box] = (fx + 2.6, 3.0 - 4.8 * i / (len(shown) - 1) if len(shown) > 1 else 0.6)
            labels[box] = f"{node}\n{t.gpus.count} GPU"
            g.add_node(box, kind="node")
            summary_edges.append((box, FABRIC, f"{t.nics.count} x {_num(t.nics.bw_GBps)} GB/s"))
        if n_nodes > 9:
            ax.text(fx + 2.6, -2.5, f"... and {n_nodes - 9} more nodes", ha="center", fontsize=9)
    kinds = nx.get_node_attributes(g, "kind")
    node_colors = [NODE_COLORS.get(kinds.get(d, SWITCH), "#cccccc") for d in g.nodes]
    sizes = [2600 if kinds.get(d) in ("host", "fabric", "node") else 1500 for d in g.nodes]
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color=node_colors, node_size=sizes, node_shape="s", alpha=0.9)
    nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=8)
    bws = [data["bw_Bps"] for _, _, data in g.edges(data=True)]
    lo, hi = (min(bws), max(bws)) if bws else (1.0, 1.0)
    handles, seen = [], set()
    for kind, color in LINK_COLORS.items():
        edges = [(u, v) for u, v, d in g.edges(data=True) if d["kind"] == kind]
        if not edges:
            continue
        widths = [1.0 + 4.0 * (np.log(g.edges[e]["bw_Bps"] / lo) / np.log(hi / lo) if hi > lo else 0.5) for e in edges]
        nx.draw_networkx_edges(g, pos, edgelist=edges, ax=ax, edge_color=color, width=widths, alpha=0.7)
        for e, w in zip(edges, widths):  # legend: one entry per distinct (kind, bandwidth)
            key = (kind, round(g.edges[e]["bw_Bps"] / 1e9, 1))
            if key not in seen:
                seen.add(key)
                handles.append(plt.Line2D([], [], color=color, lw=w,
                                          label=f"{kind}: {key[1]:g} GB/s effective per direction"))
    if summary_edges:
        nx.draw_networkx_edges(g, pos, edgelist=[(a, b) for a, b, _ in summary_edges], ax=ax,
                               edge_color=LINK_COLORS[FABRIC_LINK], width=2.5, style="dashed", alpha=0.6)
        handles.append(plt.Line2D([], [], color=LINK_COLORS[FABRIC_LINK], lw=2.5, ls="--",
                                  label=f"other nodes' NICs ({summary_edges[0][2]} each)"))
    handles.sort(key=lambda h: h.get_label())
    ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=True)
    s = topo.summary()
    models = sorted({t.gpus.model for _, t in spec.node_templates()})
    ax.set_title(f"{spec.name}: {s['nodes']} node(s), {s['gpus']} x {' / '.join(models)}, "
                 f"HBM {fmt_bytes(s['hbm_bytes'])}, "
                 f"host DRAM {fmt_bytes(s['dram_bytes'])}" + (f"  ({node0} drawn in full)" if n_nodes > 1 else ""),
                 fontsize=10)
    ax.axis("off")
    ax.margins(0.08)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_workload(wl: Workload, path: str | Path, curves: int = 8) -> Path:
    """Left: table sizes, largest first, with the cumulative share. Right: coverage curves (hottest fraction of
    rows -> fraction of lookups) of the ``curves`` largest tables."""
    plt = _pyplot()
    tables = table_rows_by_size(wl)
    sizes = np.array([t.size_bytes() for t in tables], dtype=float)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    x = np.arange(1, len(sizes) + 1)
    if len(sizes) <= 60:
        ax1.bar(x, sizes / 2**30, color="#1f77b4")
    else:
        ax1.plot(x, sizes / 2**30, color="#1f77b4", lw=1.5)
    ax1.set_yscale("log")
    ax1.set_xlabel("table rank by size (largest first)")
    ax1.set_ylabel(f"table weights, GiB ({tables[0].dtype})")
    ax1.set_title(f"{wl.name}: {len(tables)} tables, {fmt_bytes(sizes.sum())} of weights")
    twin = ax1.twinx()
    twin.plot(x, np.cumsum(sizes) / sizes.sum(), color="#d62728", lw=1.5)
    twin.set_ylim(0, 1.02)
    twin.set_ylabel("cumulative share of all weights", color="#d62728")
    models = wl.access_models
    f = np.geomspace(1e-6, 1.0, 400)
    groups: dict[tuple, list[str]] = {}  # tables with the same rows and skew share one curve
    for t in tables[:curves]:
        groups.setdefault((t.rows, models[t.name].describe()), []).append(t.name)
    for (n_rows, desc), names in groups.items():
        m = models[names[0]]
        ff = np.clip(f, 1.0 / m.rows, 1.0)
        who = ", ".join(names) if len(names) <= 3 else f"{names[0]}, ... ({len(names)} tables)"
        ax2.plot(ff, m.coverage(ff), lw=1.5, label=f"{who}: {n_rows:,} rows, {desc}")
    ax2.plot(f, f, color="k", lw=0.8, ls=":", label="uniform")
    ax2.set_xscale("log")
    ax2.set_xlim(1e-6, 1)
    ax2.set_ylim(0, 1.02)
    ax2.set_xlabel("hottest fraction of a table's rows")
    ax2.set_ylabel("fraction of the table's lookups")
    ax2.set_title(f"access skew of the {min(curves, len(tables))} largest tables")
    ax2.legend(fontsize=7, loc="lower right")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
