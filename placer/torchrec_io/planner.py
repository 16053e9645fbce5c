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
  a node's NICs over its GPUs. CPU rank processes (``placer run --device cpu --nproc N``; a unified-memory
  spec): ``compute_device`` cpu, ``hbm_cap`` 0, so that TorchRec proposes its CPU kernels (rank:R/cpu).
- ``batch_size``: the per-rank batch (global / world size, rounded).
- Per table ParameterConstraints: ``pooling_factors`` (one per feature reading the table); the kernels placer
  can price (dense, fused, fused_uvm, fused_uvm_caching: not key_value or the virtual-table kernels) and every
  sharding type but grid_shard (which placer does not read), narrowed by the workload's constraints as
  torchrec_io/constraints.py maps them (shardings -> sharding_types, memory -> compute_kernels); its
  ``hbm_headroom_GiB`` comes off ``hbm_cap``; a table whose precisions allow fp16 alone (and allow_fp16) is an
  fp16 config. What TorchRec cannot say (devices, co-location, shard counts, other precisions, host) is checked
  on its plan: a plan that breaks it is refused (TorchRecPlannerError naming the constraint), as placer check
  would refuse it.
- The optimizer: each weight's ``_optimizer_classes`` (what TorchRec's storage estimate reads: SGD adds no
  state, Adam 2x, Adagrad 1x, row-wise Adagrad one value per row) and the sharder's fused params.
- Storage reservation: TorchRec's default policy (HeuristicalStorageReservation, 15% of HBM) with the dense
  model's bytes per GPU from placer's model as ``dense_tensor_estimate`` (a meta module has no dense part).
- fp16 tables: ``EmbeddingBagConfig(data_type=FP16)``; bf16 tables (dtype bf16): ``BF16``.

