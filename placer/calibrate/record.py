"""What ``placer calibrate`` measured and what it writes: samples (timed ops), entries (spec numbers).

A ``Sample`` is one timed op of the runner's code at known sizes, with the median seconds it took. Each
number of the spec's ``op_costs`` (an ``Entry``) is obtained by inverting the very formula
placer/program/opcosts.py prices that op with, from the samples that ``define`` it; so pricing those samples
with the written op costs gives their measured times back (``price`` below, ``Calibration.check``). Other
samples are checks: priced with the same op costs, their ratio measured / priced goes into the comments.
"""
from __future__ import annotations

import math
import sys

from dataclasses import dataclass, field

import torch

from placer.program.dense import dense_step_s
from placer.specs.hardware import FIXED_COST_KINDS, OpCostSpec, TbeCostSpec


@dataclass
class Entry:
    """One number of the spec: its value in the field's unit and how it was obtained."""

    value: float
    how: str


@dataclass
class Sample:
    """One timed op. ``kind``: fixed | lookup | sort | segment_reduce | update | copy | scatter | update_dense |
    gemm | dense_step (a dense model's whole step: forward, loss, backward, optimizer step); ``sizes``: what
    it is priced from (keys as in ``price``; bytes, counts; ``dtype`` the storage dtype of rows);
    ``seconds``: median measured time;
    ``side``: "device" (the device's op costs) or "host" (the host CPU's, on a GPU machine); ``defines``: the
    spec fields it sets (empty for a check), as paths "field.key" ("gather_GBps.fp16.64",
    "update_GBps.adam.fp32.48");
    ``about``: for a check, the entry whose comment reports it; ``exact``: False where the inversion had to
    clamp (noise made a rate negative or infinite) and where several samples share one fitted number (GEMMs
    of one key, the dense steps of ``fixed_us.dense_op``): the price no longer reproduces each time."""

    kind: str
    sizes: dict
    seconds: float
    what: str
    side: str = "device"
    defines: tuple[str, ...] = ()
    about: str = ""
    exact: bool = True


