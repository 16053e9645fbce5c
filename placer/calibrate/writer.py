"""The hardware spec YAML ``placer calibrate`` writes: every number with its source comment.

Each line with a number ends in ``# placer calibrate <date> on <device>, torch <version>: <how>``; an entry
of ``op_costs`` says which op was timed at which sizes, its measured time and the inversion, and, where
check samples were priced against it, their measured / priced ratios. The same tree of items gives the YAML
text and the in-memory NodeTemplate (``template``), with the values rounded as printed, so what the planner
reads back from the file is what ``op_costs`` (here) priced with.
"""
from __future__ import annotations

import json
import socket
from dataclasses import dataclass

from placer.calibrate.record import Calibration, OpCostEntries, price
from placer.specs.hardware import FIXED_COST_KINDS, NodeTemplate, OPTIMIZERS

COMMENT_COLUMN = 44


@dataclass
class Item:
    """One YAML key: a scalar ``value`` with its ``comment``, or ``children`` (key "-": a list entry)."""

    key: object
    value: object = None
    comment: str = ""
    children: list | None = None


def num(x: float) -> str:
    """A float as YAML reads it back as a float (5 significant digits, a dot before any exponent)."""
    text = f"{x:.5g}"
    if "e" in text and "." not in text.split("e")[0]:
        text = text.replace("e", ".0e")
    return text


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return num(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(json.dumps(x) if '*' in str(x) else str(x) for x in v) + "]"
    text = str(v)
    if text.isidentifier() and text.lower() not in ("true", "false", "yes", "no", "on", "off", "null"):
        return text
    return json.dumps(text)


def _key(k) -> str:
    return json.dumps(k) if isinstance(k, str) and "x" in k and k[0].isdigit() else str(k)


def render(items: list[Item], indent: int = 0) -> list[str]:
    lines = []
    for it in items:
        pad = " " * indent
        if it.key == "-":
            first, rest = it.children[0], it.children[1:]
            sub = render([first], indent + 2)
            sub[0] = pad + "- " + sub[0].lstrip()
            lines += sub + render(rest, indent + 2)
            continue
        if it.children is not None:
            head = f"{pad}{_key(it.key)}:"
            lines.append(head.ljust(COMMENT_COLUMN) + f"# {it.comment}" if it.comment else head)
            lines += render(it.children, indent + 2)
            continue
        text = f"{pad}{_key(it.key)}: {_scalar(it.value)}"
        lines.append(text.ljust(COMMENT_COLUMN) + f"# {it.comment}" if it.comment else text)
    return lines


def to_data(items: list[Item]):
    out = {}
    for it in items:
        if it.children is None:
            out[it.key] = float(num(it.value)) if isinstance(it.value, float) else it.value
        elif it.children and it.children[0].key == "-":
            out[it.key] = [to_data(c.children) for c in it.children]
        else:
            out[it.key] = to_data(it.children)
    return out


# ---- the tree -------------------------------------------------------------------------------------------------

def source(cal: Calibration) -> str:
    return f"placer calibrate {cal.date} on {cal.device_name}, torch {cal.torch_version}"


def _op_cost_items(e: OpCostEntries, src: str, checks: dict[str, list[str]]) -> list[Item]:
    def c(path: str, how: str) -> str:
        text = f"{src}: {how}"
        if checks.get(path):
            text += " | checks, measured / priced: " + "; ".join(checks[path])
        return text

    items = [Item("fixed_us", children=[Item(k, e.fixed_us[k].value, c(f"fixed_us.{k}", e.fixed_us[k].how))
                                        for k in FIXED_COST_KINDS if k in e.fixed_us])]
    if e.graph_fixed_us:
        items.append(Item("graph_fixed_us", children=[
            Item(k, e.graph_fixed_us[k].value, c(f"graph_fixed_us.{k}", e.graph_fixed_us[k].how))
            for k in FIXED_COST_KINDS if k in e.graph_fixed_us]))

    def rows(path: str, tables: dict) -> list[Item]:
        """storage dtype -> row bytes -> entry, as items (fp32 first)."""
        return [Item(dt, children=[Item(int(rb), t[rb].value, c(f"{path}.{dt}.{rb}", t[rb].how)) for rb in sorted(t)])
                for dt in sorted(tables, key=lambda d: d != "fp32") if (t := tables[dt])]

    for name in ("gather_GBps", "gather_cached_GBps", "host_gather_GBps"):
        if getattr(e, name):
            items.append(Item(name, children=rows(name, getattr(e, name))))
    if e.stream_GBps:
        t = e.stream_GBps
        items.append(Item("stream_GBps", comment=f"{src}: bytes an op touches (read + written) -> GB/s", children=[
            Item(int(b), t[b].value, c(f"stream_GBps.{b}", t[b].how)) for b in sorted(t)]))
    if e.stream_warm_GBps:
        t = e.stream_warm_GBps
        items.append(Item("stream_warm_GBps", comment=f"{src}: the same copies, buffers reused (warm caches)",
                          children=[Item(int(b), t[b].value, c(f"stream_warm_GBps.{b}", t[b].how)) for b in sorted(t)]))
    for name, what in (("strided_GBps", "elementwise ops over a transposed view"),
                       ("indexed_GBps", "indexing ops (index, index_put)")):
        if t := getattr(e, name):
            items.append(Item(name, comment=f"{src}: bytes an op moves (read + written) -> GB/s, {what}",
                              children=[Item(int(b), t[b].value, c(f"{name}.{b}", t[b].how)) for b in sorted(t)]))
    if t := e.sort_ns_per_id:
        items.append(Item("sort_ns_per_id", comment=f"{src}: ids one sort sorts -> ns per id", children=[
            Item(int(n), t[n].value, c(f"sort_ns_per_id.{n}", t[n].how)) for n in sorted(t)]))
    if e.segment_reduce_GBps:
        t = e.segment_reduce_GBps
        items.append(Item("segment_reduce_GBps", children=[
            Item(int(rb), t[rb].value, c(f"segment_reduce_GBps.{rb}", t[rb].how)) for rb in sorted(t)]))
    if e.update_GBps:
        items.append(Item("update_GBps", children=[Item(o, children=rows(f"update_GBps.{o}", t))
                                                   for o in OPTIMIZERS if (t := e.update_GBps.get(o))]))
    def order(k: str):
        dims, _, layout = k.partition(":")
        return (*(int(x) for x in dims.split("x")), layout)

    for name in ("gemm_TFLOPs", "gemm_warm_TFLOPs"):
        if getattr(e, name):
            items.append(Item(name, children=[
                Item(d, children=[Item(k, t[k].value, c(f"{name}.{d}.{k}", t[k].how)) for k in sorted(t, key=order)])
                for d, t in getattr(e, name).items()]))
    if e.torchrec_fixed_us or e.torchrec_forward_GBps:
        tbe = [Item("fixed_us", children=[Item(k, v.value, c(f"torchrec.fixed_us.{k}", v.how))
                                          for k, v in e.torchrec_fixed_us.items()])]
        for name in ("forward_GBps", "forward_cached_GBps"):
            if getattr(e, f"torchrec_{name}"):
                tbe.append(Item(name, children=rows(f"torchrec.{name}", getattr(e, f"torchrec_{name}"))))
        for name in ("backward_GBps", "backward_lookup_GBps", "backward_row_GBps"):
            if getattr(e, f"torchrec_{name}"):
                tbe.append(Item(name, children=[Item(o, children=rows(f"torchrec.{name}.{o}", t))
                                                for o, t in getattr(e, f"torchrec_{name}").items()]))
        for name in ("dense_forward_GBps", "dense_backward_GBps", "dmp_GBps"):
            if table := getattr(e, f"torchrec_{name}"):
                tbe.append(Item(name, children=[Item(k, table[k].value, c(f"torchrec.{name}.{k}", table[k].how))
                                                for k in sorted(table)]))
        items.append(Item("torchrec", comment=f"{src}: FBGEMM's TBE (calibrate/tbe.py)", children=tbe))
    return items


def _template_items(cal: Calibration, gpus: int, checks: dict[str, dict[str, list[str]]]) -> list[Item]:
    src = source(cal)
    v = cal.values
    m = lambda key, k=None, cast=float: Item(k or key, cast(v[key].value), f"{src}: {v[key].how}")
    gpu = [Item("model", cal.device_name),
           Item("count", gpus, f"{src}: " + _count_how(cal, gpus)),
           m("hbm_GiB"), m("hbm_bw_GBps"), m("hbm_gather_efficiency"), m("hbm_reserve_GiB"),
           Item("peak_TFLOPs", children=[Item(k, p.value, f"{src}: {p.how}") for k, p in cal.peaks.items()]),
           m("compute_efficiency"), m("kernel_launch_us"), m("host_read_efficiency"),
           *([m("graph_kernel_us")] if "graph_kernel_us" in v else []),
           Item("op_costs", children=_op_cost_items(cal.device_costs, src, checks.get("device", {})))]
    host = [m("dram_GiB"), m("dram_bw_GBps"), m("dram_reserve_GiB"), m("cpu_cores", cast=int), m("cpu_gather_GBps"),
            m("cpu_peak_TFLOPs")]
    if cal.host_costs is not None:
        host.append(Item("op_costs", children=_op_cost_items(cal.host_costs, src, checks.get("host", {}))))
    between = ["gpu*", "host"] if gpus > 1 else ["gpu0", "host"]
    kind = Item("kind", "network", "loopback TCP between the rank processes (gloo)") if cal.ranks else \
        Item("kind", "pcie")
    link = Item("-", children=[kind, Item("between", between),
                               m("link_bw_GBps", "bw_GBps"),
                               Item("efficiency", min(1.0, v["link_efficiency"].value),
                                    f"{src}: {v['link_efficiency'].how}"),
                               m("link_latency_us", "latency_us")])
    items = []
    if cal.unified:
        items.append(Item("unified_memory", True, f"{src}: a CPU run: the 'GPU' is the CPU training process; device "
                                                  "memory, host memory and the link are one RAM, one set of cores"))
    items += [Item("gpus", children=gpu), Item("host", children=host), Item("links", children=[link])]
    return items


def _count_how(cal: Calibration, gpus: int) -> str:
    if cal.ranks:
        return (f"--nproc {gpus}: the ranks of `placer run --device cpu --nproc {gpus}`, one measured with "
                f"{gpus - 1} busy neighbours")
    return f"--gpus {gpus}: the one device measured, replicated" if gpus > 1 else "the one device measured"


def _describe(cal: Calibration) -> str:
    if cal.ranks:
        return f"{cal.ranks.world} CPU processes of {cal.device_name} over loopback gloo, measured by placer calibrate"
    return f"measured by placer calibrate on {cal.device_name}"


def template(cal: Calibration, gpus: int = 1) -> NodeTemplate:
    """The node template the YAML describes (values rounded as printed)."""
    return NodeTemplate.model_validate(to_data(_template_items(cal, gpus, {})))


def op_costs(cal: Calibration, side: str = "device"):
    """The OpCosts the planner will price with, built from the calibration's spec numbers (the written YAML
    reads back to the same, up to the printed digits)."""
    from placer.program.opcosts import gpu_op_costs, host_op_costs

    t = template(cal)
    if side == "host" and not cal.unified:
        return host_op_costs(t.host)
    link = cal.v("link_bw_GBps") * 1e9 * min(1.0, cal.v("link_efficiency"))
    return gpu_op_costs(t.gpus, link)


def checked(cal: Calibration) -> list:
    """Every sample with its priced seconds under the calibration's op costs: [(Sample, s)]."""
    costs = {side: op_costs(cal, side) for side in ("device", "host")}
    return [(s, price(s, costs[s.side])) for s in cal.samples]


def _checks(cal: Calibration) -> dict[str, dict[str, list[str]]]:
    """Per side and entry path, "what measured / priced = ratio" of every check sample priced against it."""
    out: dict[str, dict[str, list[str]]] = {}
    costs = {side: op_costs(cal, side) for side in ("device", "host")}
    for s in cal.samples:
        if s.about:
            p = price(s, costs[s.side])
            out.setdefault(s.side, {}).setdefault(s.about, []).append(
                f"{s.what} {s.seconds * 1e3:.4g} / {p * 1e3:.4g} ms = {s.seconds / p:.2f}")
    return out


def to_yaml(cal: Calibration, name: str | None = None, gpus: int = 1) -> str:
    """The hardware spec YAML: a header saying what was measured how, then the spec, a comment per number."""
    src = source(cal)
    kind = "cpu" if cal.unified else "gpu"
    name = name or f"{socket.gethostname().split('.')[0] or 'local'}-{kind}-calibrated"
    flags = f" --nproc {cal.ranks.world}" if cal.ranks else ""
    flags += " --quick" if cal.quick else ""
    flags += "".join(f" --workload {w}" for w in cal.workloads)
    lines = [f"# Hardware spec measured by `placer calibrate{flags}` ({'CPU run' if cal.unified else str(cal.device)}, "
             f"{cal.threads} torch threads) in {cal.wall_s:.0f} s.",
             f"# Source of every number: {src} (per-line comments say how).",
             "# op_costs: the runner's own ops (runner/kernels.py, runner/optim.py) timed at known sizes (medians),",
             "# each number inverted from the formula placer/program/opcosts.py prices that op with, so pricing the",
             "# timed op gives its measured time back; row tables are keyed by storage dtype, then row bytes: fp32",
             "# and fp16 rows each define their own dtype's entries, rows of other widths are checks in the comments",
             "# (measured / priced). stream_GBps: bytes an op touches -> GB/s (pack_grad at each size); gemm_TFLOPs:",
             "# dtype -> 'MxKxN' (nn) or 'MxKxN:nt|tn|tt' (t: that operand is a transposed view, as the backward's",
             "# are). GEMMs, copies and the other streaming ops run on cold operands (see the note below);",
             "# stream_warm_GBps and gemm_warm_TFLOPs time the same ops reusing their operands: a dense step's",
             "# traffic is priced warm by the share the warm copy rate at its memory's size gives (caches).",
             "# fixed_us.dense_op: least squares over synthetic dense models' real steps (not the shipped",
             "# workloads) of what each traced op costs beyond its bare price; fixed_us.embedding_op: least",
             "# squares over synthetic chains of fused groups of what each ATen op of a group's ops costs the",
             "# host in a step beyond its tight-loop fixed cost (a GPU's; program/issue.py)."]
    if cal.ranks:
        lines += [f"# {cal.ranks.world} CPU processes of one machine, one torch thread each: the 'GPUs' are the ranks "
                  f"of `placer run",
                  f"# --device cpu --nproc {cal.ranks.world}` (gloo over loopback). op_costs: one rank measured while "
                  f"{cal.ranks.world - 1} other(s)",
                  "# worked beside it (gathers and GEMMs); the link: the all-to-all between the ranks, each timed",
                  "# after a burst of compute as a step meets it (placer/calibrate/ranks.py). Unified memory: the",
                  "# ranks share one RAM (host.dram_GiB) and its cores; host-table work runs on the first rank's",
                  "# stream."]
    elif cal.unified:
        lines += ["# CPU run (unified memory): the 'GPU' is the CPU training process (placer run --device cpu); its",
                  "# memory, the host's and the 'link' are one RAM (host.dram_GiB), and host-table work runs on the",
                  "# same cores (one stream), so op_costs are the device's only."]
    else:
        lines += [f"# Host rows read by the GPU through the runner's HostMemory: {cal.host_read_mechanism}. GPU-to-GPU "
                  "links are not measured: with gpus.count > 1 their traffic routes through the host here."]
    lines += [f"# Note: {n}" for n in cal.all_notes]
    lines += ["schema_version: 1", f"name: {name}",
              f"description: {_describe(cal)} ({cal.date})", "templates:"]
    tree = [Item("local", children=_template_items(cal, gpus, _checks(cal)))]
    lines += render(tree, 2)
    lines += ["nodes:", "  - template: local",
              "    count: 1".ljust(COMMENT_COLUMN) + f"# {src}: the one machine measured"]
    return "\n".join(lines) + "\n"