The planner's proposal search is bounded by its own ``timeout_seconds``; the whole call also by a watchdog:
a forked child process killed at its deadline (a daemon thread joined with the deadline where fork is not the
safe default). ``start`` forks the child and returns at once, ``collect`` waits for it and imports its plan, so
a caller can plan something else meanwhile (``placer compare`` runs the ILP and the baselines while TorchRec
plans); ``torchrec_plan`` is the two in a row. The child imports torchrec itself, so the parent never pays for
that import. Any failure (no plan fits TorchRec's estimate, a plan placer cannot read or that does not fit
placer's memory model, the time limit) raises TorchRecPlannerError, which ``placer compare`` shows as that
method's row ('torchrec planner failed: <reason>'); a missing or broken torchrec TorchRecUnavailable.
"""
from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from dataclasses import dataclass, field

from placer.cost import CostModel
from placer.errors import InfeasibleError, SolverError, SpecError
from placer.executor import Child, reason
from placer.forms.shardings import COLUMN_WISE, DATA_PARALLEL, ROW_WISE, TABLE_WISE
from placer.plan import Placement, Plan, SpecRef
from placer.torchrec_io import INSTALL_HINT, mapping
from placer.units import GiB

#: TorchRec sharding types its planner may choose (all its EmbeddingBagCollection sharder offers but grid_shard: the
#: TorchRec types of placer's sharding forms), in the order its enumerator has always been offered them
SHARDING_TYPES = tuple(st for f in (DATA_PARALLEL, TABLE_WISE, COLUMN_WISE, ROW_WISE) for st in f.torchrec_types)
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
        self.reason = reason
        super().__init__(f"the torchrec method needs TorchRec{f' ({reason})' if reason else ''}; install it with: "
                         f"{INSTALL_HINT} (docs/torchrec.md)", field="--method")


class TorchRecPlannerError(SolverError):
    """TorchRec's planner failed, timed out, or gave a plan placer cannot read or fit. str() starts with
    'torchrec planner failed: '."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"torchrec planner failed: {reason}")


def installed() -> tuple[bool, str]:
    """(True, "") when a torchrec package can be found, without importing it (cheap: no torch import); (False,
    why) otherwise. ``available`` is the real test (the import); the planner's child process runs it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torchrec")
    except (ImportError, ValueError) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return (True, "") if spec is not None else (False, "No module named 'torchrec'")


class _NoTorchRec(Exception):
    """In the planner's child: torchrec does not import (reported to the parent as TorchRecUnavailable)."""


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
    # table -> the workload's constraints as ParameterConstraints fields (sharding_types, compute_kernels)
    constraints: dict[str, dict] = field(default_factory=dict)
    bf16_tables: list[str] = field(default_factory=list)  # tables stored at bf16 (their dtype): DataType.BF16


def planner_inputs(model: CostModel) -> PlannerInputs:
    """TorchRec planner inputs from placer's hardware and workload. TorchRecPlannerError where TorchRec's
    Topology cannot describe the machine (no GPUs, unequal nodes). CPU rank processes (a unified-memory node)
    are TorchRec's CPU topology: ``compute_device`` cpu, no HBM, each rank its share of the one RAM."""
    topo, wl = model.topo, model.wl
    gpus = list(topo.gpus)
    if not gpus:
        raise TorchRecPlannerError(f"{topo.spec.name} has no GPUs; TorchRec's planner places tables on GPU ranks")
    unified = any(topo.is_unified(g) for g in gpus)
    nodes = [n for n in topo.nodes if topo.gpus_of_node(n)]
    per_node = sorted({len(topo.gpus_of_node(n)) for n in nodes})
    if len(per_node) != 1:
        raise TorchRecPlannerError(f"nodes with {per_node} GPUs: TorchRec's Topology has one local_world_size")
    local = per_node[0]
    world = len(gpus)
    notes = []
    ddr_cap = min(topo.memories[f"{n}/host"].usable_bytes / local for n in nodes)
    # CPU ranks (unified memory): TorchRec's CPU topology, rows in the ranks' share of the one RAM
    hbm_cap = 0 if unified else min(topo.memories[g].usable_bytes for g in gpus)
    headroom = wl.constraints.hbm_headroom_GiB * GiB
    if headroom and not unified:  # the workload's HBM headroom, as a TorchRec user says it: a lower hbm_cap
        if hbm_cap <= headroom:
            raise TorchRecPlannerError(f"hbm_headroom_GiB {headroom / GiB:g} leaves no HBM on {topo.spec.name}")
        hbm_cap -= headroom
        notes.append(f"hbm_cap less the workload's hbm_headroom_GiB {headroom / GiB:g}")

    def gspec(g):
        return topo.gpu_spec(g)

    hbm_bw = min(gspec(g).hbm_bw_GBps * 1e9 * gspec(g).hbm_gather_efficiency for g in gpus)
    uvm_bw = min(topo.bottleneck_bw(topo.host_of(g), g) * gspec(g).host_read_efficiency for g in gpus)
    ddr_bw = min(topo.host_spec(f"{n}/host").dram_bw_GBps * 1e9 / local for n in nodes)
    args = {"world_size": world, "local_world_size": local, "compute_device": "cpu" if unified else "cuda",
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
    constraints, fp16 = _constraints(wl, notes)
    return PlannerInputs(topology=args, batch_size=batch, pooling_factors=pooling, feature_names=feats,
                         fp16_tables=[t.name for t in wl.tables if t.dtype == "fp16" or t.name in fp16],
                         optimizer=wl.optimizer.name, learning_rate=wl.optimizer.lr,
                         dense_bytes_per_gpu=int(dense), tables=[(t.name, t.dim, t.rows) for t in wl.tables],
                         notes=notes, constraints=constraints,
                         bf16_tables=[t.name for t in wl.tables if t.dtype == "bf16"])


def _constraints(wl, notes: list[str]) -> tuple[dict[str, dict], set[str]]:
    """The workload's constraints as TorchRec's planner takes them (torchrec_io/constraints.py): per table the
    sharding types and kernels allowed; the tables whose precisions allow fp16 alone of what they may take (an
    fp16 EmbeddingBagConfig); a note of what TorchRec cannot say (its plan is checked against it: ``collect``)."""
    from placer.torchrec_io.constraints import table_rules, table_to_torchrec

    out, fp16, lost = {}, set(), []
    tables = {t.name: t for t in wl.tables}
    for name, rule in table_rules(wl).items():
        try:
            fields, why = table_to_torchrec(name, rule)
        except InfeasibleError as exc:
            raise TorchRecPlannerError(str(exc)) from None
        out[name] = fields
        if rule.precisions is not None and tables[name].dtype == "fp32" and "fp32" not in rule.precisions \
                and "fp16" in rule.precisions and tables[name].allow_fp16:
            fp16.add(name)
            why = [n for n in why if n.field != "precisions"]
        lost += why
    if out:
        notes.append(f"the workload's constraints as ParameterConstraints for {len(out)} table(s)"
                     + (f"; not expressible in TorchRec, checked on its plan: "
                        f"{', '.join(sorted({f'{n.field} ({n.table})' for n in lost})[:6])}"
                        f"{' ...' if len({(n.field, n.table) for n in lost}) > 6 else ''}" if lost else ""))
    return out, fp16


def _class(path: str):
    import importlib

    mod, name = path.split(":")
    return getattr(importlib.import_module(mod), name)


def meta_model(inputs: PlannerInputs):
    """(a meta-device EmbeddingBagCollection of the workload's tables, its sharder with the fused optimizer):
    what TorchRec's planner and its estimators read (needs torchrec; no memory is allocated)."""
    import torch
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.modules.embedding_configs import DataType

    configs = [EmbeddingBagConfig(name=t, embedding_dim=dim, num_embeddings=rows, feature_names=inputs.feature_names[t],
                                  data_type=DataType.FP16 if t in inputs.fp16_tables else
                                  DataType.BF16 if t in inputs.bf16_tables else DataType.FP32)
               for t, dim, rows in inputs.tables]
    ebc = EmbeddingBagCollection(tables=configs, device=torch.device("meta"))
    opt_class, opt_type = _OPTIMIZERS[inputs.optimizer]
    cls = _class(opt_class)
    for _, p in ebc.named_parameters():
        p._optimizer_classes = [cls]  # what apply_optimizer_in_backward sets; TorchRec's storage estimate reads it
    sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": getattr(EmbOptimType, opt_type),
                                                          "learning_rate": inputs.learning_rate})
    return ebc, sharder


