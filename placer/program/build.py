"""Placements -> the ops and buffers they add to a training step (see ops.py for the vocabulary).

Per shard of a table (global batch B, W GPUs, b = B / W samples per GPU, F features of the table, width c,
element bytes e, pooling giving L lookups of which U distinct rows):

- a GPU shard is one member of its device's ``hbm`` group (all rows in device memory), one of its ``uvm``
  group (all rows in host memory read by the GPU), or a split: its hottest rows a member of the hbm group
  and the rest of the uvm group. Lookups go where the rows are (the hot part takes coverage(k/n) of them; the
  remap of ids to hot and cold slots is done in the input step, as in FAE, so neither part reads the other's
  rows). Each part pools all F*B bags; a split adds its parts (one add on the device);
- a host shard is a member of its host's ``cpu`` group (CPU lookup); its pooled output is copied to every GPU
  (H2D) and its gradient back (D2H); not on a unified-memory node, where host memory is the device's RAM;
- a data-parallel replica is a member of its GPU's ``replica`` group, pooling its own b samples; its backward
  scatters into a dense gradient of the table, all-reduced over the GPUs, then streamed through the update.

A group's ops: forward ``lookup``; backward ``pack_grad`` (its members' pooled gradients into one buffer),
``sort`` (row ids with their positions), ``segment_reduce`` (gradient rows expanded per lookup and summed per
distinct row) and ``update`` of the distinct rows (replicas: ``scatter`` and ``update_dense``, and an
``all_reduce`` between them). Each op's fixed cost is charged once per group (``Op.once``); members add work.

With W > 1 GPUs each shard's output travels to the sample owners (all_to_all: the shard's stream packs it and
then waits for its bytes to cross its busiest link, the links carry every shard's bytes (shared), owners combine
a table's shards over their b samples), and back in the backward.
"""
from __future__ import annotations

from dataclasses import dataclass

from placer.forms.shardings import sharding_of
from placer.plan import Placement, Shard
from placer.node_local import one_replica
from placer.program import compressed_ops as cops
from placer.program import node_local_ops as nlo
from placer.program import issue
from placer.program import tt_ops
from placer.program.locations import reads_across_links, rows_memory, rows_source, tier_location
from placer.program.dense import CAST_OP, DenseTrace, dense_step_s, is_traced, trace
from placer.program.ops import (AR, BWD, BX, DENSE, EVERY_GPU, FWD, FX, HOST_ISSUE, INDEX_BYTES, POOLED_BYTES,
                                STATE_BYTES, GroupKey, Member, Op)
from placer.specs.workload import Workload
from placer.topology import Topology
from placer.units import element_bytes


@dataclass(frozen=True)
class Buffer:
    """Bytes a placement (or the dense model) keeps in one memory during the step, and what for (memory
    EVERY_GPU: the same bytes in every GPU's memory)."""

    memory: str
    purpose: str
    bytes: float


