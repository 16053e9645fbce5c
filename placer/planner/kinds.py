"""Option kinds: every table's options on the canonical devices (node0/gpu0, node0, ...), their costs folded into
symmetry classes (two_stage.py's stage 1 chooses among them; assign.py's stage 2 relabels them onto devices).

A kind's loads are summed per (phase, resource class) and its peak on one member kept; the loads on the
resources that move with its devices under the symmetry (its GPU, host and rail NIC; a host's node) are kept
by name, for stage 2 to compare devices exactly. The embedding exchange is added from cached per-device
vectors (CostModel.exchange_bytes_per_gpu); options over all GPUs are folded from one shard or replica. A table
that allows ``node_local`` (several nodes) also gets the node-local variants of its canonical intra-node options
(a replica on every node, family LOCAL: moved alike on every node; their exchange stays inside each node).
"""
from __future__ import annotations

import functools
import time

from collections import defaultdict

import numpy as np

from placer.cost import AR, BX, FX, PHASES, Cost
from placer.executor import Background, no_cyclic_gc
from placer.forms import data_parallel, row_wise
from placer.forms.shardings import SHARDINGS, sharding_of
from placer.options import OptionConfig, precisions, table_options
from placer.plan import Placement
from placer.planner.budget import OutOfTime
from placer.planner.context import Context
from placer.planner.symmetry import Symmetry, resource_class
from placer.planner.types import Family, Kind, Kinds
from placer.program.node_local_ops import node_exchange
from placer.program.ops import EVERY_GPU, GroupKey

#: Below this many tables the kinds are folded in one process (a fork costs more than it saves).
PARALLEL_MIN_TABLES = 200

#: Which devices a kind's placement can move to, by sharding: one GPU, one node, a block of GPUs, or none (over all
#: GPUs); each sharding form says which (placer/forms, ShardingForm.family)
FAMILY = {name: Family(f.family) for name, f in SHARDINGS.items()}


def prune_dominated(kinds: list[Kind]) -> list[Kind]:
    """Drop kinds that another kind of the same table beats or ties in every load, peak and memory
    (an optimal plan never needs them; ties keep the first)."""
    if len(kinds) < 2:
        return kinds
    load_keys = sorted({k for kind in kinds for k in kind.totals})
    mem_keys = sorted({k for kind in kinds for k in kind.mem_totals})
    m = np.array([[kind.totals.get(k, 0.0) for k in load_keys] + list(kind.peak)
                  + [kind.mem_totals.get(k, 0.0) for k in mem_keys] for kind in kinds])
    keep = []
    for i in range(len(kinds)):
        le = np.all(m <= m[i] * (1 + 1e-12) + 1e-18, axis=1)  # rows no worse than i anywhere
        lt = np.any(m < m[i] * (1 - 1e-12) - 1e-18, axis=1)  # ... and strictly better somewhere
        dominated = np.any(le & lt) or np.any(le[:i] & ~lt[:i])  # beaten, or tied by an earlier kind
        if not dominated:
            keep.append(kinds[i])
    return keep


def _relabeled(cost: Cost, sym: Symmetry, gpu: str) -> Cost:
    """``cost`` of a shard on the canonical GPU node0/gpu0, moved onto ``gpu`` by the symmetry (loads, fused
    groups' fixed costs and memory under their relabeled names)."""
    name = functools.partial(sym.relabel, sym.gpu_key(gpu))
    out = Cost()
    for (ph, r), v in cost.loads.items():
        out.loads[(ph, name(r))] += v
    for m, b in cost.memory.items():
        out.memory[name(m)] += b
    for g, charges in cost.once.items():
        moved = GroupKey(name(g.device), g.location, g.dtype, g.width, g.form)
        out.once[moved] = {(ph, name(r)): v for (ph, r), v in charges.items()}
    return out


@functools.lru_cache(maxsize=1 << 20)
def _endpoints(name: str) -> frozenset[str]:
    """The devices a resource name joins: 'node0/gpu0->node0/nic0' -> {node0/gpu0, node0/nic0}."""
    return frozenset(name.split(":")[0].split("->"))