def _run_torchrec(inputs: PlannerInputs, time_limit_s: float):
    """TorchRec's ShardingPlan for ``inputs`` and the number of proposals it rated (needs torchrec)."""
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
    from torchrec.distributed.planner import Topology as TrecTopology
    from torchrec.distributed.planner.storage_reservations import HeuristicalStorageReservation

    ebc, sharder = meta_model(inputs)
    constraints = {}
    for t, _, _ in inputs.tables:  # the workload's constraints narrow the types and kernels placer reads
        c = inputs.constraints.get(t, {})
        types = [st for st in SHARDING_TYPES if st in c.get("sharding_types", SHARDING_TYPES)]
        kernels = [k for k in mapping.KERNELS if k in c.get("compute_kernels", mapping.KERNELS)]
        constraints[t] = ParameterConstraints(sharding_types=types, compute_kernels=kernels,
                                              pooling_factors=inputs.pooling_factors[t])
    planner = EmbeddingShardingPlanner(
        topology=TrecTopology(**inputs.topology), batch_size=inputs.batch_size, constraints=constraints,
        storage_reservation=HeuristicalStorageReservation(percentage=STORAGE_RESERVE_PERCENTAGE,
                                                          dense_tensor_estimate=inputs.dense_bytes_per_gpu),
        debug=False, timeout_seconds=max(1, math.ceil(time_limit_s)))
    plan = planner.plan(ebc, [sharder])
    return plan, getattr(planner, "_num_proposals", None)


def quietly(fn, *args):
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


class _Watch:
    """``fn()`` under way with a deadline ``limit_s`` from now: in a forked child process (placer/executor.py;
    killed at the deadline, so a planner stuck in enumeration leaves nothing running; ``fn``'s result must
    pickle), or where fork is not the safe default (not Linux) in a daemon thread. ``wait()`` gives its result;
    exceptions come back as TorchRecPlannerError ('Type: message'), _NoTorchRec as TorchRecUnavailable.
    ``close()`` ends it."""

    def __init__(self, fn, limit_s: float):
        self.limit_s = limit_s
        self.deadline = time.perf_counter() + limit_s
        self.thread = None
        self.box: dict = {}
        self.call = Child.start(fn, "torchrec-planner")
        if self.call is None:
            def target():
                try:
                    self.box["value"] = fn()
                except BaseException as exc:  # noqa: BLE001 -- handed to the caller
                    self.box["error"] = exc

            self.thread = threading.Thread(target=target, name="torchrec-planner", daemon=True)
            self.thread.start()

    def _late(self) -> TorchRecPlannerError:
        return TorchRecPlannerError(f"no plan within {self.limit_s:.0f} s (time limit)")

    def wait(self):
        remaining = max(0.0, self.deadline - time.perf_counter())
        if self.thread is not None:
            self.thread.join(remaining)
            if self.thread.is_alive():
                raise self._late()
            if "error" in self.box:
                _raise_for(self.box["error"])
            return self.box["value"]
        try:
            if not self.call.poll(remaining):
                raise self._late()
            try:
                kind, value = self.call.receive()
            except EOFError:
                raise TorchRecPlannerError(f"the planner process died (exit code {self.call.exitcode})") from None
        finally:
            self.close()
        if kind == "error":
            _raise_for(value)
        return value

    def close(self) -> None:
        """Kill the child if it still runs (a thread cannot be stopped: as a daemon it dies with the process)."""
        if self.call is not None:
            self.call.close()


