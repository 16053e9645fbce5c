"""The step program of a plan as TorchRec's DistributedModelParallel runs it (``--trainer torchrec``).

A step builder of its own beside placer's (build.ProgramBuilder, whose interface it keeps, so that the cost model,
the planner and the reports read it alike). What differs from placer's runner, per rank:

- one TBE per sharding type, compute kernel and storage dtype (GroupKey: location ``hbm`` = ``fused``, ``uvm`` =
  ``fused_uvm``, a hot/cold split = ``fused_uvm_caching`` with the hot rows as its cache, ``replica`` = a
  data-parallel table's dense TBE; width 0: a TBE fuses tables of every width; form ``tbe:<sharding>``): one
  forward call, one fused backward (sort, reduce and optimizer update in one kernel chain), priced by
  tbe_costs.TbeCosts; a caching TBE also keeps its cache (a few kernels) and its misses cross the link;
- the input distribution in the step: every sharded table's ids and lengths sent to the ranks that hold its
  shards (TorchRec's KJTAllToAll: a fixed cost per sharding type and rank, the bytes on the links), a row-wise
  table's ids bucketized first;
- the output distribution as placer's (the pooled embeddings' all-to-all and its reverse for the gradients, the
  row-wise partial sums added and the column-wise pieces joined on the sample owners), the data-parallel
  gradients' all-reduce, and the dense part as placer traces it;
- DMP's own Python per step on every rank (``dmp_step``, where calibrated).

TorchRec cannot run placer's other forms: a table on a host CPU, QR, TT, int8 rows, node-local replicas. A plan
with one is refused (SpecError naming the table); the planner offers none of them under this trainer
(planner/solve.py).
"""
from __future__ import annotations

from placer.errors import SpecError
from placer.forms.shardings import sharding_of
from placer.plan import Placement
from placer.program.build import Buffer, ProgramBuilder
from placer.program.ops import BWD, FWD, INDEX_BYTES, POOLED_BYTES, AR, GroupKey, Member, Op
from placer.program.tbe_costs import TbeCosts, tbe_costs
from placer.units import element_bytes

TRAINER = "torchrec"
LENGTH_BYTES = 4  # a KeyedJaggedTensor's lengths are int32


def not_torchrec_form(p: Placement, frozen: bool = False) -> str | None:
    """Why TorchRec's trainer cannot run placement ``p`` (None when it can)."""
    form = sharding_of(p)
    if not form.on_gpus:
        return "a table looked up by the host CPU is not a TorchRec sharding"
    if p.compression is not None:
        return "compressed rows (QR, TT, int8) are not TorchRec's training kernels"
    if p.node_local:
        return "node-local replicas are not a TorchRec sharding"
    if any(s.cold_memory is not None for s in p.shards):
        return "cold rows in a memory tier (the spec's tiers) have no TorchRec kernel"
    if not form.runs_under_torchrec:
        return f"{p.sharding} is not a TorchRec sharding placer prices"
    return None


