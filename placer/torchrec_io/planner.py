"""The ``torchrec`` method: TorchRec's own EmbeddingShardingPlanner on the same machine and workload, its
ShardingPlan imported (importer.py) and priced by placer's cost model like every other method.

TorchRec plans on CPU without process groups: ``EmbeddingShardingPlanner(topology, batch_size, constraints)
.plan(module, sharders)`` with a meta-device EmbeddingBagCollection of the workload's tables (no memory is
allocated) and ``compute_device="cuda"``, so that its GPU kernels (fused, fused_uvm, fused_uvm_caching) are the
candidates even on a machine without a GPU. What it is told (``planner_inputs``):

- Topology: ``world_size`` = the spec's GPUs, ``local_world_size`` = GPUs per node (equal nodes only: TorchRec
  has one value); per rank ``hbm_cap`` = the GPU's HBM minus its reserve, ``ddr_cap`` = the host's DRAM minus
  its reserve over the node's GPUs (bytes); bandwidths in bytes/ms as TorchRec takes them: ``hbm_mem_bw`` =
  HBM peak x gather efficiency (what placer's model reaches on row gathers), ``hbm_to_ddr_mem_bw`` = the
  GPU<->host link x its efficiency x host_read_efficiency (placer's UVM read rate), ``ddr_mem_bw`` = host DRAM
  bandwidth over the node's GPUs, ``intra_host_bw`` = the GPU<->GPU path inside a node, ``inter_host_bw`` =
  a node's NICs over its GPUs.
- ``batch_size``: the per-rank batch (global / world size, rounded).
- Per table ParameterConstraints: ``pooling_factors`` (one per feature reading the table); the kernels placer
  can price (dense, fused, fused_uvm, fused_uvm_caching: not key_value or the virtual-table kernels) and every
  sharding type but grid_shard (which placer does not read).
- The optimizer: each weight's ``_optimizer_classes`` (what TorchRec's storage estimate reads: SGD adds no
  state, Adam 2x, Adagrad 1x, row-wise Adagrad one value per row) and the sharder's fused params.
- Storage reservation: TorchRec's default policy (HeuristicalStorageReservation, 15% of HBM) with the dense
  model's bytes per GPU from placer's model as ``dense_tensor_estimate`` (a meta module has no dense part).
- fp16 tables: ``EmbeddingBagConfig(data_type=FP16)``.

The planner's proposal search is bounded by its own ``timeout_seconds``; the whole call also by a watchdog
(a thread joined with a deadline). Any failure (no plan fits TorchRec's estimate, a plan placer cannot read or
that does not fit placer's memory model, the time limit) raises TorchRecPlannerError, which ``placer
compare`` shows as that method's row ('torchrec planner failed: <reason>').
"""
from __future__ import annotations

import logging
import math
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

from placer.cost import CostModel
from placer.errors import InfeasibleError, SolverError, SpecError
from placer.plan import Placement, Plan, SpecRef
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.torchrec_io import INSTALL_HINT, mapping

#: TorchRec sharding types its planner may choose (all its EmbeddingBagCollection sharder offers but grid_shard)
SHARDING_TYPES = ("data_parallel", "table_wise", "column_wise", "table_column_wise", "row_wise", "table_row_wise")
#: placer's optimizer -> (torch optimizer class path, fbgemm EmbOptimType name) for TorchRec
_OPTIMIZERS = {"sgd": ("torchrec.optim:SGD", "EXACT_SGD"), "adam": ("torchrec.optim:Adam", "ADAM"),
               "adagrad": ("torch.optim:Adagrad", "EXACT_ADAGRAD"),
               "rowwise_adagrad": ("torchrec.optim:RowWiseAdagrad", "EXACT_ROWWISE_ADAGRAD")}
#: TorchRec's default storage reservation: this fraction of HBM kept back
STORAGE_RESERVE_PERCENTAGE = 0.15
#: the watchdog waits this much longer than the planner's own timeout (enumeration is outside that timeout)
WATCHDOG_GRACE_S = 30.0


class TorchRecUnavailable(SpecError):
    """The torchrec method without torchrec installed (exit 2, with the install line)."""

    def __init__(self, reason: str = ""):
        super().__init__(f"the torchrec method needs TorchRec{f' ({reason})' if reason else ''}; install it with: "
                         f"{INSTALL_HINT} (docs/torchrec.md)", field="--method")