@dataclass
class OpCostEntries:
    """The ``op_costs`` of one device being built, field by field (see OpCostSpec for units and keys): row
    tables are keyed by storage dtype ("fp32", "fp16") then row bytes; ``update_GBps`` by optimizer first;
    ``stream_GBps`` by the bytes an op touches; ``gemm_TFLOPs`` by dense dtype, then "MxKxN" or "MxKxN:tn"
    (operand layout, nn unsuffixed)."""

    fixed_us: dict[str, Entry] = field(default_factory=dict)
    graph_fixed_us: dict[str, Entry] = field(default_factory=dict)
    gather_GBps: dict[str, dict[int, Entry]] = field(default_factory=dict)
    gather_cached_GBps: dict[str, dict[int, Entry]] = field(default_factory=dict)
    host_gather_GBps: dict[str, dict[int, Entry]] = field(default_factory=dict)
    stream_GBps: dict[int, Entry] = field(default_factory=dict)
    stream_warm_GBps: dict[int, Entry] = field(default_factory=dict)
    strided_GBps: dict[int, Entry] = field(default_factory=dict)
    indexed_GBps: dict[int, Entry] = field(default_factory=dict)
    sort_ns_per_id: dict[int, Entry] = field(default_factory=dict)
    segment_reduce_GBps: dict[int, Entry] = field(default_factory=dict)
    update_GBps: dict[str, dict[str, dict[int, Entry]]] = field(default_factory=dict)
    gemm_TFLOPs: dict[str, dict[str, Entry]] = field(default_factory=dict)
    gemm_warm_TFLOPs: dict[str, dict[str, Entry]] = field(default_factory=dict)
    torchrec_fixed_us: dict[str, Entry] = field(default_factory=dict)  # TbeCostSpec.fixed_us (calibrate/tbe.py)
    torchrec_forward_GBps: dict[str, dict[int, Entry]] = field(default_factory=dict)
    torchrec_backward_GBps: dict[str, dict[str, dict[int, Entry]]] = field(default_factory=dict)  # by optimizer
    torchrec_forward_cached_GBps: dict[str, dict[int, Entry]] = field(default_factory=dict)
    torchrec_backward_lookup_GBps: dict[str, dict[str, dict[int, Entry]]] = field(default_factory=dict)
    torchrec_backward_row_GBps: dict[str, dict[str, dict[int, Entry]]] = field(default_factory=dict)
    torchrec_dense_forward_GBps: dict[int, Entry] = field(default_factory=dict)
    torchrec_dense_backward_GBps: dict[int, Entry] = field(default_factory=dict)
    torchrec_dmp_GBps: dict[str, Entry] = field(default_factory=dict)  # TbeCostSpec.dmp_GBps (calibrate/dmp.py)

    def tbe_spec(self) -> TbeCostSpec | None:
        """The TBE costs measured (``placer calibrate --trainer torchrec``), or None."""
        if not (self.torchrec_fixed_us or self.torchrec_forward_GBps):
            return None
        vals = lambda d: {k: e.value for k, e in d.items()}
        by_dtype = lambda d: {dt: vals(t) for dt, t in d.items()} or None
        by_optimizer = lambda d: {o: {dt: vals(t) for dt, t in by.items()} for o, by in d.items()} or None
        return TbeCostSpec(fixed_us=vals(self.torchrec_fixed_us), forward_GBps=by_dtype(self.torchrec_forward_GBps),
                           backward_GBps=by_optimizer(self.torchrec_backward_GBps),
                           forward_cached_GBps=by_dtype(self.torchrec_forward_cached_GBps),
                           backward_lookup_GBps=by_optimizer(self.torchrec_backward_lookup_GBps),
                           backward_row_GBps=by_optimizer(self.torchrec_backward_row_GBps),
                           dense_forward_GBps=vals(self.torchrec_dense_forward_GBps) or None,
                           dense_backward_GBps=vals(self.torchrec_dense_backward_GBps) or None,
                           dmp_GBps=vals(self.torchrec_dmp_GBps))

    def spec(self) -> OpCostSpec:
        vals = lambda d: {k: e.value for k, e in d.items()} or None
        by_dtype = lambda d: {dt: vals(t) for dt, t in d.items() if t} or None
        return OpCostSpec(
            fixed_us={k: e.value for k, e in self.fixed_us.items()},
            graph_fixed_us={k: e.value for k, e in self.graph_fixed_us.items()},
            gather_GBps=by_dtype(self.gather_GBps), gather_cached_GBps=by_dtype(self.gather_cached_GBps),
            host_gather_GBps=by_dtype(self.host_gather_GBps),
            stream_GBps=vals(self.stream_GBps), stream_warm_GBps=vals(self.stream_warm_GBps),
            strided_GBps=vals(self.strided_GBps), indexed_GBps=vals(self.indexed_GBps),
            sort_ns_per_id=vals(self.sort_ns_per_id),
            segment_reduce_GBps=vals(self.segment_reduce_GBps),
            update_GBps={o: by_dtype(t) for o, t in self.update_GBps.items() if t} or None,
            gemm_TFLOPs={d: vals(t) for d, t in self.gemm_TFLOPs.items()} or None,
            gemm_warm_TFLOPs={d: vals(t) for d, t in self.gemm_warm_TFLOPs.items()} or None,
            torchrec=self.tbe_spec())

    def missing_fixed(self) -> list[str]:
        return [k for k in FIXED_COST_KINDS if k not in self.fixed_us]


@dataclass
class Measurement:
    """A legacy scalar field of the schema (hbm_bw_GBps, kernel_launch_us, ...), filled from measurements."""

    value: float
    how: str


@dataclass
class Calibration:
    """Everything one ``placer calibrate`` measured on ``device``: samples, op costs of the device (and of the
    host CPU on a GPU machine), the legacy scalar fields and peaks, and notes for the YAML header."""

    device: torch.device
    device_name: str
    torch_version: str
    date: str
    quick: bool
    threads: int = 1
    samples: list[Sample] = field(default_factory=list)
    device_costs: OpCostEntries = field(default_factory=OpCostEntries)
    host_costs: OpCostEntries | None = None
    values: dict[str, Measurement] = field(default_factory=dict)
    peaks: dict[str, Measurement] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    host_read_mechanism: str = ""
    workloads: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    #: the collectives between the ranks of a ``--nproc N`` calibration (placer.calibrate.ranks.Collectives)
    ranks: object = None

    @property
    def unified(self) -> bool:
        """A CPU run: the 'GPU' is this CPU process; device memory, host memory and the link are one RAM."""
        return self.device.type != "cuda"

    def set(self, key: str, value: float, how: str) -> None:
        self.values[key] = Measurement(float(value), how)

    def warn(self, message: str) -> None:
        """A measurement that cannot be right: said on stderr now, and kept in the spec's header and the
        --json output (``notes``)."""
        print(f"placer calibrate: warning: {message}", file=sys.stderr, flush=True)
        self.notes.append(f"WARNING: {message}")

    @property
    def all_notes(self) -> list[str]:
        """``notes`` and what the calibration left unmeasured (fixed_us.collective and all_reduce: one process
        has no collective; ``placer calibrate --nproc`` measures them)."""
        if "collective" in self.device_costs.fixed_us:
            return list(self.notes)
        return self.notes + ["fixed_us.collective and fixed_us.all_reduce are not measured (one process): their "
                             "datasheet defaults, kernel_launch_us x 1 and 0, apply"]

    def v(self, key: str) -> float:
        return self.values[key].value

    def add(self, sample: Sample) -> Sample:
        self.samples.append(sample)
        return sample