class TorchRecProgramBuilder(ProgramBuilder):
    """The ops and buffers of placements as DMP runs them (module docstring)."""

    trainer = TRAINER

    def __init__(self, topology, workload, include_exchange: bool = True, cpu_reads_host: bool = False):
        super().__init__(topology, workload, include_exchange, cpu_reads_host=False)
        self._tbe: dict[str, TbeCosts] = {}

    def tbe(self, device: str) -> TbeCosts:
        if device not in self._tbe:
            self._tbe[device] = tbe_costs(self.topo, device, self.optimizer)
        return self._tbe[device]

    # ---- members: one TBE per (rank, sharding type, compute kernel, dtype) --------------------------------

    def members(self, p: Placement) -> list[tuple[GroupKey, Member]]:
        why = not_torchrec_form(p)
        if why is not None:
            raise SpecError(f"table {p.table!r}: {why}: the torchrec trainer cannot run this plan (plan it with "
                            "--trainer torchrec, or price it with --trainer placer)", field="--trainer")
        out = []
        for key, m in super().members(p):
            caching = m.part in ("hot", "cold")
            location = "replica" if key.location == "replica" else "uvm" if caching else key.location
            form = f"tbe:{p.sharding}" + (":caching" if caching else "")
            out.append((GroupKey(key.device, location, key.dtype, 0, form), m))
        return out

    # ---- ops ------------------------------------------------------------------------------------------------

    def _input_key(self, device: str, sharding: str) -> GroupKey:
        """The pseudo-group whose one op is a sharding type's input distribution on a rank (charged once)."""
        return GroupKey(device, "input", "", 0, f"tbe:{sharding}")

    def _group_fixed_ops(self, key: GroupKey) -> list[Op]:
        dev, st, tbe = key.device, self.stream(key.device), self.tbe(key.device)
        mk = lambda kind, phase, seconds, group=key: Op(kind, phase, st, seconds, group=group, once=True)
        fixed = "dense_" if key.location == "replica" else "tbe_"  # a data-parallel group runs a dense TBE
        ops = [mk("lookup", FWD, tbe.fixed(fixed + "forward")), mk("tbe_backward", BWD, tbe.fixed(fixed + "backward"))]
        sharding = key.form.split(":")[1]
        if key.form.endswith(":caching"):
            ops.append(mk("cache", FWD, tbe.fixed("cache")))
        if key.location == "replica":
            costs = self.topo.op_costs(dev)
            ops.append(mk("update_dense", BWD, costs.fixed("elementwise")))
            if self.W > 1:
                ops.append(mk("all_reduce", AR, costs.fixed("collective")))
        elif self.W > 1:
            ops.append(mk("input_dist", FWD, tbe.fixed("input_dist"), group=self._input_key(dev, sharding)))
        return ops

    def _member_ops(self, key: GroupKey, m: Member) -> list[Op]:
        dev, c = key.device, m.cols[1] - m.cols[0]
        tbe, st = self.tbe(dev), self.stream(dev)
        row_bytes = c * element_bytes(key.dtype)
        rmw = row_bytes + self.state_bytes(m.table, c)
        grad_row = c * POOLED_BYTES
        out_bytes = m.bags * grad_row if m.part != "cold" else 0.0  # a split's two parts pool into one output
        in_host = key.location == "uvm" and m.part != "hot" and not self.topo.is_unified(dev)
        rows_key = key if in_host else GroupKey(dev, "hbm", key.dtype, 0, key.form)  # where _row_traffic looks
        if key.location == "replica":  # a data-parallel table: DMP's dense TBE
            forward = tbe.dense_forward_s(key.dtype, row_bytes, m.lookups, m.unique_rows, out_bytes)
            backward = tbe.dense_backward_s(key.dtype, row_bytes, grad_row, m.lookups, m.bags, m.unique_rows, rmw)
        else:
            forward = tbe.forward_s(key.dtype, row_bytes, m.lookups, m.unique_rows, out_bytes, in_host)
            backward = tbe.backward_s(key.dtype, row_bytes, grad_row, m.lookups, m.unique_rows, rmw, in_host)
        ops = [Op("lookup", FWD, st, forward, key, m.table, traffic=self._row_traffic(rows_key, m.lookups * row_bytes),
                  sizes={"lookups": m.lookups, "unique_rows": m.unique_rows, "row_bytes": row_bytes, "bags": m.bags}),
               Op("tbe_backward", BWD, st, backward, key, m.table,
                  traffic=self._row_traffic(rows_key, m.unique_rows * rmw, both_ways=True),
                  sizes={"lookups": m.lookups, "rows": m.unique_rows, "row_bytes": rmw})]
        if key.location == "replica":
            costs = self.topo.op_costs(dev)
            ops.append(Op("update_dense", BWD, st, costs.stream_s(m.rows * (2 * rmw + grad_row)), key, m.table,
                          sizes={"rows": m.rows}))
        return ops

    def shard_ops(self, p: Placement) -> list[Op]:
        """placer's shard ops (members, the output all-to-all) with the input distribution of every shard's ids:
        the ids and lengths its lookups need, sent to it by the ranks (W > 1; none for data-parallel tables)."""
        ops = [op for op in super().shard_ops(p) if op.kind != "combine"]  # a caching TBE pools both parts at once
        if self.W == 1 or sharding_of(p).whole_copies:
            return ops
        t = self.tables[p.table]
        per_sample = self.lookups_per_sample[p.table]
        for s in p.shards:
            share = s.num_rows / t.rows
            ids_bytes = self.B * per_sample * share * INDEX_BYTES + self.B * self.features[p.table] * LENGTH_BYTES
            costs, st = self.topo.op_costs(s.device), self.stream(s.device)
            seconds = costs.stream_s(2 * ids_bytes)  # unpacked on arrival (the lengths permuted, the ids copied)
            if sharding_of(p).split == "rows":  # every rank bucketizes its ids by the shards' row ranges first
                seconds += costs.stream_s(2 * ids_bytes / max(len(p.shards), 1))
            unit, busiest = self._exchange_unit(s.device, False, False)
            per_gpu = ids_bytes / self.W
            traffic = tuple((link, per_gpu * spb) for link, spb in unit) if self.include_exchange else ()
            ops.append(Op("input_dist", FWD, st, seconds + per_gpu * busiest, table=p.table, traffic=traffic,
                          sizes={"bytes": ids_bytes}))
        return ops

    def base_ops(self) -> list[Op]:
        """placer's placement-free ops and DMP's own cost per step on every rank (tbe_costs: ``dmp_step`` and its
        work on the rank's pooled embeddings)."""
        ops = super().base_ops()
        pooled = self.pooled_bytes_per_rank()
        cost = {g: self.tbe(g).fixed("dmp_step") + self.tbe(g).dmp_pooled_s(pooled) for g in self.gpus}
        if any(cost.values()):
            ops += [Op("dmp_step", FWD, st, cost[g], sizes={"pooled_bytes": pooled})
                    for g, st in zip(self.gpus, self.gpu_streams)]
        return ops

    def pooled_bytes_per_rank(self) -> float:
        """Bytes of the pooled embeddings (fp32) a rank's samples receive per step, every table's features: what
        DMP's own work per pooled byte (``dmp_GBps.pooled``) is fitted on and charged by."""
        return sum(self.exchange_bytes_per_gpu(t, self.tables[t].dim) for t in self.tables)

    def shard_buffers(self, p: Placement) -> list:
        """placer's buffers (a caching TBE's rows all in host memory, as UVM holds the whole table) and the HBM
        cache of its hot rows' weights."""
        out = super().shard_buffers(p)
        for key, m in self.members(p):
            if m.part == "hot":
                c = m.cols[1] - m.cols[0]
                out.append(Buffer(self.topo.memory_of(key.device), "TBE cache", m.rows * c * element_bytes(key.dtype)))
        return out