class TorchRecPlannerError(SolverError):
    """TorchRec's planner failed, timed out, or gave a plan placer cannot read or fit. str() starts with
    'torchrec planner failed: '."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"torchrec planner failed: {reason}")


def available() -> tuple[bool, str]:
    """(True, version) when torchrec and its planner import, else (False, why)."""
    try:
        import torchrec  # noqa: F401
        from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: F401
    except Exception as exc:  # noqa: BLE001 -- ImportError, or a broken install (CUDA fbgemm on CPU)
        return False, f"{type(exc).__name__}: {exc}"
    return True, getattr(torchrec, "__version__", "?")


@dataclass
class PlannerInputs:
    """What TorchRec's planner is told (see the module docstring); plain numbers, no torchrec needed."""

    topology: dict                      # Topology(**topology); bandwidths in bytes/ms, capacities in bytes
    batch_size: int                     # per rank
    pooling_factors: dict[str, list[float]]  # table -> one per feature
    feature_names: dict[str, list[str]]
    fp16_tables: list[str]
    optimizer: str
    learning_rate: float
    dense_bytes_per_gpu: int
    tables: list[tuple[str, int, int]] = field(default_factory=list)  # (name, dim, rows), workload order
    notes: list[str] = field(default_factory=list)


def planner_inputs(model: CostModel) -> PlannerInputs:
    """TorchRec planner inputs from placer's hardware and workload. TorchRecPlannerError where TorchRec's
    Topology cannot describe the machine (no GPUs, unequal nodes, unified-memory CPU nodes)."""
    topo, wl = model.topo, model.wl
    gpus = list(topo.gpus)
    if not gpus:
        raise TorchRecPlannerError(f"{topo.spec.name} has no GPUs; TorchRec's planner places tables on GPU ranks")
    if any(topo.is_unified(g) for g in gpus):
        raise TorchRecPlannerError(f"{topo.spec.name} is a unified-memory (CPU processes) machine; TorchRec's "
                                   "GPU planner has no HBM to plan")
    nodes = [n for n in topo.nodes if topo.gpus_of_node(n)]
    per_node = sorted({len(topo.gpus_of_node(n)) for n in nodes})
    if len(per_node) != 1:
        raise TorchRecPlannerError(f"nodes with {per_node} GPUs: TorchRec's Topology has one local_world_size")
    local = per_node[0]
    world = len(gpus)
    notes = []
    hbm_cap = min(topo.memories[g].usable_bytes for g in gpus)
    ddr_cap = min(topo.memories[f"{n}/host"].usable_bytes / local for n in nodes)

    def gspec(g):
        return topo.gpu_spec(g)

    hbm_bw = min(gspec(g).hbm_bw_GBps * 1e9 * gspec(g).hbm_gather_efficiency for g in gpus)
    uvm_bw = min(topo.bottleneck_bw(topo.host_of(g), g) * gspec(g).host_read_efficiency for g in gpus)
    ddr_bw = min(topo.host_spec(f"{n}/host").dram_bw_GBps * 1e9 / local for n in nodes)
    args = {"world_size": world, "local_world_size": local, "compute_device": "cuda",
            "hbm_cap": int(hbm_cap), "ddr_cap": int(ddr_cap),
            "hbm_mem_bw": hbm_bw / 1e3, "ddr_mem_bw": ddr_bw / 1e3, "hbm_to_ddr_mem_bw": uvm_bw / 1e3}
    if local > 1:
        intra = min(topo.bottleneck_bw(n0[0], g) for n0 in (topo.gpus_of_node(n) for n in nodes) for g in n0[1:])
        args["intra_host_bw"] = intra / 1e3
    if len(nodes) > 1:
        nics = [topo.template_of[topo.gpus_of_node(n)[0]].nics for n in nodes]
        if all(nic is not None for nic in nics):
            args["inter_host_bw"] = min(nic.count * nic.bw_GBps * 1e9 / local for nic in nics) / 1e3
        else:
            notes.append("a node without NICs: TorchRec's default inter_host_bw")
    batch = max(1, round(wl.batch_size / world))
    if batch * world != wl.batch_size:
        notes.append(f"per-rank batch {batch} (global {wl.batch_size} over {world} ranks, rounded)")
    pooling: dict[str, list[float]] = {t.name: [] for t in wl.tables}
    feats: dict[str, list[str]] = {t.name: [] for t in wl.tables}
    for f in wl.resolved_features:
        pooling[f.table].append(float(f.pooling_factor))
        feats[f.table].append(f.name)
    dense = max((model.base_cost.memory.get(g, 0.0) for g in gpus), default=0.0)
    return PlannerInputs(topology=args, batch_size=batch, pooling_factors=pooling, feature_names=feats,
                         fp16_tables=[t.name for t in wl.tables if t.dtype == "fp16"],
                         optimizer=wl.optimizer.name, learning_rate=wl.optimizer.lr,
                         dense_bytes_per_gpu=int(dense), tables=[(t.name, t.dim, t.rows) for t in wl.tables],
                         notes=notes)