class ProgramBuilder:
    """Builds the ops and buffers of placements on one machine for one workload. Pure: caches only."""

    def __init__(self, topology: Topology, workload: Workload, include_exchange: bool = True,
                 cpu_reads_host: bool = False):
        """``include_exchange=False`` leaves out the links' load of the all-to-all (callers that price it
        themselves from ``exchange_bytes_per_gpu``: planner/kinds.py); the streams' work stays in.
        ``cpu_reads_host``: the GPUs cannot read host memory (the runner's ``cpu_gather_copy``): rows a plan
        puts in host memory for a GPU (uvm) are looked up by the host's CPU and their pooled outputs copied, as
        a host shard's are; what runs then is priced, not the zero-copy reads the plan assumed."""
        self.topo = topology
        self.cpu_reads_host = cpu_reads_host
        self.wl = workload
        self.include_exchange = include_exchange
        self.traffic = topology.traffic
        self.gpus = topology.gpus
        self.W = len(self.gpus)
        self.gpu_streams = [topology.stream_of(g) for g in self.gpus]
        self.gpu_memories = [topology.memory_of(g) for g in self.gpus]
        # the sample owners' share of exchanges: one op on EVERY_GPU when the GPUs are alike, else one per GPU
        self.alike = len({id(topology.template_of[g]) for g in self.gpus}) == 1
        self.B = workload.batch_size
        self.samples_per_gpu = self.B / self.W
        self.tables = {t.name: t for t in workload.tables}
        self.optimizer = workload.optimizer.name  # the embedding rows' (their state, updates)
        self.dense_optimizer = workload.resolved_dense_optimizer.name  # the dense model's (its state, update)
        self.state_factor = workload.optimizer_state_factor
        self.lookups_per_sample = {t.name: workload.lookups_per_sample(t.name) for t in workload.tables}
        self.features = {t.name: workload.outputs_per_sample(t.name) for t in workload.tables}
        self.frozen = {t.name for t in workload.tables if t.frozen}  # read, never updated: no backward
        self._access: dict[tuple, object] = {}
        self._fixed_cache: dict[GroupKey, list[Op]] = {}
        self._exchange_units: dict[tuple[str, bool, bool], tuple[tuple[tuple[str, float], ...], float]] = {}
        self._dense_traces: dict[str, DenseTrace] = {}  # device type -> the traced dense step

    # ---- sizes ---------------------------------------------------------------------------------------------

    def lookups_per_step(self, table: str) -> float:
        return self.B * self.lookups_per_sample[table]

    def state_bytes(self, table: str, cols: int) -> float:
        """Optimizer state bytes per row of ``cols`` columns (fp32); none for a frozen table."""
        return 0.0 if table in self.frozen else self.state_factor[table] * cols * STATE_BYTES

    def exchange_bytes_per_gpu(self, table: str, cols: int) -> float:
        """Bytes of pooled embeddings (``cols`` wide) a shard sends to each GPU per step, and gets back as
        gradients: the GPU's samples x the table's features x cols x 4."""
        return self.samples_per_gpu * self.features[table] * cols * POOLED_BYTES

    def coverage(self, table: str, hot_frac: float) -> float:
        key = ("coverage", table, hot_frac)
        if key not in self._access:
            self._access[key] = float(self.wl.access_models[table].coverage(hot_frac))
        return self._access[key]

    def unique_split(self, table: str, lookups: float, hot_frac: float) -> tuple[float, float]:
        """Distinct rows (hot, cold) touched by ``lookups`` draws from the table, split at ``hot_frac``."""
        key = ("unique", table, lookups, hot_frac)
        if key not in self._access:
            self._access[key] = self.wl.access_models[table].unique_rows_split(lookups, hot_frac)
        return self._access[key]

    # ---- members -------------------------------------------------------------------------------------------

    def members(self, p: Placement) -> list[tuple[GroupKey, Member]]:
        """Every (group, member) a placement puts on the machine, in shard order."""
        out = []
        t = self.tables[p.table]
        F = self.features[p.table]
        if p.compression is not None:
            return self._compressed_members(p)
        B = nlo.batch_of(self.topo, self.B, p)  # a node-local replica serves its node's samples only
        step_lookups, form = self.lookups_per_sample[p.table] * B, sharding_of(p)
        for i, s in enumerate(p.shards):
            n, c = s.num_rows, s.num_cols
            cols = (s.cols[0], s.cols[1])
            ids = (s.rows[0], s.rows[1])
            if form.whole_copies:
                lookups = self.lookups_per_sample[p.table] * self.samples_per_gpu
                hot, cold = self.unique_split(p.table, lookups, 1.0)
                bags = round(F * self.samples_per_gpu)
                out.append((self._key(s.device, "replica", p, c),
                            Member(p.table, i, "all", n, cols, bags, lookups, hot + cold, ids)))
                continue
            share = n / t.rows
            lookups = step_lookups * share
            bags = F * B
            if not form.on_gpus:
                hot, cold = self.unique_split(p.table, self.lookups_per_step(p.table), 1.0)
                out.append((self._key(s.device, "cpu", p, c),
                            Member(p.table, i, "all", n, cols, bags, lookups, (hot + cold) * share, ids)))
                continue
            k = s.hbm_rows
            frac = k / n
            u_hot, u_cold = self.unique_split(p.table, step_lookups, frac)
            if k == n or k == 0:
                out.append((self._key(s.device, "hbm", p, c) if k == n else self._host_rows_key(s, p, c),
                            Member(p.table, i, "all", n, cols, bags, lookups, (u_hot + u_cold) * share, ids)))
                continue
            hit = self.coverage(p.table, frac)
            out.append((self._key(s.device, "hbm", p, c),
                        Member(p.table, i, "hot", k, cols, bags, lookups * hit, u_hot * share, ids)))
            out.append((self._host_rows_key(s, p, c),
                        Member(p.table, i, "cold", n - k, cols, bags, lookups * (1 - hit), u_cold * share, ids)))
        return out

    def _key(self, device: str, location: str, p: Placement, c: int) -> GroupKey:
        """The group of a placement's member: its location, storage dtype, width and form (compressed_ops)."""
        return GroupKey(device, location, cops.storage_dtype(p), c, cops.form_of(p, p.table in self.frozen))

    def _compressed_members(self, p: Placement) -> list[tuple[GroupKey, Member]]:
        """A compressed placement's members (one GPU, every row in HBM): QR's two sub-tables, or int8 rows."""
        s, t = p.shards[0], self.tables[p.table]
        key = self._key(s.device, "hbm", p, s.num_cols)
        lookups = self.lookups_per_step(p.table)
        hot, cold = self.unique_split(p.table, lookups, 1.0)
        bags = self.features[p.table] * self.B
        if p.compression.qr is not None:
            return cops.qr_members(p, key, t.rows, bags, lookups, hot + cold)
        if p.compression.tt is not None:
            return tt_ops.tt_member(p, key, t.rows, bags, lookups, hot + cold)
        return [(key, Member(p.table, 0, "all", s.num_rows, s.cols, bags, lookups, hot + cold, s.rows))]

    def _host_rows_key(self, s: Shard, p: Placement, c: int) -> GroupKey:
        """The group of a GPU shard's rows in host memory: the GPU's uvm group (zero-copy reads), or, where the
        GPU cannot read host memory (``cpu_reads_host``), its host's cpu group."""
        if s.cold_memory is not None:  # a memory tier of the node (program/locations.py)
            return self._key(s.device, tier_location(s.cold_memory), p, c)
        if self.cpu_reads_host and not self.topo.is_unified(s.device):
            return self._key(self.topo.host_of(s.device), "cpu", p, c)
        return self._key(s.device, "uvm", p, c)

    # ---- ops -----------------------------------------------------------------------------------------------

    def stream(self, device: str) -> str:
        return self.topo.stream_of(device)

    def on_every_gpu(self, kind: str, phase: int, price, **kw) -> list[Op]:
        """The same op on every GPU's stream: ``price(op_costs)`` seconds each."""
        if self.alike:
            return [Op(kind, phase, EVERY_GPU, price(self.topo.op_costs(self.gpus[0])), **kw)]
        return [Op(kind, phase, st, price(self.topo.op_costs(g)), **kw) for g, st in zip(self.gpus, self.gpu_streams)]

    def expand(self, stream: str) -> list[str]:
        """The streams (or memories) an op's stream (a buffer's memory) stands for."""
        return self.gpu_streams if stream == EVERY_GPU else [stream]

    def group_fixed_ops(self, key: GroupKey) -> list[Op]:
        """The fixed cost of every op of a group: charged once per plan, however many members it has (the
        same list for every member; callers do not change it)."""
        cache = self._fixed_cache
        if key not in cache:
            if key.qr or key.form == cops.INT8:
                cache[key] = cops.fixed_ops(key, self.topo.op_costs(key.device), self.stream(key.device),
                                            self.optimizer)
            elif key.tt:
                cache[key] = tt_ops.fixed_ops(key, self.topo.op_costs(key.device), self.stream(key.device),
                                              self.optimizer)
            else:
                cache[key] = _forward_only(self._group_fixed_ops(key), key.trained)
        return cache[key]

    def _group_fixed_ops(self, key: GroupKey) -> list[Op]:
        dev = key.device
        costs = self.topo.op_costs(dev)
        st = self.stream(dev)
        # + what its ATen ops cost the host in a step beyond calibrate's tight loop (program/issue.py; 0 on a CPU)
        mk = lambda kind, phase, cost_kind, stream=st: Op(kind, phase, stream, costs.fixed(cost_kind) + issue.issue_s(
            costs, kind, self.optimizer), group=key, once=True)
        ops = [mk("lookup", FWD, "lookup"), mk("sort", BWD, "sort"), mk("segment_reduce", BWD, "segment_reduce")]
        copies = key.location == "cpu" and not self.topo.is_unified(dev)
        if not copies:
            ops.append(mk("pack_grad", BX, "copy"))
        if key.location == "replica":
            ops += [mk("scatter", BWD, "elementwise"), mk("update_dense", BWD, "elementwise")]
            if self.W > 1:  # one all-reduce of the group's fused gradient
                ops.append(mk("all_reduce", AR, "collective"))
        else:
            ops.append(mk("update", BWD, f"update_{self.optimizer}"))
        if copies:  # pooled outputs copied to every GPU; there the gradients are packed and copied back
            for kind, phase in (("copy_h2d", FX), ("pack_grad", BX), ("copy_d2h", BX)):
                ops += self.on_every_gpu(kind, phase, lambda gc: gc.fixed("copy"), group=key, once=True)
        return ops

    def member_ops(self, key: GroupKey, m: Member) -> list[Op]:
        """A member's work in its group's ops (variable seconds; the fixed parts are group_fixed_ops); a frozen
        table's forward only."""
        if key.qr:
            c = m.cols[1] - m.cols[0]
            return cops.qr_member_ops(key, m, self.topo.op_costs(key.device), self.stream(key.device), self.optimizer,
                                      self.state_bytes(m.table, c))
        if key.tt:
            return tt_ops.member_ops(key, m, tt_ops.table_shape(self.tables[m.table]), self.topo.op_costs(key.device),
                                     self.stream(key.device), self.optimizer)
        if key.form == cops.INT8:
            return cops.int8_member_ops(key, m, self.topo.op_costs(key.device), self.stream(key.device))
        return _forward_only(self._member_ops(key, m), key.trained)

    def _member_ops(self, key: GroupKey, m: Member) -> list[Op]:
        dev, c = key.device, m.cols[1] - m.cols[0]
        costs = self.topo.read_costs(dev, rows_memory(self.topo, key))  # a tier's reads at its path's rate
        st = self.stream(dev)
        row_bytes = c * element_bytes(key.dtype)
        state = self.state_bytes(m.table, c)
        grad_row = c * POOLED_BYTES
        out_bytes = m.bags * grad_row
        host = reads_across_links(self.topo, key)
        copies = key.location == "cpu" and not self.topo.is_unified(dev)
        ops = [Op("lookup", FWD, st, costs.lookup_s(key.dtype, row_bytes, m.lookups, m.unique_rows, out_bytes, host),
                  key, m.table, traffic=self._row_traffic(key, m.lookups * row_bytes),
                  sizes={"lookups": m.lookups, "unique_rows": m.unique_rows, "row_bytes": row_bytes,
                         "bags": m.bags}),
               Op("sort", BWD, st, costs.sort_s(m.lookups), key, m.table, sizes={"ids": m.lookups}),
               Op("segment_reduce", BWD, st, costs.segment_reduce_s(grad_row, m.lookups), key, m.table,
                  sizes={"lookups": m.lookups, "row_bytes": grad_row})]
        if key.location == "replica":
            grad = m.rows * grad_row
            ops += [Op("scatter", BWD, st, costs.stream_s(grad + 2 * m.unique_rows * grad_row), key, m.table,
                       sizes={"bytes": grad}),
                    Op("update_dense", BWD, st, costs.stream_s(m.rows * (2 * row_bytes + 2 * state + grad_row)),
                       key, m.table, sizes={"rows": m.rows})]
        else:
            rmw = row_bytes + state
            update_s = costs.update_s(self.optimizer, key.dtype, rmw, m.unique_rows, host, width=c)
            ops.append(Op("update", BWD, st, update_s, key, m.table,
                          traffic=self._row_traffic(key, m.unique_rows * rmw, both_ways=True),
                          sizes={"rows": m.unique_rows, "row_bytes": rmw}))
        if copies:
            ops += self._host_output_copies(key, m)
        else:
            ops.append(Op("pack_grad", BX, st, costs.stream_s(2 * out_bytes), key, m.table, sizes={"bytes": out_bytes}))
        return ops

    def _row_traffic(self, key: GroupKey, n_bytes: float, both_ways: bool = False) -> tuple[tuple[str, float], ...]:
        """Shared-resource load of rows read (and written back) in another memory than the device's: that memory's
        bandwidth (a host's DRAM, a tier's), and the links to the GPU where it reads them across links."""
        host = rows_source(self.topo, key)
        if host is None or n_bytes <= 0:
            return ()
        ways = 2 if both_ways else 1
        out = [(f"{host}:dram", ways * n_bytes / self.traffic.rate(f"{host}:dram"))]
        if reads_across_links(self.topo, key):
            out += self.traffic.send(host, key.device, n_bytes)
            if both_ways:
                out += self.traffic.send(key.device, host, n_bytes)
        return tuple(out)

    def _host_output_copies(self, key: GroupKey, m: Member) -> list[Op]:
        """A CPU-looked-up member's pooled output to every GPU (its samples' share), and its gradient packed on
        the GPUs and copied back."""
        c = m.cols[1] - m.cols[0]
        per_gpu = self.exchange_bytes_per_gpu(m.table, c)
        ops, host = [], key.device
        if self.W == 1:  # packed on the GPU, then copied back (with more GPUs: the owners' share, in the base)
            g = self.gpus[0]
            ops.append(Op("pack_grad", BX, self.stream(g), self.topo.op_costs(g).stream_s(2 * per_gpu), key, m.table,
                          sizes={"bytes": per_gpu}))
        # The links' load of all the copies, summed over the GPUs from the cached one-byte scatter (and gather):
        # carried by the first GPU's copy ops (only the sums matter: cost_of adds traffic per phase and link).
        there = tuple(self.traffic.exchange(host, per_gpu, True)) if self.include_exchange else ()
        back = tuple(self.traffic.exchange(host, per_gpu, False)) if self.include_exchange else ()
        for i, g in enumerate(self.gpus):
            seconds = per_gpu / self.traffic.path_Bps(host, g)
            ops.append(Op("copy_h2d", FX, self.stream(g), seconds, key, m.table, traffic=there if i == 0 else (),
                          sizes={"bytes": per_gpu}))
            ops.append(Op("copy_d2h", BX, self.stream(g), seconds, key, m.table, traffic=back if i == 0 else (),
                          sizes={"bytes": per_gpu}))
        return ops

    def placement_ops(self, p: Placement) -> list[Op]:
        """Every op a placement adds: its shards' ops (shard_ops), the all-reduce of a replicated table's
        gradients, and the sample owners' ops for the table as a whole (table_ops)."""
        return self.shard_ops(p) + self.replica_allreduce_ops(p) + self.table_ops(p)

    def shard_ops(self, p: Placement) -> list[Op]:
        """The ops each shard adds on its own: its members' work, the fixed costs of the groups it uses
        (``once``), a split's add and the shard's part of the all-to-all (W > 1). A placement over all GPUs
        adds its shards' ops once per shard (the two-stage planner prices one shard and repeats it)."""
        ops: list[Op] = []
        for key, m in self.members(p):
            ops += self.group_fixed_ops(key)
            ops += self.member_ops(key, m)
        F, B = self.features[p.table], nlo.batch_of(self.topo, self.B, p)
        for s in p.shards:
            if sharding_of(p).pooled_exchange and s.is_split:
                costs, st = self.topo.op_costs(s.device), self.stream(s.device)
                out = F * B * s.num_cols * POOLED_BYTES
                ops.append(Op("combine", FWD, st, costs.fixed("elementwise") + costs.stream_s(3 * out), table=p.table,
                              sizes={"bytes": out, "parts": 2}))
            sender = self.topo.exchange_sender(s.device)
            if self.W > 1 and (sharding_of(p).pooled_exchange or sender != s.device):
                # a GPU shard's all-to-all, or a unified node's host table's: sent by the node's first GPU's rank
                ex = self._gpu_shard_exchange(p.table, s.model_copy(update={"device": sender}), B, p.node_local)
                ops += _forward_only(ex, p.table not in self.frozen)
        return ops

    def replica_allreduce_ops(self, p: Placement) -> list[Op]:
        """A replicated table's gradients, all-reduced over its replicas (links only)."""
        if not sharding_of(p).whole_copies or len(p.shards) < 2 or p.table in self.frozen:
            return []
        devices = tuple(s.device for s in p.shards)
        grad = self.tables[p.table].rows * self.tables[p.table].dim * POOLED_BYTES
        return [Op("all_reduce", AR, self.stream(devices[0]), 0.0, table=p.table,
                   traffic=tuple(self.traffic.allreduce(devices, grad)), sizes={"bytes": grad})]

    def table_ops(self, p: Placement) -> list[Op]:
        """What the sample owners do for the table as a whole, on every GPU: assemble it from its shards'
        outputs, and pack the extra copies of its gradients a sharding sends back (owner_share). They depend
        on the number of shards and their tiling only (a node-local table's: one node's replica)."""
        p = one_replica(p, len(self.topo.nodes))
        return (self._combine_on_owners(p, self.features[p.table], self.tables[p.table].dim)
                + self._owner_ops(p))

    def _gpu_shard_exchange(self, table: str, s: Shard, batch: int, node_local: bool = False) -> list[Op]:
        """The all-to-all of one GPU shard serving ``batch`` samples: it packs its whole output (and unpacks its
        gradient), then its bytes cross its busiest link (the pack and the transfer run one after the other:
        both on its stream), and the links carry the bytes (shared: contention between GPUs; the owners' share
        is owner_share: in the base, with corrections per option); a node-local replica's shard with the GPUs of
        its node only (node_local_ops.node_exchange)."""
        c = s.num_cols
        full = self.features[table] * batch * c * POOLED_BYTES
        per_gpu = self.exchange_bytes_per_gpu(table, c)
        costs, st = self.topo.op_costs(s.device), self.stream(s.device)

        ops = []
        for phase, outgoing in ((FX, True), (BX, False)):
            unit, busiest = self._exchange_unit(s.device, outgoing, node_local)
            own_transfer = per_gpu * busiest
            traffic = tuple((link, per_gpu * spb) for link, spb in unit) if self.include_exchange else ()
            sizes = {"bytes": full, "node_local": True} if node_local else {"bytes": full}
            ops.append(Op("all_to_all", phase, st, costs.stream_s(2 * full) + own_transfer, table=table,
                          traffic=traffic, sizes=sizes))
        return ops

    def _exchange_unit(self, device: str, outgoing: bool, node_local: bool
                       ) -> tuple[tuple[tuple[str, float], ...], float]:
        """(link, seconds per byte) of one byte per GPU from ``device`` to every GPU (outgoing; or back), a
        node-local shard's within its node, and the busiest link's seconds per byte; cached per device (the max
        over a 128-GPU exchange's links was 22% of folding production-856's option kinds on 16 nodes)."""
        key = (device, outgoing, node_local)
        found = self._exchange_units.get(key)
        if found is None:
            unit = tuple(nlo.node_exchange(self.traffic, self.topo, device, 1.0, outgoing) if node_local
                         else self.traffic.unit_exchange(device, outgoing))
            found = self._exchange_units[key] = (unit, max((spb for _, spb in unit), default=0.0))
        return found

    def owner_share(self, p: Placement) -> float:
        """How many full-width copies of the table's pooled gradients every sample owner packs for the
        reverse all-to-all (W > 1) beyond the one the base prices for every table: a row-wise table's S
        shards each take one back (S - 1 more), a replica none (-1: it is not exchanged), a frozen table none (-1:
        no gradient goes back)."""
        if self.W == 1:
            return 0.0
        if sharding_of(p).whole_copies or p.table in self.frozen:
            return -1.0
        if not sharding_of(p).on_gpus:
            return 0.0
        d = self.tables[p.table].dim
        return sum(s.num_cols for s in p.shards) / d - 1.0

    def _owner_ops(self, p: Placement) -> list[Op]:
        extra = self.owner_share(p)
        if not extra:
            return []
        per_gpu = self.exchange_bytes_per_gpu(p.table, self.tables[p.table].dim)
        return self.on_every_gpu("all_to_all", BX, lambda gc: gc.stream_s(2 * per_gpu) * extra, table=p.table,
                                 sizes={"bytes": per_gpu * extra})

    def _combine_on_owners(self, p: Placement, F: int, d: int) -> list[Op]:
        """Each sample owner assembles the table from its shards' outputs: partial sums of row-wise shards
        added, column-wise pieces concatenated (a general tiling: pieces padded to full width, then added)."""
        if sharding_of(p).whole_copies or len(p.shards) == 1:
            return []
        cols, S = {s.cols for s in p.shards}, len(p.shards)
        per_owner = self.samples_per_gpu * F * d * POOLED_BYTES
        if len(cols) == 1:
            n_ops, touched = S - 1, 3 * (S - 1) * per_owner
        elif all(s.rows == (0, self.tables[p.table].rows) for s in p.shards):
            n_ops, touched = 1, 2 * per_owner
        else:
            n_ops, touched = 2 * S - 1, 2 * S * per_owner + 3 * (S - 1) * per_owner
        return self.on_every_gpu("combine", FX, lambda gc: n_ops * gc.fixed("elementwise") + gc.stream_s(touched),
                                 table=p.table, sizes={"bytes": per_owner, "parts": S})

    # ---- what no placement changes -------------------------------------------------------------------------

    def dense_samples(self) -> int:
        return max(1, round(self.samples_per_gpu))

    def base_ops(self) -> list[Op]:
        """The dense model's ops on every GPU (traced, program/dense.py), the embeddings handed to it (a view
        per feature); with W > 1 the all-to-all's collectives, every owner packing its samples' share of every
        table's pooled gradients (placements change that only by owner_share), and the dense gradient's
        all-reduce."""
        ops: list[Op] = []
        F = self.wl.num_pooled_features
        devices = [(EVERY_GPU, self.gpus[0])] if self.alike else [(self.stream(g), g) for g in self.gpus]
        params = self.dense_trace(self.gpus[0]).params
        per_owner = sum(self.exchange_bytes_per_gpu(t, self.tables[t].dim) for t in self.tables)
        for st, g in devices:
            costs = self.topo.op_costs(g)
            ops.append(Op("elementwise", FX, st, 2 * F * costs.fixed("view"), sizes={"views": 2 * F}))
            ops += self._dense_ops(st, g, costs)
            if self.W > 1:
                ops += [Op("all_to_all", FX, st, costs.fixed("collective")),
                        Op("all_to_all", BX, st, costs.fixed("collective") + costs.stream_s(2 * per_owner),
                           sizes={"bytes": per_owner}),
                        Op("all_reduce", AR, st, costs.fixed("collective") + costs.fixed("all_reduce"),
                           sizes={"bytes": params * 4})]
        if self.W > 1:
            ops.append(Op("all_reduce", AR, self.stream(self.gpus[0]), 0.0,
                          traffic=tuple(self.traffic.allreduce(tuple(self.gpus), params * 4))))
        return ops

    def dense_device_types(self) -> list[str]:
        """The device types the dense step runs on ("cuda" for a GPU, "cpu" for a unified-memory node's ranks)."""
        return sorted({"cpu" if self.topo.is_unified(g) else "cuda" for g in self.gpus})

    def dense_traced(self) -> bool:
        """Whether every dense trace this builder needs is at hand without tracing (program/dense.py is_traced)."""
        return all(is_traced(self.wl, self.dense_samples(), d) for d in self.dense_device_types())

    def dense_trace(self, gpu: str) -> DenseTrace:
        """The dense step as ``gpu``'s device type runs it (traced once per builder and device type: the
        trace's cache key is the whole workload's JSON, milliseconds to make on a thousand tables)."""
        device_type = "cpu" if self.topo.is_unified(gpu) else "cuda"
        if device_type not in self._dense_traces:
            self._dense_traces[device_type] = trace(self.wl, self.dense_samples(), device_type)
        return self._dense_traces[device_type]

    def _dense_ops(self, stream: str, gpu: str, costs) -> list[Op]:
        """The traced dense step, priced: each op its kind's cost plus ``dense_op`` (what an op costs beyond
        that under autograd and module calls; on a GPU the host issues while the device works, and the step lasts
        the longer of the two), a share of its streaming traffic at the warm rates, as much as
        the caches hold of the step's memory (OpCosts.warm), the rest cold; ops over transposed views and
        indexing ops at their own (cold) rates."""
        dtype = self.wl.dense.dtype
        extra = costs.fixed("dense_op")
        dense = self.dense_trace(gpu)
        warm = costs.warm(dense.memory_bytes(self.dense_optimizer))  # share of its traffic served by the caches
        parts = []  # (kind, seconds the host issues it, seconds of its work, sizes)
        for op in dense.ops:
            if op.kind == "gemm":
                batch, m, k, n = op.shape
                parts.append(("gemm", extra + costs.fixed("gemm"), costs.gemm_s(dtype, m, k, n, batch, op.layout, warm),
                              {"shape": op.shape, "layout": op.layout, "aten": op.name}))
            elif op.kind == "view":
                parts.append(("elementwise", extra + costs.fixed("view"), 0.0, {"aten": op.name}))
            else:
                moved = {"strided": costs.strided_s, "indexed": costs.indexed_s}.get(
                    op.access, lambda b: costs.stream_s(b, warm))(op.bytes)
                parts.append(("elementwise", extra + costs.fixed("elementwise"), moved,
                              {"bytes": op.bytes, "aten": op.name, "access": op.access, "warm": warm}))
        if self.topo.is_unified(gpu):  # a CPU issues and works, one after the other
            return [Op(kind, DENSE, stream, issue + work, sizes=z) for kind, issue, work, z in parts]
        # a GPU works while its host issues the next ops (dense_step_s): each op is priced at its work, and what
        # the host's issuing adds beyond the work is one more op, of its own kind (HOST_ISSUE: the device waits)
        ops = [Op(kind, DENSE, stream, work, sizes=z) for kind, _, work, z in parts]
        issue_s, work_s = sum(p[1] for p in parts), sum(p[2] for p in parts)
        casts = sum(op.name == CAST_OP for op in dense.ops)
        ops.append(Op(HOST_ISSUE, DENSE, stream, dense_step_s(issue_s, work_s, asynchronous=True) - work_s,
                      sizes={"aten": "the host issuing the step's ops (the device waits)", "issue_s": issue_s,
                             "work_s": work_s, "ops": len(parts), "casts": casts}))
        return ops

    # ---- memory --------------------------------------------------------------------------------------------

    def placement_buffers(self, p: Placement) -> list[Buffer]:
        """shard_buffers and table_buffers: what the placement keeps in memory during a step."""
        return self.shard_buffers(p) + self.table_buffers(p)

    def shard_buffers(self, p: Placement) -> list[Buffer]:
        """What a placement's shards keep in memory during a step: rows and optimizer state where they live, pooled
        outputs and their gradients, the backward's per-lookup gradient rows and sort keys, a replica's dense
        gradient, a split's slot map (host memory: the input step remaps ids), the step's input ids, and the
        all-to-all's buffers (W > 1). Summed, they bound the live set: groups run one after another, so at
        most one group's backward workspace is live at a time, and the sum counts all of them."""
        out: list[Buffer] = []
        mem = self.topo.memory_of
        ways = 2 if p.table not in self.frozen else 1  # pooled outputs, and their gradients where trained
        for key, m in self.members(p):
            if key.tt:  # the cores and their workspace (program/tt_ops.py)
                out += tt_ops.buffers(m, tt_ops.table_shape(self.tables[m.table]), self.optimizer, mem(key.device),
                                      Buffer)
                continue
            c = m.cols[1] - m.cols[0]
            row_bytes = cops.row_bytes(key, c) + self.state_bytes(m.table, c)
            rows_in, runs_in = rows_memory(self.topo, key), mem(key.device)
            out.append(Buffer(rows_in, "rows and optimizer state", m.rows * row_bytes))
            out.append(Buffer(runs_in, "pooled outputs and gradients", ways * m.bags * c * POOLED_BYTES))
            if key.trained:
                out.append(Buffer(runs_in, "backward workspace", m.lookups * (c * POOLED_BYTES + 2 * INDEX_BYTES)))
            out.append(Buffer(runs_in, "input ids", m.lookups * 2 * INDEX_BYTES))
            if key.location == "replica" and key.trained:
                out.append(Buffer(runs_in, "dense gradient", m.rows * c * POOLED_BYTES))
            if m.part == "hot":
                slots = m.local_ids[1] - m.local_ids[0]
                out.append(Buffer(mem(self.topo.host_of(key.device)), "slot map", slots * 4))
            if key.location == "cpu" and not self.topo.is_unified(key.device):
                out.append(Buffer(EVERY_GPU, "pooled outputs and gradients (copies)",
                                  ways * self.exchange_bytes_per_gpu(m.table, c)))
        if self.W > 1 and sharding_of(p).pooled_exchange:
            F = self.features[p.table]
            B = nlo.batch_of(self.topo, self.B, p)
            for s in p.shards:
                out.append(Buffer(mem(s.device), "all-to-all buffers", ways * F * B * s.num_cols * POOLED_BYTES))
        return out

    def table_buffers(self, p: Placement) -> list[Buffer]:
        """The sample owners' all-to-all buffers for the extra copies a sharding sends back (owner_share)."""
        extra = self.owner_share(one_replica(p, len(self.topo.nodes)))
        if not extra:
            return []
        per_gpu = self.exchange_bytes_per_gpu(p.table, self.tables[p.table].dim)
        return [Buffer(EVERY_GPU, "all-to-all buffers (owners)", 2 * per_gpu * extra)]

    def base_buffers(self) -> list[Buffer]:
        """The dense model on every GPU (weights, gradients, optimizer state, activations); with W > 1 every
        owner's all-to-all buffers for its samples' share of every table (owner_share corrects per option)."""
        out = [Buffer(self.topo.memory_of(g), "dense model", self.dense_trace(g).resident_bytes(self.dense_optimizer))
               for g in self.gpus]
        if self.W > 1:
            per_owner = sum(self.exchange_bytes_per_gpu(t, self.tables[t].dim) for t in self.tables)
            out.append(Buffer(EVERY_GPU, "all-to-all buffers (owners)", 2 * per_owner))
        return out


def _forward_only(ops: list[Op], trained: bool) -> list[Op]:
    """``ops`` as they are for a trained table; a frozen table's forward ones only (no gradient, no update)."""
    return ops if trained else [op for op in ops if op.phase in (FWD, FX)]


def plan_ops(builder: ProgramBuilder, placements: list[Placement]) -> list[Op]:
    """The whole step program of a plan: the placement-free ops, then every placement's, each group's fixed
    costs once (the first placement that uses a group brings them)."""
    ops = list(builder.base_ops())
    seen: set = set()
    for p in placements:
        for op in builder.placement_ops(p):
            if op.once:
                if op.once_key in seen:
                    continue
                seen.add(op.once_key)
            ops.append(op)
    return ops