def _raise_for(error) -> None:
    """The child's exception (or its reason text) as the method's error."""
    if isinstance(error, _NoTorchRec):
        raise TorchRecUnavailable(str(error))
    raise TorchRecPlannerError(reason(error) if isinstance(error, BaseException) else str(error))


@dataclass
class TorchRecResult:
    placements: list[Placement]
    wall_s: float               # the method's own time: inputs, the child's import and planner call, import back
    num_proposals: int | None
    version: str
    inputs: PlannerInputs
    planner_s: float = 0.0      # in the child: importing torchrec and its planner call (meta module included)
    predicted: dict = field(default_factory=dict)  # placer's price of the plan (simulate.predict's block)


@dataclass
class PlannerRun:
    """TorchRec's planner under way in its child process (``start``); ``collect`` for the result, ``cancel`` to
    stop it. Several may run at once."""

    model: CostModel
    inputs: PlannerInputs
    time_limit_s: float         # TorchRec's own timeout_seconds (its proposal search)
    watch: _Watch
    setup_s: float              # parent time spent in start()

    @property
    def deadline_s(self) -> float:
        """The watchdog's limit, seconds from the start."""
        return self.watch.limit_s

    def cancel(self) -> None:
        self.watch.close()


def default_topology(inputs: PlannerInputs) -> dict:
    """TorchRec's Topology arguments as a TorchRec user writes them for these ranks (world size, ranks per host,
    compute device): TorchRec's own bandwidth and capacity constants for the rest."""
    t = inputs.topology
    return {"world_size": t["world_size"], "local_world_size": t["local_world_size"],
            "compute_device": t["compute_device"]}


#: what TorchRec's planner is told of the machine: placer's figures (planner_inputs) or TorchRec's defaults
TOPOLOGIES = ("placer", "defaults")