def _class(path: str):
    import importlib

    mod, name = path.split(":")
    return getattr(importlib.import_module(mod), name)


def _run_torchrec(inputs: PlannerInputs, time_limit_s: float):
    """TorchRec's ShardingPlan for ``inputs`` and the number of proposals it rated (needs torchrec)."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
    from torchrec.distributed.planner import Topology as TrecTopology
    from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation
    from torchrec.modules.embedding_configs import DataType

    configs = [EmbeddingBagConfig(name=t, embedding_dim=dim, num_embeddings=rows, feature_names=inputs.feature_names[t],
                                  data_type=DataType.FP16 if t in inputs.fp16_tables else DataType.FP32)
               for t, dim, rows in inputs.tables]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    opt_class, opt_type = _OPTIMIZERS[inputs.optimizer]
    cls = _class(opt_class)
    for _, p in ebc.named_parameters():
        p._optimizer_classes = [cls]  # what apply_optimizer_in_backward sets; TorchRec's storage estimate reads it
    constraints = {t: ParameterConstraints(sharding_types=list(SHARDING_TYPES), compute_kernels=list(mapping.KERNELS),
                                           pooling_factors=inputs.pooling_factors[t])
                   for t, _, _ in inputs.tables}
    sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": getattr(EmbOptimType, opt_type),
                                                          "learning_rate": inputs.learning_rate})
    planner = EmbeddingShardingPlanner(
        topology=TrecTopology(**inputs.topology), batch_size=inputs.batch_size, constraints=constraints,
        storage_reservation=HeuristicalStorageReservation(percentage=STORAGE_RESERVE_PERCENTAGE,
                                                          dense_tensor_estimate=inputs.dense_bytes_per_gpu),
        debug=False, timeout_seconds=max(1, math.ceil(time_limit_s)))
    plan = planner.plan(ebc, [sharder])
    return plan, getattr(planner, "_num_proposals", None)


def _quietly(fn, *args):
    """``fn(*args)`` with TorchRec's planner warnings (direct Topology construction, the heuristic reservation)
    and log lines silenced: they concern training jobs, not a dry-run plan."""
    root = logging.getLogger()
    loggers = [root] + [logging.getLogger(n) for n in ("torchrec", "torchrec.distributed.planner")]
    levels = [lg.level for lg in loggers]
    # TorchRec logs through the root logger too (logging.warning), which would install basicConfig's handler
    # for the rest of the process when the root has none: a NullHandler stands in while it runs
    null = logging.NullHandler() if not root.handlers else None
    try:
        if null:
            root.addHandler(null)
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args)
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)
        if null:
            root.removeHandler(null)


def _with_watchdog(fn, limit_s: float):
    """``fn()`` bounded by ``limit_s``: in a forked child process (killed at the deadline, so a planner stuck in
    enumeration leaves nothing running; ``fn``'s result must pickle), or where fork is not the safe default
    (not Linux) in a daemon thread joined with the deadline. Exceptions come back as TorchRecPlannerError
    ('Type: message')."""
    if sys.platform.startswith("linux"):
        return _in_child(fn, limit_s)
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- handed to the caller
            box["error"] = exc

    th = threading.Thread(target=target, name="torchrec-planner", daemon=True)
    th.start()
    th.join(limit_s)
    if th.is_alive():
        raise TorchRecPlannerError(f"no plan within {limit_s:.0f} s (time limit)")
    if "error" in box:
        raise TorchRecPlannerError(_reason(box["error"]))
    return box["value"]


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}{'...' if len(text) > 400 else ''}"


def _child(fn, conn) -> None:
    try:
        conn.send(("ok", fn()))
    except BaseException as exc:  # noqa: BLE001 -- reported to the parent
        conn.send(("error", _reason(exc)))
    finally:
        conn.close()


def _in_child(fn, limit_s: float):
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, send), name="torchrec-planner", daemon=True)
    proc.start()
    send.close()
    try:
        if not recv.poll(limit_s):
            raise TorchRecPlannerError(f"no plan within {limit_s:.0f} s (time limit)")
        try:
            kind, value = recv.recv()
        except EOFError:
            proc.join(5)
            raise TorchRecPlannerError(f"the planner process died (exit code {proc.exitcode})") from None
    finally:
        recv.close()
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if kind == "error":
        raise TorchRecPlannerError(value)
    return value


@dataclass
class TorchRecResult:
    placements: list[Placement]
    wall_s: float               # TorchRec's planner call (building the meta module included)
    num_proposals: int | None
    version: str
    inputs: PlannerInputs


def torchrec_plan(model: CostModel, time_limit_s: float = 60.0) -> TorchRecResult:
    """Run TorchRec's planner for ``model``'s machine and workload and import its plan. Placements in workload
    order, checked against placer's memory model. TorchRecUnavailable without torchrec; TorchRecPlannerError
    when TorchRec fails or its plan cannot be used."""
    ok, version = available()
    if not ok:
        raise TorchRecUnavailable(version)
    from placer.plan_price import priced_plan
    from placer.torchrec_io.importer import plan_from_document
    from placer.torchrec_io.torchrec_types import document_from_plan

    topo, wl = model.topo, model.wl
    inputs = planner_inputs(model)
    file = "<TorchRec planner>"

    def run():  # in the child: TorchRec's plan as placer's export document (plain data, pickles)
        sharding_plan, proposals = _quietly(_run_torchrec, inputs, time_limit_s)
        return document_from_plan(sharding_plan, file=file,
                                  data_types={t: "FP16" for t in inputs.fp16_tables}), proposals

    t0 = time.perf_counter()
    # PlannerError (nothing fits its estimate), any TorchRec failure or the deadline: TorchRecPlannerError
    doc, proposals = _with_watchdog(run, time_limit_s + WATCHDOG_GRACE_S)
    wall = time.perf_counter() - t0
    try:
        defaulted = _default_load_factors(doc)
        if defaulted:
            inputs.notes.append(f"fused_uvm_caching without a load factor ({', '.join(defaulted[:5])}"
                                f"{', ...' if len(defaulted) > 5 else ''}): TorchRec's default "
                                f"{_default_cache_ratio():g} (its planner's estimate and fbgemm's cache_load_factor)")
        plan = plan_from_document(doc, topo, wl, file=file, method="torchrec")
    except SpecError as exc:
        raise TorchRecPlannerError(f"placer cannot read its plan ({exc})") from None
    by_table = {p.table: p for p in plan.placements}
    missing = [t.name for t in wl.tables if t.name not in by_table]
    if missing:
        raise TorchRecPlannerError(f"its plan leaves out tables {', '.join(missing[:5])}")
    placements = [by_table[t.name] for t in wl.tables]
    try:
        priced_plan(Plan(hardware=SpecRef(name=topo.spec.name), workload=SpecRef(name=wl.name), method="torchrec",
                         placements=placements), topo, wl, file=file, check_hashes=False)
    except (SpecError, InfeasibleError) as exc:
        raise TorchRecPlannerError(f"its plan does not fit placer's model of this machine ({exc})") from None
    return TorchRecResult(placements=placements, wall_s=wall, num_proposals=proposals, version=version,
                          inputs=inputs)


def _default_cache_ratio() -> float:
    from torchrec.distributed.planner.constants import UVM_CACHING_RATIO

    return float(UVM_CACHING_RATIO)


def _default_load_factors(doc: dict) -> list[str]:
    """Give fused_uvm_caching shards without cache_params.load_factor TorchRec's default (what its planner
    estimated them with, and fbgemm's default cache_load_factor); the tables changed."""
    out = []
    for name, entry in doc["tables"].items():
        ps = entry["parameter_sharding"]
        if ps["compute_kernel"] == "fused_uvm_caching" and not (ps.get("cache_params") or {}).get("load_factor"):
            ps["cache_params"] = {"load_factor": _default_cache_ratio()}
            out.append(name)
    return out


def describe(result: TorchRecResult) -> str:
    """One line for the plan's solver note: what TorchRec was told and did."""
    t = result.inputs.topology
    gib = 1024 ** 3
    parts = [f"TorchRec {result.version} EmbeddingShardingPlanner (its own perf model; placer's prices the plan)",
             f"world {t['world_size']}, local {t['local_world_size']}, per-rank batch {result.inputs.batch_size}",
             f"hbm_cap {t['hbm_cap'] / gib:.1f} GiB, ddr_cap {t['ddr_cap'] / gib:.1f} GiB per rank",
             f"{result.num_proposals} proposals rated" if result.num_proposals is not None else ""]
    return "; ".join(p for p in parts + result.inputs.notes if p)