def price(s: Sample, costs) -> float:
    """Seconds the cost model prices sample ``s`` at: the op's fixed cost plus its variable part, exactly as
    placer/program/build.py prices the same op (``costs``: an opcosts.OpCosts)."""
    z = s.sizes
    if s.kind == "fixed":
        return costs.fixed(z["kind"])
    if s.kind == "lookup":
        return costs.fixed("lookup") + costs.lookup_s(z["dtype"], z["row_bytes"], z["lookups"], z["unique"],
                                                      z["out_bytes"], z.get("from_host", False))
    if s.kind == "sort":
        return costs.fixed("sort") + costs.sort_s(z["ids"])
    if s.kind == "segment_reduce":
        return costs.fixed("segment_reduce") + costs.segment_reduce_s(z["row_bytes"], z["lookups"])
    if s.kind == "update":
        return costs.fixed(f"update_{z['optimizer']}") + costs.update_s(z["optimizer"], z["dtype"], z["row_bytes"],
                                                                        z["rows"], z.get("in_host", False))
    if s.kind == "copy":  # pack_grad: bytes read and written
        return costs.fixed("copy") + costs.stream_s(2 * z["bytes"])
    if s.kind == "copy_warm":  # the same, its buffers reused every repeat
        return costs.fixed("copy") + costs.stream_s(2 * z["bytes"], warm=True)
    if s.kind == "strided":
        return costs.fixed("elementwise") + costs.strided_s(z["bytes"])
    if s.kind == "indexed":
        return costs.fixed("elementwise") + costs.indexed_s(z["bytes"])
    if s.kind == "scatter":
        return costs.fixed("elementwise") + costs.stream_s(z["bytes"] + 2 * z["unique"] * z["grad_row_bytes"])
    if s.kind == "update_dense":
        return costs.fixed("elementwise") + costs.stream_s(
            z["rows"] * (2 * z["row_bytes"] + 2 * z["state_bytes"] + z["grad_row_bytes"]))
    if s.kind == "gemm":
        return costs.fixed("gemm") + costs.gemm_s(z["dtype"], z["m"], z["k"], z["n"], z["batch"],
                                                  z.get("layout", "nn"), z.get("warm", False))
    if s.kind == "dense_step":  # build.py's _dense_ops, summed
        issue, work = dense_parts(z, costs)
        return dense_step_s(issue + z["ops"] * costs.fixed("dense_op"), work, z.get("asynchronous", False))
    if s.kind == "group_chain":  # synthetic groups' ops (calibrate/chain.py): each op, + embedding_op per ATen op
        return sum(price(Sample(p["kind"], p["sizes"], 0.0, ""), costs) for p in z["parts"]) + \
            z["aten_ops"] * costs.fixed("embedding_op")
    raise ValueError(f"unknown sample kind {s.kind!r}")


def dense_parts(z: dict, costs) -> tuple[float, float]:
    """(issue, work) seconds of a traced dense step (sizes ``z`` as dense.py's ``step_sizes`` writes them)
    WITHOUT ``dense_op``, warm or cold by its memory (``memory_bytes``) against the caches as build.py decides:
    issue = fixed(gemm) per GEMM, fixed(view) per view, fixed(elementwise) per other op; work = each GEMM's FLOPs
    at the rate of its shape and operand layout, each other op's bytes at the stream (strided, indexed) rate for
    that many bytes (``elementwise_bytes``: [bytes, ops of that size] pairs), as placer/program/build.py's
    ``_dense_ops``."""
    warm = costs.warm(z.get("memory_bytes", math.inf))
    gemms = sum(costs.gemm_s(z["dtype"], m, k, n, b, layout, warm) for b, m, k, n, layout in z["gemms"])
    streams = sum(count * costs.stream_s(nbytes, warm) for nbytes, count in z["elementwise_bytes"])
    streams += sum(count * costs.strided_s(nbytes) for nbytes, count in z.get("strided_bytes", ()))
    streams += sum(count * costs.indexed_s(nbytes) for nbytes, count in z.get("indexed_bytes", ()))
    issue = (len(z["gemms"]) * costs.fixed("gemm") + z["views"] * costs.fixed("view")
             + z["elementwise"] * costs.fixed("elementwise"))
    return issue, gemms + streams


def dense_base_s(z: dict, costs) -> float:
    """Seconds of a traced dense step WITHOUT ``dense_op`` as a CPU runs it: issue + work (dense_parts)."""
    return sum(dense_parts(z, costs))