class KindFolder:
    """Folds canonical options into Kinds for one Context, caching the folded exchange and all-reduce."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._exchange_cache: dict = {}
        self._shards_cache: dict = {}
        self._shard_costs: dict = {}
        self._allreduce_folded: dict | None = None

    def kinds(self, processes: int = 2, deadline: float | None = None) -> Kinds:
        """Every table's canonical options, folded. Options over all GPUs are priced from one shard or
        replica (the others are its relabelings) and built in full only if chosen. ``processes`` = 2: a forked
        child (placer/executor.py) folds every other table while this process folds the rest (the same
        kinds: folding one table reads nothing another table's folding changes). ``deadline``: a
        ``time.perf_counter()`` reading past which folding stops with budget.OutOfTime (None: never)."""
        n = len(self.ctx.model.wl.tables)
        with no_cyclic_gc():  # placer/executor.py: 7.0-7.9 s -> 5.4-5.7 s on production-856 @ 16node
            if processes < 2 or n < PARALLEL_MIN_TABLES:
                return self.kinds_of(range(n), deadline)
            theirs = Background(lambda: self.kinds_of(range(1, n, 2), deadline))
            try:
                mine = self.kinds_of(range(0, n, 2), deadline)
                odd = theirs.result()
            finally:
                theirs.close()
        out: Kinds = [None] * n  # type: ignore[list-item]
        out[0::2], out[1::2] = mine, odd
        return out

    def kinds_of(self, tables, deadline: float | None = None) -> Kinds:
        """The folded, undominated kinds of the tables at the indices ``tables``, in that order (budget.OutOfTime
        once ``deadline``, a ``time.perf_counter()`` reading, has passed: checked between tables)."""
        topo, wl, own_cfg = self.ctx.topo, self.ctx.model.wl, self.ctx.cfg
        cfg = OptionConfig(**{**own_cfg.__dict__, "canonical": True, "all_gpu_kinds": False})
        gpus = list(topo.gpus)
        out = []
        for ti in tables:
            if deadline is not None and time.perf_counter() > deadline:
                raise OutOfTime(f"option kinds: {len(out)} of {len(tables)} tables folded by the deadline")
            t = wl.tables[ti]
            # node-local tables' replicas of the canonical intra-node options included ([] on one node)
            ks = [self.fold(ti, p) for p in table_options(t, topo, wl, cfg)]
            for prec in precisions(t, own_cfg):
                if own_cfg.row_wise and len(topo.nodes) > 1:
                    seen = set()
                    for f in own_cfg.levels_for(t.name):
                        probe = row_wise.placement(t, gpus, prec, f, smallest_only=True)
                        if probe is None or probe.shards[0].hbm_rows in seen:
                            continue
                        seen.add(probe.shards[0].hbm_rows)
                        build = functools.partial(row_wise.placement, t, gpus, prec, f)
                        if self._allowed(t, build):
                            ks.append(self.fold(ti, probe, repeat=len(gpus), build=build))
                build = functools.partial(data_parallel.placement, t, gpus, prec)
                if data_parallel.allowed(t, prec, topo, own_cfg) and self._allowed(t, build):
                    probe = data_parallel.placement(t, gpus[:1], prec)
                    ks.append(self.fold(ti, probe, repeat=len(gpus), build=build))
            out.append(prune_dominated([k for k in ks if k is not None]))
        return out

    def _allowed(self, t, build) -> bool:
        """Whether the workload's constraints allow the all-GPU placement ``build()`` of ``t`` (built only for a
        table with constraints: table_options holds the canonical options to them, these are built here)."""
        rules = self.ctx.model.rules
        return t.name not in rules.by_table or rules.allows(build())

    def _exchange(self, device: str, outgoing: bool, node_local: bool = False):
        """The all-to-all of one byte per GPU from (or to) ``device``, folded: ({(phase, class): total},
        {(phase, class): busiest member}, [(phase, resource, s) on the device's own resources]). ``node_local``:
        to (from) the GPUs of the device's node only."""
        key = (device, outgoing, node_local)
        if key not in self._exchange_cache:
            phase = FX if outgoing else BX
            tokens = self._own_tokens(device)
            totals: dict[tuple[int, str], float] = defaultdict(float)
            peak: dict[tuple[int, str], float] = {}
            own = []
            unit = (node_exchange(self.ctx.model.traffic, self.ctx.topo, device, 1.0, outgoing) if node_local
                    else self.ctx.model.traffic.unit_exchange(device, outgoing))
            for link, spb in unit:
                c = (phase, resource_class(link))
                totals[c] += spb
                peak[c] = max(peak.get(c, 0.0), spb)
                if not tokens.isdisjoint(_endpoints(link)):
                    own.append((phase, link, spb))
            self._exchange_cache[key] = (dict(totals), peak, own)
        return self._exchange_cache[key]

    def _cost(self, p: Placement) -> Cost:
        """``p``'s cost as CostModel.placement_cost(every_gpu_folded=True) gives it. A row-wise or column-wise
        option over several GPUs is summed from its shards, each priced once per size on the canonical GPU and
        relabeled onto its own (Symmetry.gpu_key): the 8 near-equal shards of a row-wise option over a node are
        2 prices, not 8 (they were half of the option kinds' time on production-856)."""
        model, topo = self.ctx.local, self.ctx.topo
        if (len(p.shards) < 2 or sharding_of(p).split is None or p.node_local
                or p.compression is not None or any(s.device not in self.ctx.gpu_set for s in p.shards)):
            return model.placement_cost(p, every_gpu_folded=True)
        cost = model.table_cost(p, every_gpu_folded=True)
        canonical = topo.gpus[0]
        for s in p.shards:
            key = (p.table, p.sharding, p.precision, s.num_rows, s.hbm_rows, s.num_cols)
            alone = self._shard_costs.get(key)
            if alone is None:
                one = p.model_copy(update={"shards": [s.model_copy(update={"device": canonical})]})
                alone = self._shard_costs[key] = model.shard_cost(one, every_gpu_folded=True)
            cost += alone if s.device == canonical else _relabeled(alone, self.ctx.sym, s.device)
        return cost

    def _shards_exchange(self, senders: tuple[str, ...], node_local: bool):
        """The all-to-all of one byte per GPU from (and back to) each of ``senders``, both directions summed:
        ({(phase, class): total}, {(phase, class): busiest member}, {(phase, resource): s on the senders' own
        resources}); cached per tuple of senders (the shards of a row-wise option over a node: 8 devices, the same
        for every table and hot level)."""
        key = (senders, node_local)
        if key not in self._shards_cache:
            totals: dict[tuple[int, str], float] = defaultdict(float)
            peak: dict[tuple[int, str], float] = {}
            own: dict[tuple[int, str], float] = defaultdict(float)
            for device in senders:
                for outgoing in (True, False):
                    ex_totals, ex_peak, ex_own = self._exchange(device, outgoing, node_local)
                    for k, v in ex_totals.items():
                        totals[k] += v
                    for k, v in ex_peak.items():
                        peak[k] = max(peak.get(k, 0.0), v)
                    for ph, r, v in ex_own:
                        own[(ph, r)] += v
            self._shards_cache[key] = (dict(totals), peak, dict(own))
        return self._shards_cache[key]

    def _allreduce(self) -> dict[tuple[int, str], float]:
        """Seconds per byte of a ring all-reduce over all GPUs, summed per class."""
        if self._allreduce_folded is None:
            folded: dict[tuple[int, str], float] = defaultdict(float)
            for link, v in self.ctx.model.traffic.unit_allreduce(tuple(self.ctx.topo.gpus)):
                folded[(AR, resource_class(link))] += v
            self._allreduce_folded = dict(folded)
        return self._allreduce_folded

    def _own_tokens(self, device: str) -> set[str]:
        """Devices whose resources a shard on ``device`` loads directly, moving with it under the symmetry:
        a GPU, its host and its rail NIC; a host, its node's GPUs and NICs (its way out of the node)."""
        topo = self.ctx.topo
        tokens = {device, topo.host_of(device)}
        if device in topo.gpus:
            tokens.add(device.replace("/gpu", "/nic"))
        else:
            node = topo.node_of[device]
            for g in topo.gpus_of_node(node):
                tokens.update((g, g.replace("/gpu", "/nic")))
        return tokens

    def fold(self, ti: int, p: Placement, repeat: int = 1, build=None) -> Kind | None:
        """Fold one canonical option's cost into symmetry classes (exchange added from cached vectors).
        ``repeat`` > 1: ``p`` is one shard (or replica) of an option over all GPUs, repeated by symmetry. What
        every GPU carries alike (EVERY_GPU ops and buffers) is folded without a load per GPU."""
        ctx = self.ctx
        model, sym, topo = ctx.local, ctx.sym, ctx.topo
        n_gpus = len(topo.gpus)
        stream_class, hbm_class = ctx.gpu_classes
        family = Family.ALL if repeat > 1 else Family.LOCAL if p.node_local else FAMILY[p.sharding]
        shards = p.shards
        if family == Family.ALL:  # the probe's shard ops, repeated; the owners' ops for all ``repeat`` shards, exact
            cost = model.shard_cost(p, every_gpu_folded=True)
            whole = model.table_cost(p.model_copy(update={"shards": p.shards * repeat}), every_gpu_folded=True)
        else:
            cost, whole = self._cost(p), None
        every_gpu_bytes = cost.memory.get(EVERY_GPU, 0.0) + (whole.memory.get(EVERY_GPU, 0.0) if whole else 0.0)
        gpus = ctx.gpu_set
        if every_gpu_bytes > ctx.mem_usable[hbm_class] or any(
                b + (every_gpu_bytes if m in gpus else 0.0) > ctx.mem_usable[resource_class(m)]
                for m, b in cost.memory.items() if m != EVERY_GPU):
            return None
        tokens = set().union(*(self._own_tokens(s.device) for s in p.shards)) if family != Family.ALL else set()
        own_gpus = sorted(tokens & gpus)
        own_streams = [topo.stream_of(g) for g in own_gpus]
        totals: dict[tuple[int, str], float] = defaultdict(float)
        peak_member: dict[tuple[int, str], float] = {}
        own: dict[tuple[int, str], float] = defaultdict(float)
        on_every_gpu = [0.0] * len(PHASES)  # s each GPU's stream carries alike, per phase
        for (ph, r), v in cost.loads.items():
            if r == EVERY_GPU:
                on_every_gpu[ph] += v
                for st in own_streams:
                    own[(ph, st)] += v
        for ph, v in enumerate(on_every_gpu):
            if v:
                totals[(ph, stream_class)] += v * n_gpus * repeat
                peak_member[(ph, stream_class)] = v
        for (ph, r), v in cost.loads.items():
            if r == EVERY_GPU:
                continue
            key = (ph, resource_class(r))
            totals[key] += v * repeat
            if tokens and not tokens.isdisjoint(_endpoints(r)):
                own[(ph, r)] += v
            if key[1] == stream_class:  # that stream carries the every-GPU load too
                v += on_every_gpu[ph]
            peak_member[key] = max(peak_member.get(key, 0.0), v)
        if whole is not None:
            for (ph, r), v in whole.loads.items():
                if r == EVERY_GPU:
                    totals[(ph, stream_class)] += v * n_gpus
                else:
                    totals[(ph, resource_class(r))] += v
        if sharding_of(p).whole_copies:  # ring all-reduce of the table's gradient over every GPU
            grad = model.tables[p.table].rows * model.tables[p.table].dim * 4
            for key, v in self._allreduce().items():
                totals[key] += v * grad
        else:
            per_gpu = ctx.model.exchange_bytes_per_gpu(p.table, shards[0].num_cols)
            ex_totals, ex_peak, ex_own = self._shards_exchange(tuple(topo.exchange_sender(sh.device) for sh in shards),
                                                               p.node_local)
            for key, v in ex_totals.items():
                totals[key] += v * per_gpu * repeat
            for key, v in ex_peak.items():
                peak_member[key] = max(peak_member.get(key, 0.0), v * per_gpu)
            if family != Family.ALL:
                for key, v in ex_own.items():
                    own[key] += v * per_gpu
        mem_totals: dict[str, float] = defaultdict(float)
        for m, b in cost.memory.items():
            if m == EVERY_GPU:
                mem_totals[hbm_class] += b * n_gpus * repeat
            else:
                mem_totals[resource_class(m)] += b * repeat
        if whole is not None:
            for m, b in whole.memory.items():
                mem_totals[hbm_class if m == EVERY_GPU else resource_class(m)] += b * (n_gpus if m == EVERY_GPU else 1)
        if family == Family.ALL:  # by symmetry every member of a class carries the same
            peak_member = {k: v / sym.class_size[k[1]] for k, v in totals.items()}
        else:  # any member carries at least the class average
            for k, v in totals.items():
                peak_member[k] = max(peak_member.get(k, 0.0), v / sym.class_size[k[1]])
        peak = [0.0] * len(PHASES)
        for (ph, c), v in peak_member.items():
            peak[ph] = max(peak[ph], ctx.base_min.get((ph, c), 0.0) + v)
        kind = Kind(ti, p, family, dict(totals), peak, dict(mem_totals), hbm_bytes=mem_totals.get(hbm_class, 0.0),
                    build=build, every_gpu=on_every_gpu, stream_peak=[0.0] * len(PHASES))
        if family == Family.ALL:  # what it puts on every GPU is on every member: the same load everywhere
            kind.every_gpu = [totals.get((ph, stream_class), 0.0) / n_gpus for ph in range(len(PHASES))]
            kind.members = {k: [v] for k, v in peak_member.items()}
            for g, charges in cost.once.items():
                per_phase = [0.0] * len(PHASES)
                for (ph, r), v in charges.items():
                    if r == EVERY_GPU or resource_class(r) == stream_class:
                        per_phase[ph] += v
                kind.every_gpu_groups.append(((g.location, g.dtype, g.width), per_phase))
        else:
            groups = []
            for g, charges in cost.once.items():  # the member holding it pays its groups' fixed costs once
                named: dict[tuple[int, str], float] = defaultdict(float)
                for (ph, r), v in charges.items():
                    for name in (own_streams if r == EVERY_GPU else (r,)):
                        named[(ph, name)] += v
                for (ph, r), v in named.items():
                    own.setdefault((ph, r), 0.0)
                    key = (ph, resource_class(r))
                    peak[ph] = max(peak[ph], ctx.base_min.get(key, 0.0) + own[(ph, r)] + v)
                groups.append((g, named))
            fixed_at: dict[tuple[int, str], float] = defaultdict(float)
            for _, named in groups:
                for k, v in named.items():
                    fixed_at[k] += v
            for (ph, r), v in own.items():
                if resource_class(r) == stream_class:
                    kind.stream_peak[ph] = max(kind.stream_peak[ph], v + fixed_at[(ph, r)] - on_every_gpu[ph])
            position = {k: i for i, k in enumerate(own)}
            kind.groups = [(g, [(position[k], v) for k, v in named.items()]) for g, named in groups]
            kind.own = [(ph, r, v) for (ph, r), v in own.items()]
            own_mem: dict[str, float] = defaultdict(float)
            own_hbm = [topo.memory_of(g) for g in own_gpus]
            for m, b in cost.memory.items():
                for name in (own_hbm if m == EVERY_GPU else (m,)):
                    own_mem[name] += b
            kind.own_mem = list(own_mem.items())
            for (ph, r), v in own.items():
                if v:
                    kind.members.setdefault((ph, resource_class(r)), []).append(v)
        return kind