def start(model: CostModel, time_limit_s: float = 60.0, deadline_s: float | None = None,
          topology: str = "placer") -> PlannerRun:
    """Start TorchRec's planner for ``model``'s machine and workload in a child process and return at once.
    ``time_limit_s`` bounds TorchRec's proposal search; the child is killed ``deadline_s`` after the start
    (default: time_limit_s + WATCHDOG_GRACE_S). TorchRecUnavailable when no torchrec package is found (a broken
    one is reported by ``collect``); TorchRecPlannerError where TorchRec's Topology cannot describe the
    machine. ``topology``: ``placer`` tells TorchRec the machine as placer models it (module docstring);
    ``defaults`` only its world size, ranks per host and compute device (default_topology), as a user who
    writes no bandwidths gets."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {TOPOLOGIES}, not {topology!r}")
    t0 = time.perf_counter()
    ok, why = installed()
    if not ok:
        raise TorchRecUnavailable(why)
    from placer.torchrec_io.importer import plan_from_document  # noqa: F401 -- imported before the fork, once

    inputs = planner_inputs(model)
    if topology == "defaults":
        inputs.topology = default_topology(inputs)
        inputs.notes.append("TorchRec's default Topology (world size, ranks per host and compute device only)")
    file = "<TorchRec planner>"

    def run():  # in the child: TorchRec's plan as placer's export document (plain data, pickles)
        c0 = time.perf_counter()
        ok, version = available()
        if not ok:
            raise _NoTorchRec(version)
        from placer.torchrec_io.torchrec_types import document_from_plan

        sharding_plan, proposals = quietly(_run_torchrec, inputs, time_limit_s)
        doc = document_from_plan(sharding_plan, file=file, data_types={
            **{t: "FP16" for t in inputs.fp16_tables}, **{t: "BF16" for t in inputs.bf16_tables}})
        defaulted = _default_load_factors(doc)  # here: TorchRec's default needs torchrec, which the parent lacks
        return doc, defaulted, proposals, version, time.perf_counter() - c0

    limit = deadline_s if deadline_s is not None else time_limit_s + WATCHDOG_GRACE_S
    watch = _Watch(run, limit)
    return PlannerRun(model=model, inputs=inputs, time_limit_s=time_limit_s, watch=watch,
                      setup_s=time.perf_counter() - t0)


def collect(run: PlannerRun) -> TorchRecResult:
    """Wait (until its deadline at most) for a started planner and import its plan: placements in workload
    order, checked against placer's memory model and priced. TorchRecUnavailable when torchrec does not import
    in the child; TorchRecPlannerError when TorchRec fails, runs out of time, or its plan cannot be used."""
    # PlannerError (nothing fits its estimate), any TorchRec failure or the deadline: TorchRecPlannerError
    doc, defaulted, proposals, version, planner_s = run.watch.wait()
    t0 = time.perf_counter()
    from placer.plan_price import priced_plan
    from placer.torchrec_io.importer import plan_from_document

    topo, wl, inputs = run.model.topo, run.model.wl, run.inputs
    file = "<TorchRec planner>"
    if defaulted:
        ratio = doc["tables"][defaulted[0]]["parameter_sharding"]["cache_params"]["load_factor"]
        inputs.notes.append(f"fused_uvm_caching without a load factor ({', '.join(defaulted[:5])}"
                            f"{', ...' if len(defaulted) > 5 else ''}): TorchRec's default "
                            f"{ratio:g} (its planner's estimate and fbgemm's cache_load_factor)")
    try:
        plan = plan_from_document(doc, topo, wl, file=file, method="torchrec")
    except SpecError as exc:
        raise TorchRecPlannerError(f"placer cannot read its plan ({exc})") from None
    by_table = {p.table: p for p in plan.placements}
    missing = [t.name for t in wl.tables if t.name not in by_table]
    if missing:
        raise TorchRecPlannerError(f"its plan leaves out tables {', '.join(missing[:5])}")
    placements = [by_table[t.name] for t in wl.tables]
    _refuse_broken_constraints(run.model, placements)
    try:
        predicted = priced_plan(Plan(hardware=SpecRef(name=topo.spec.name), workload=SpecRef(name=wl.name),
                                     method="torchrec", placements=placements), topo, wl, file=file,
                                check_hashes=False)
    except (SpecError, InfeasibleError) as exc:
        raise TorchRecPlannerError(f"its plan does not fit placer's model of this machine ({exc})") from None
    return TorchRecResult(placements=placements, wall_s=run.setup_s + planner_s + time.perf_counter() - t0,
                          num_proposals=proposals, version=version, inputs=inputs, planner_s=planner_s,
                          predicted=predicted)


def _refuse_broken_constraints(model: CostModel, placements: list[Placement]) -> None:
    """TorchRecPlannerError where TorchRec's plan breaks a workload constraint (one its ParameterConstraints
    cannot say: devices, co-location, shard counts, precisions, host): placer check would refuse the plan."""
    faults = model.rules.plan_faults(placements)
    if faults:
        shown = "; ".join(why for _, why in faults[:3]) + (f"; and {len(faults) - 3} more" if len(faults) > 3 else "")
        raise TorchRecPlannerError(f"its plan breaks the workload's constraints ({shown}): TorchRec's "
                                   "ParameterConstraints cannot say them, and placer check would refuse the plan")


def torchrec_plan(model: CostModel, time_limit_s: float = 60.0) -> TorchRecResult:
    """Run TorchRec's planner for ``model``'s machine and workload and import its plan (``start`` then
    ``collect``). TorchRecUnavailable without torchrec; TorchRecPlannerError when TorchRec fails or its plan
    cannot be used."""
    return collect(start(model, time_limit_s))


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
             (f"hbm_cap {t['hbm_cap'] / gib:.1f} GiB, ddr_cap {t['ddr_cap'] / gib:.1f} GiB per rank"
              if "hbm_cap" in t else "TorchRec's default capacities"),
             f"{result.num_proposals} proposals rated" if result.num_proposals is not None else ""]
    return "; ".join(p for p in parts + result.inputs.notes if p)
