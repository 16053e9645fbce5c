"""Two-stage planning for large homogeneous clusters (many identical GPUs).

The full ILP has one binary per (table, option, device): 856 tables x 128 GPUs is over a million, and the
identical GPUs make its relaxation weak. Here instead:

Stage 1, an aggregated ILP over *kinds* (an option on the canonical device node0/gpu0, node0, ...; the
symmetry maps it onto any other). For every resource class c (all HBMs, all NIC->fabric links, ...) with
|c| members, the busiest member carries at least the class average, and at least the load one table's
kind alone puts on a member on top of the smallest base load there:

    y_p >= (base[p,c] + sum_k x_k total_k[p,c]) / |c|        for every phase p, class c
    y_p >= sum_{k of t} x_k max_c (base_min[p,c] + peak_k[p,c])  for every table t, phase p
    sum_k x_k mem_k[c] <= |c| * usable(c)                     for every memory class c

Every full plan satisfies these, so stage 1's optimum, and any valid bound on it, bounds the full
problem from below: that is the lower bound reported with the plan. The per-table peak rows are weak in
the relaxation (many tables each take a fraction of a kind with a high peak), so stage 1 adds peak levels
(problem.PeakLevels), placed where a first relaxation puts the phases. CBC's branch and bound barely moves
either side of this model in a minute (measured: production-856 on 128 GPUs), so stage 1 is the relaxation
(lp.py, HiGHS), a rounding of it (its integral tables stay, a small MIP chooses the rest), and then branch
and bound on the relaxation's bound with the time left (bound_tree.py: it splits where the relaxation mixes
a high-peak choice with a low one; production-856: 8.414 -> 8.51 ms in 18 s), whose integral leaves are
choices too.

Stage 2 assigns devices to the chosen kinds, largest first, each onto the device where the predicted step
time grows least among those where it fits (the loads on the device's own resources are compared exactly;
the spread part of its exchange is the same wherever it goes), ties going to the emptier device (sum of
squared loads relative to stage 1's phase times); then re-inserts tables the same way in sweeps while that
helps, swaps pairs of tables where a phase's busiest resource can only come down that way, and lets two GPUs
split their tables anew (repack.py), in rounds while any of these changes something; where multi-GPU options
fill some GPUs in one phase and leave them idle in another, a MIP chooses what those GPUs hold and stage 2
assigns the rest around them (fill.py), kept if better. Stage 2 runs once per variant of its balance measure
while time is left (STAGE2_VARIANTS). The plan is then priced exactly by the
simulator; the gap is (plan - bound) / plan.
"""
from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from placer.cost import AR, BX, FX, PHASES, Cost, CostModel
from placer.errors import SolverError
from placer.options import (OptionConfig, data_parallel_allowed, data_parallel_placement, precisions,
                             row_wise_placement, table_options)
from placer.plan import Placement
from placer.planner import fill, ilp
from placer.planner.baselines import Accumulator, load_index
from placer.planner.bound_tree import BoundTree
from placer.planner.lp import Relaxation
from placer.planner.problem import CountRow, PeakLevels, Problem
from placer.planner.progress import Tracker
from placer.planner.repack import repack
from placer.planner.symmetry import Symmetry, resource_class

FAMILY = {"table_wise": "gpu", "host": "node", "row_wise": "node", "column_wise": "block", "data_parallel": "all"}


#: Orders in which stage 2 places kinds, largest first: by the largest relative load on one of their own
#: resources (vector bin packing), or by the sum of their peaks.
ORDERS: dict[str, Callable[["TwoStagePlanner", "Kind"], float]] = {
    "size": lambda planner, kind: planner.size(kind),
    "weight": lambda planner, kind: kind.weight,
}


@dataclass
class Kind:
    """One canonical option of one table, with what stage 1 and stage 2 need to know of it."""

    table: int
    placement: Placement
    family: str  # gpu | node | block | all (no choice of devices)
    totals: dict[tuple[int, str], float]  # (phase, class) -> seconds summed over the class
    peak: list[float]  # per phase: max over classes of base_min + the kind's load on one member
    mem_totals: dict[str, float]  # memory class -> bytes
    own: list[tuple[int, str, float]] = field(default_factory=list)  # canonical (phase, resource, s)
    own_mem: list[tuple[str, float]] = field(default_factory=list)  # canonical (memory, bytes)
    # (phase, class) -> load on each member it touches, s ("all" kinds: the load every member carries)
    members: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    hbm_bytes: float = 0.0
    build: Callable[[], Placement] | None = None  # for "all" kinds: the full placement, built when chosen

    def full_placement(self) -> Placement:
        return self.build() if self.build is not None else self.placement

    @property
    def weight(self) -> float:
        return sum(self.peak)


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


def _endpoints(name: str) -> list[str]:
    return name.split(":")[0].split("->")


class TwoStagePlanner:
    def __init__(self, model: CostModel, sym: Symmetry, cfg: OptionConfig, tracker: Tracker | None = None):
        self.model, self.sym, self.topo = model, sym, model.topo
        self.tracker = tracker or Tracker(None)
        self.cfg = cfg
        self.other_choices: list[list[int]] = []  # stage 1's choices besides the one it returns (option ids)
        self.local = CostModel(model.topo, model.wl, include_exchange=False)
        self._exchange_cache: dict = {}
        self._allreduce_folded: dict | None = None
        base = model.base_cost
        self.base_total: dict[tuple[int, str], float] = defaultdict(float)
        members: dict[tuple[int, str], list[float]] = defaultdict(list)
        for (p, r), v in base.loads.items():
            self.base_total[(p, resource_class(r))] += v
            members[(p, resource_class(r))].append(v)
        self.base_min = {k: (min(v) if len(v) == sym.class_size[k[1]] else 0.0) for k, v in members.items()}
        # per-phase load scale for stage 2's balance measure (stage 1's phase times once known), seconds
        self.scale = [1e-3] * len(PHASES)
        self.excess_weight = 0.0
        self._load_index = load_index(model)
        self._index_cache: dict[tuple, tuple[list[tuple], np.ndarray, np.ndarray]] = {}
        usable = model.usable_memory
        self.mem_usable: dict[str, float] = {}
        for m, v in usable.items():
            c = resource_class(m)
            self.mem_usable[c] = min(self.mem_usable.get(c, float("inf")), v)

    # ---- stage 1 ----------------------------------------------------------------------------------------------

    def kinds(self) -> list[list[Kind]]:
        """Every table's canonical options, folded. Options over all GPUs are priced from one shard or
        replica (the others are its relabelings) and built in full only if chosen."""
        cfg = OptionConfig(**{**self.cfg.__dict__, "canonical": True, "all_gpu_kinds": False})
        gpus = list(self.topo.gpus)
        out = []
        for ti, t in enumerate(self.model.wl.tables):
            ks = [self._kind(ti, p) for p in table_options(t, self.topo, self.model.wl, cfg)]
            for prec in precisions(t, self.cfg):
                if self.cfg.row_wise and len(self.topo.nodes) > 1:
                    seen = set()
                    for f in self.cfg.levels_for(t.name):
                        probe = row_wise_placement(t, gpus, prec, f, first_only=True)
                        if probe is None or probe.shards[0].hbm_rows in seen:
                            continue
                        seen.add(probe.shards[0].hbm_rows)
                        ks.append(self._kind(ti, probe, repeat=len(gpus),
                                             build=lambda t=t, prec=prec, f=f: row_wise_placement(t, gpus, prec, f)))
                if data_parallel_allowed(t, prec, self.topo, self.cfg):
                    probe = data_parallel_placement(t, gpus[:1], prec)
                    ks.append(self._kind(ti, probe, repeat=len(gpus),
                                         build=lambda t=t, prec=prec: data_parallel_placement(t, gpus, prec)))
            out.append(prune_dominated([k for k in ks if k is not None]))
        return out

    def _folded_exchange(self, device: str, outgoing: bool):
        """The all-to-all of one byte per GPU from (or to) ``device``, folded: ({(phase, class): total},
        {(phase, class): busiest member}, [(phase, resource, s) on the device's own resources])."""
        key = (device, outgoing)
        if key not in self._exchange_cache:
            phase = FX if outgoing else BX
            tokens = self._own_tokens(device)
            totals: dict[tuple[int, str], float] = defaultdict(float)
            peak: dict[tuple[int, str], float] = {}
            own = []
            for link, spb in self.model.traffic.unit_exchange(device, outgoing):
                c = (phase, resource_class(link))
                totals[c] += spb
                peak[c] = max(peak.get(c, 0.0), spb)
                if not tokens.isdisjoint(_endpoints(link)):
                    own.append((phase, link, spb))
            self._exchange_cache[key] = (dict(totals), peak, own)
        return self._exchange_cache[key]

    def _folded_allreduce(self) -> dict[tuple[int, str], float]:
        """Seconds per byte of a ring all-reduce over all GPUs, summed per class."""
        if self._allreduce_folded is None:
            folded: dict[tuple[int, str], float] = defaultdict(float)
            for link, v in self.model.traffic.unit_allreduce(tuple(self.topo.gpus)):
                folded[(AR, resource_class(link))] += v
            self._allreduce_folded = dict(folded)
        return self._allreduce_folded

    def _own_tokens(self, device: str) -> set[str]:
        """Devices whose resources a shard on ``device`` loads directly, moving with it under the symmetry:
        a GPU, its host and its rail NIC; a host, its node's GPUs and NICs (its way out of the node)."""
        tokens = {device, self.topo.host_of(device)}
        if device in self.topo.gpus:
            tokens.add(device.replace("/gpu", "/nic"))
        else:
            node = self.topo.node_of[device]
            for g in self.topo.gpus_of_node(node):
                tokens.update((g, g.replace("/gpu", "/nic")))
        return tokens

    def _kind(self, ti: int, p: Placement, repeat: int = 1, build=None) -> Kind | None:
        """Fold one canonical option's cost into symmetry classes (exchange added from cached vectors).
        ``repeat`` > 1: ``p`` is one shard (or replica) of an option over all GPUs, repeated by symmetry."""
        model, sym = self.local, self.sym
        family = "all" if repeat > 1 else FAMILY[p.sharding]
        shards = p.shards
        cost = model.placement_cost(p)
        if any(b > self.mem_usable[resource_class(m)] for m, b in cost.memory.items()):
            return None
        totals: dict[tuple[int, str], float] = defaultdict(float)
        peak_member: dict[tuple[int, str], float] = {}
        own: dict[tuple[int, str], float] = defaultdict(float)
        tokens = set().union(*(self._own_tokens(s.device) for s in p.shards)) if family != "all" else set()
        for (ph, r), v in cost.loads.items():
            key = (ph, resource_class(r))
            totals[key] += v * repeat
            peak_member[key] = max(peak_member.get(key, 0.0), v)
            if tokens and not tokens.isdisjoint(_endpoints(r)):
                own[(ph, r)] += v
        if p.sharding == "data_parallel":  # ring all-reduce of the table's gradient over every GPU
            grad = model.tables[p.table].rows * model.tables[p.table].dim * 4
            for key, v in self._folded_allreduce().items():
                totals[key] += v * grad
        else:
            per_gpu = self.model.exchange_bytes_per_gpu(p.table, shards[0].num_cols)
            for sh in shards:
                for outgoing in (True, False):
                    ex_totals, ex_peak, ex_own = self._folded_exchange(sh.device, outgoing)
                    for key, v in ex_totals.items():
                        totals[key] += v * per_gpu * repeat
                    for key, v in ex_peak.items():
                        peak_member[key] = max(peak_member.get(key, 0.0), v * per_gpu)
                    if family != "all":
                        for ph, r, v in ex_own:
                            own[(ph, r)] += v * per_gpu
        mem_totals: dict[str, float] = defaultdict(float)
        for m, b in cost.memory.items():
            mem_totals[resource_class(m)] += b * repeat
        if family == "all":  # by symmetry every member of a class carries the same
            peak_member = {k: v / sym.class_size[k[1]] for k, v in totals.items()}
        else:  # any member carries at least the class average
            for k, v in totals.items():
                peak_member[k] = max(peak_member.get(k, 0.0), v / sym.class_size[k[1]])
        peak = [0.0] * len(PHASES)
        for (ph, c), v in peak_member.items():
            peak[ph] = max(peak[ph], self.base_min.get((ph, c), 0.0) + v)
        kind = Kind(ti, p, family, dict(totals), peak, dict(mem_totals),
                    hbm_bytes=sum(b for m, b in cost.memory.items() if m in self.topo.gpus) * repeat, build=build)
        if family != "all":
            kind.own = [(ph, r, v) for (ph, r), v in own.items()]
            kind.own_mem = list(cost.memory.items())
            for (ph, r), v in own.items():
                kind.members.setdefault((ph, resource_class(r)), []).append(v)
        else:
            kind.members = {k: [v] for k, v in peak_member.items()}
        return kind

    def stage1(self, kinds: list[list[Kind]], time_limit_s: float, gap: float, backend: str,
               threads: int | None) -> ilp.IlpResult:
        """Solve the aggregated ILP as far as the time allows: its relaxation with peak levels
        (problem.PeakLevels) gives a first bound; a rounding of it (ilp.complete_relaxation), corrected by
        pigeonhole rows (problem.CountRow) where it packs loads that cannot be spread, gives the kinds; then
        branch and bound on the relaxation (bound_tree.py) raises the bound and may find a better choice.
        ``backend`` solves the whole MIP only if the relaxation fails."""
        t0 = time.perf_counter()
        left = lambda: time_limit_s - (time.perf_counter() - t0)
        problem = self.stage1_problem = self.build_stage1(kinds)
        nvars = problem.num_options + problem.num_phases
        problem.levels = peak_levels(problem, 32)
        self.tracker.update("stage 1: relaxation", bound_s=problem.simple_lower_bound())
        lp_time = max(time_limit_s / 5, 10.0)  # everything after needs a relaxation: let it finish
        relaxation = Relaxation(problem)
        values, lp_bound = relaxation.solve(lp_time)
        if values is not None:
            self.tracker.update(bound_s=lp_bound)
        if values is not None and left() > 0.5 * time_limit_s:  # again, with the levels where it puts the phases
            problem.levels = peak_levels(problem, 64, cap=2 * problem.phase_times(values))
            second = Relaxation(problem)
            again, bound = second.solve(lp_time)
            if again is not None:
                values, lp_bound, relaxation = again, max(lp_bound, bound), second
                self.tracker.update(bound_s=lp_bound)
        self.tracker.update("stage 1: rounding")
        if values is None:
            return ilp.solve(problem, backend=backend, time_limit_s=max(1.0, left()), gap=gap, threads=threads)
        chosen = ilp.complete_relaxation(problem, values, time_limit_s=max(1.0, left() * 0.6))
        found = [chosen] if chosen is not None else []  # every choice stage 1 makes on the way
        flat = [k for ks in kinds for k in ks]
        group_of = {i: gi for gi, g in enumerate(problem.groups) for i in g}
        while chosen is not None and left() > time_limit_s * 0.2:
            # pigeonhole: N loads of s seconds on m identical resources put ceil(N/m) of them on one; where
            # the rounding ignores that, add the row and round again, freeing the tables that carry such loads
            x = np.zeros(problem.num_options)
            x[chosen] = 1.0
            rows = self.count_rows(problem, flat, x, per_class=2)
            if not rows:
                break
            problem.counts += rows
            relaxation.add_counts(rows)
            free = {group_of[int(i)] for row in rows for i in row.ids if x[i] > 0}
            if len(free) > len(problem.groups) / 3:  # that rounding would be the whole MIP again
                break
            again = ilp.complete_relaxation(problem, values, free=free, time_limit_s=max(1.0, left() * 0.6))
            if again is None or problem.objective(again) >= problem.objective(chosen):
                break
            chosen = again
            found.append(chosen)
        tree = None
        if chosen is not None and left() > 2.0:
            self.tracker.update("stage 1: branch and bound on the bound")
            # no gap: the plan lands above stage 1's incumbent, so leaves within the gap of it still matter
            tree = BoundTree(problem, relaxation).run(problem.objective(chosen), deadline=t0 + time_limit_s)
            lp_bound = max(lp_bound, tree.bound_s)
            self.tracker.update(bound_s=lp_bound)
            if tree.chosen is not None:
                chosen = tree.chosen
                found.append(chosen)
        wall = time.perf_counter() - t0
        self.other_choices = sorted((c for i, c in enumerate(found) if c != chosen and c not in found[:i]),
                                    key=problem.objective)
        if chosen is None:
            return ilp.IlpResult(None, "no_solution", None, lp_bound, wall, nvars, 0, "none", backend)
        objective = problem.objective(chosen)
        bound = min(max(lp_bound, problem.simple_lower_bound()), objective)
        how = "relaxation with peak levels, rounded" + (
            f"; {tree.nodes} splits of the relaxation, {tree.lp_solves} LPs" if tree is not None else "")
        return ilp.IlpResult(chosen, "optimal" if objective - bound <= gap * objective else "feasible", objective,
                             bound, wall, nvars, len(problem.load_rows) + len(problem.mem_rows), "none",
                             f"{backend} + highs ({how})")

    def count_rows(self, problem: Problem, flat: list[Kind], values: np.ndarray, per_class: int = 1) -> list[CountRow]:
        """Pigeonhole rows (problem.CountRow) that ``values`` (a choice, or a relaxation's values) violates:
        on a class of m resources, N loads of at least s seconds put ceil(N / m) of them on one member. For
        each (phase, class), the ``per_class`` sizes s whose rows are most violated."""
        y = problem.phase_times(values)
        items: dict[tuple[int, str], tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        spread: dict[tuple[int, str], tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        for i, k in enumerate(flat):
            target = spread if k.family == "all" else items
            for key, loads in k.members.items():
                ids, sizes = target[key]
                ids.extend([i] * len(loads))
                sizes.extend(loads)
        rows = []
        for (ph, c), (ids, sizes) in items.items():
            m = self.sym.class_size[c]
            if m < 2:
                continue
            ids_a, sizes_a = np.asarray(ids), np.asarray(sizes)
            order = np.argsort(-sizes_a)
            cum = np.cumsum(values[ids_a[order]])  # relaxed count of loads >= each size
            s_ids, s_coef = spread.get((ph, c), ([], []))
            s_ids, s_coef = np.asarray(s_ids, dtype=np.int64), np.asarray(s_coef)
            base = self.base_min.get((ph, c), 0.0) + float(s_coef @ values[s_ids])
            lhs = base + sizes_a[order] * np.ceil(cum / m - 1e-6)
            last = np.append(sizes_a[order][1:] != sizes_a[order][:-1], True)  # last of each size: its full count
            lhs[~last] = -np.inf
            for pos in np.argsort(-lhs)[:per_class]:
                if lhs[pos] <= y[ph] * (1 + 1e-6):
                    break
                size = float(sizes_a[order][pos])
                sel = sizes_a >= size * (1 - 1e-12)
                uniq, counts = np.unique(ids_a[sel], return_counts=True)
                rows.append(CountRow(ph, self.base_min.get((ph, c), 0.0), size, m, uniq, counts, s_ids, s_coef))
        return rows

    def build_stage1(self, kinds: list[list[Kind]]) -> Problem:
        """The aggregated ILP as a Problem (rows described in the module docstring)."""
        flat = [k for ks in kinds for k in ks]
        groups, oid = [], 0
        for ks in kinds:
            groups.append(list(range(oid, oid + len(ks))))
            oid += len(ks)
        load_cols: dict[tuple[int, str], tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        for i, k in enumerate(flat):
            for (ph, c), v in k.totals.items():
                ids, vals = load_cols[(ph, c)]
                ids.append(i)
                vals.append(v / self.sym.class_size[c])
        for ti, ks in enumerate(kinds):
            for ph in range(len(PHASES)):
                if any(k.peak[ph] for k in ks):
                    load_cols[(ph, f"table:{ti}")] = (groups[ti], [k.peak[ph] for k in ks])
        load_base = {(ph, c): v / self.sym.class_size[c] for (ph, c), v in self.base_total.items()}
        # The all-reduce rings are not symmetric (they wrap around the nodes), but every all-reduce over all
        # GPUs loads the links in the same proportions: on the link the dense model's all-reduce loads most,
        # the load is exactly base + sum of the data-parallel tables' bytes x that link's seconds per byte.
        ar_links = {r: v for (ph, r), v in self.model.base_cost.loads.items() if ph == AR and "->" in r}
        if ar_links:
            worst = max(ar_links, key=ar_links.get)
            unit = dict(self.model.traffic.unit_allreduce(tuple(self.topo.gpus)))
            ids = [i for i, k in enumerate(flat) if k.placement.sharding == "data_parallel" and k.family == "all"]
            key = (AR, f"exact:{worst}")
            load_base[key] = ar_links[worst]
            if ids and worst in unit:
                load_cols[key] = (ids, [self.model.tables[flat[i].placement.table].rows
                                        * self.model.tables[flat[i].placement.table].dim * 4 * unit[worst]
                                        for i in ids])
        mem_cols: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
        for i, k in enumerate(flat):
            for c, b in k.mem_totals.items():
                ids, vals = mem_cols[c]
                ids.append(i)
                vals.append(b)
        problem = Problem(
            groups=groups, num_phases=len(PHASES),
            load_rows={k: (np.asarray(i, dtype=np.int64), np.asarray(v)) for k, (i, v) in load_cols.items()},
            load_base=load_base,
            mem_rows={k: (np.asarray(i, dtype=np.int64), np.asarray(v)) for k, (i, v) in mem_cols.items()},
            mem_capacity={c: self.sym.class_size[c] * self.mem_usable[c] for c in mem_cols},
            fixed_s=sum(self.model.fixed_latency_s.values()))
        return problem

    # ---- stage 2 ----------------------------------------------------------------------------------------------

    def set_scale(self, phase_times) -> None:
        """Per-phase load scale (s) for the balance measure: stage 1's phase times where positive."""
        self.scale = [float(v) if v > 0 else old for v, old in zip(phase_times, self.scale)]

    def size(self, kind: Kind) -> float:
        """How hard a kind is to fit: its largest load on one of its own resources relative to that phase's
        scale (vector bin packing goes largest dimension first)."""
        return max((v / self.scale[ph] for ph, _, v in kind.own), default=0.0)

    def candidates(self, kind: Kind) -> list[tuple]:
        sym, topo = self.sym, self.topo
        if kind.family == "gpu":
            return [sym.gpu_key(g) for g in topo.gpus]
        if kind.family == "node":
            return [sym.node_key(n) for n in topo.nodes]
        if kind.family == "block":
            pieces = len(kind.placement.shards)
            blocks = sym.gpus_per_node // pieces
            return [sym.block_key(n, b, pieces) for n in topo.nodes for b in range(blocks)]
        return [(0, ())]

    def relabeled(self, kind: Kind, key: tuple) -> Placement:
        if key == (0, ()):
            return kind.placement
        rl = self.sym.relabel
        return kind.placement.model_copy(update={"shards": [
            s.model_copy(update={"device": rl(key, s.device)}) for s in kind.placement.shards]})

    def assign_best(self, chosen: list[Kind], fallbacks: list[list[Kind]],
                    pinned: dict[int, tuple[Kind, tuple]] | None = None) -> tuple[list[Placement], Accumulator]:
        """``assign`` in each order of ORDERS; the one with the least step time (its choices kept in
        ``self.where``)."""
        best = None
        for order_by in ORDERS:
            placements, acc = self.assign(chosen, fallbacks, order_by, pinned)
            if placements and (best is None or acc.step < best[1].step):
                best = (placements, acc, self.where)
        if best is None:
            return [], acc
        self.where = best[2]
        return best[0], best[1]

    def assign(self, chosen: list[Kind], fallbacks: list[list[Kind]], order_by: str = "size",
               pinned: dict[int, tuple[Kind, tuple]] | None = None) -> tuple[list[Placement], Accumulator]:
        """Devices for the chosen kinds, largest first (by ``order_by``, one of ORDERS); a kind that fits
        nowhere falls back to the same table's kinds with less HBM, then host. ``pinned`` (table -> (kind,
        symmetry key)) go first, where they say (fill.py). Returns ([], acc) if some table fits nowhere."""
        model = self.model
        measure = ORDERS[order_by]
        acc = Accumulator(model)
        placed: dict[int, Placement] = {}
        self.where: dict[int, tuple[Kind, tuple]] = {}
        for k in [k for k in chosen if k.family == "all"]:
            full = k.full_placement()
            c = model.placement_cost(full)
            if acc.fits(c):
                acc.add(c)
                placed[k.table] = full
        for ti, (k, key) in (pinned or {}).items():
            p = self.relabeled(k, key)
            c = model.placement_cost(p)
            if acc.fits(c):
                acc.add(c)
                placed[ti] = p
                self.where[ti] = (k, key)
        order = sorted((k for k in chosen if k.family != "all" and k.table not in placed),
                       key=lambda k: -measure(self, k))
        order += [k for k in chosen if k.family == "all" and k.table not in placed]
        for k in order:
            tries = [k] if k.family != "all" else []
            tries += [f for f in fallbacks[k.table] if f.family != "all" and f.hbm_bytes < k.hbm_bytes]
            tries += [f for f in fallbacks[k.table] if f.placement.sharding == "host"]
            for cand_kind in tries:
                got = self._best_device(acc, cand_kind)
                if got is not None:
                    placed[k.table] = got[0]
                    self.where[k.table] = (cand_kind, got[1])
                    break
            else:
                return [], acc
        return [placed[i] for i in range(len(model.wl.tables))], acc

    def improve(self, placements: list[Placement], acc: Accumulator, deadline: float) -> int:
        """Re-insert tables, hardest to fit first, each onto its best device (step time first, then balance), in
        sweeps until a sweep moves nothing or time is up. A move never makes the exact step time worse.
        Returns the number of moves; ``placements`` and ``acc`` are updated in place."""
        model, moves = self.model, 0
        order = sorted(self.where, key=lambda ti: -self.size(self.where[ti][0]))
        costs: dict[int, Cost] = {}  # of the placements now, priced once
        moved = True
        while moved and time.perf_counter() < deadline:
            moved = False
            for ti in order:
                if time.perf_counter() >= deadline:
                    break
                kind, key = self.where[ti]
                step = acc.step
                if ti not in costs:
                    costs[ti] = model.placement_cost(placements[ti])
                old_cost = costs[ti]
                acc.remove(old_cost)
                best = self._best_key(acc, kind, stay=key)
                if best is not None:
                    p = self.relabeled(kind, best[0])
                    c = model.placement_cost(p)
                    if acc.fits(c):
                        acc.add(c)
                        if acc.step <= step * (1 + 1e-12):
                            placements[ti], costs[ti] = p, c
                            self.where[ti] = (kind, best[0])
                            moves += 1
                            moved = True
                            continue
                        acc.remove(c)
                acc.add(old_cost)
        return moves

    def swap(self, placements: list[Placement], acc: Accumulator, deadline: float) -> int:
        """Swap two single-GPU tables between their GPUs where that lowers a phase's busiest resource: single
        moves cannot, once another phase is packed to its maximum everywhere (synthetic-1000 on 256 GPUs: the
        exchange within 0.2%, so no table can leave the GPUs that a column-wise block fills in the forward).
        For each phase's busiest resource, the tables loading it are tried against every single-GPU table
        elsewhere: first on both GPUs' own resources (no load may reach the one being lowered, nor pass another
        phase's maximum), then exactly. Returns the number of swaps; ``placements`` and ``acc`` change in place."""
        model, rl = self.model, self.sym.relabel
        swaps = 0
        own_at: dict[tuple[int, tuple], dict[tuple[int, str], float]] = {}

        def own(ti: int, key: tuple) -> dict[tuple[int, str], float]:
            kind = self.where[ti][0]
            if (ti, key) not in own_at:
                at: dict[tuple[int, str], float] = defaultdict(float)
                for ph, r, v in kind.own:
                    at[(ph, rl(key, r))] += v
                own_at[(ti, key)] = at
            return own_at[(ti, key)]

        def fits(ti: int, key: tuple, leaving: int) -> bool:
            for m, b in self.where[ti][0].own_mem:
                name = rl(key, m)
                freed = sum(b2 for m2, b2 in self.where[leaving][0].own_mem if rl(self.where[leaving][1], m2) == name)
                if acc.memory[name] - freed + b > model.usable_memory[name]:
                    return False
            return True

        single = self.single_gpu_tables()
        progress = True
        while progress and time.perf_counter() < deadline:
            progress = False
            for ph in sorted(range(len(PHASES)), key=lambda p: -acc.phase_max[p] / self.scale[p]):
                if time.perf_counter() >= deadline:
                    break
                top, level = acc.busiest(ph)
                if level <= 0:
                    continue
                holders = sorted((ti for ti in single if own(ti, self.where[ti][1]).get(top, 0.0) > 0),
                                 key=lambda ti: -own(ti, self.where[ti][1])[top])
                done = False
                for t in holders:
                    kt = self.where[t][1]
                    load_t = own(t, kt)
                    best = None
                    for u in single:
                        ku = self.where[u][1]
                        if ku == kt:
                            continue
                        load_u = own(u, ku)
                        t_there, u_here = own(t, ku), own(u, kt)
                        gain = load_t[top] - u_here.get(top, 0.0)
                        if gain <= 0 or (best is not None and gain <= best[0]):
                            continue
                        ok = True
                        for moved_in, moved_out in ((u_here, load_t), (t_there, load_u)):
                            for key, v in moved_in.items():
                                new = acc.loads[key] + v - moved_out.get(key, 0.0)
                                limit = level if key[0] == ph else acc.phase_max[key[0]]
                                if new > limit * (1 - 1e-12) and new > acc.loads[key] + 1e-18:
                                    ok = False
                                    break
                            if not ok:
                                break
                        if ok and fits(u, kt, t) and fits(t, ku, u):
                            best = (gain, u)
                    if best is None:
                        continue
                    u = best[1]
                    step = acc.step
                    if self.move_exactly(placements, acc, [(t, self.where[u][1]), (u, kt)],
                                         keep=lambda: acc.step <= step * (1 + 1e-12)
                                         and acc.loads[top] < level * (1 - 1e-12)):
                        swaps += 1
                        progress = done = True
                        break
                if done:
                    break
        return swaps

    def single_gpu_tables(self) -> list[int]:
        """The tables placed (``where``) with a single-GPU kind: those swaps, repacking and fill.py move."""
        return [ti for ti, (kind, _) in self.where.items() if kind.family == "gpu"]

    def move_exactly(self, placements: list[Placement], acc: Accumulator, moves: list[tuple[int, tuple]],
                     keep: Callable[[], bool]) -> bool:
        """Move every table of ``moves`` ((table, symmetry key) pairs) onto its key, priced exactly in ``acc``;
        kept (``placements`` and ``where`` updated) if every new placement fits and ``keep()`` then holds, else
        undone. Returns whether it was kept."""
        model = self.model
        old = [model.placement_cost(placements[t]) for t, _ in moves]
        new = [self.relabeled(self.where[t][0], key) for t, key in moves]
        for cost in old:
            acc.remove(cost)
        added: list[Cost] = []
        for p in new:
            cost = model.placement_cost(p)
            if not acc.fits(cost):
                break
            acc.add(cost)
            added.append(cost)
        else:
            if keep():
                for (t, key), p in zip(moves, new):
                    placements[t] = p
                    self.where[t] = (self.where[t][0], key)
                return True
        for cost in reversed(added):
            acc.remove(cost)
        for cost in old:
            acc.add(cost)
        return False

    def place(self, acc: Accumulator, canonical: Placement) -> Placement | None:
        """Put a canonical placement on its best device (as stage 2 does); None if it fits nowhere."""
        kind = self._kind(0, canonical)
        got = None if kind is None else self._best_device(acc, kind)
        return None if got is None else got[0]

    def _scores(self, acc: Accumulator, kind: Kind) -> tuple[list[tuple], np.ndarray, np.ndarray]:
        """For every candidate device of ``kind`` (its symmetry keys): the step time (s) with ``kind`` added
        there (inf where it does not fit), and the imbalance. The step counts the loads on the device's own
        resources (the spread part of its exchange is the same wherever it goes); imbalance is the growth of
        the sum of squared loads, each relative to its phase's scale (and of memory relative to capacity):
        among equal steps, the emptier device wins. With ``excess_weight``, imbalance also counts, that many
        times over, the growth of the squared load above the phase's scale (stage 1's phase time): a device
        that one table already fills to stage 1's time is avoided even while the step does not show it."""
        keys, load_at, mem_at = self._own_indices(kind)
        load = np.array([v for _, _, v in kind.own])
        phase = np.array([ph for ph, _, _ in kind.own], dtype=np.int64)
        scale = np.asarray(self.scale)[phase]
        now = acc.load_array[load_at]  # (candidates, own resources)
        after = now + load
        step = np.full(len(keys), sum(acc.phase_max))
        for ph in np.unique(phase):
            rise = after[:, phase == ph].max(axis=1) - acc.phase_max[ph]
            step += np.maximum(rise, 0.0)
        imbalance = (load * (2 * now + load) / scale**2).sum(axis=1)
        if self.excess_weight:
            excess = np.maximum(after - scale, 0.0)**2 - np.maximum(now - scale, 0.0)**2
            imbalance += self.excess_weight * (excess / scale**2).sum(axis=1)
        if kind.own_mem:
            used = acc.memory_array[mem_at]
            cap = acc.index.usable[mem_at]
            size = np.array([b for _, b in kind.own_mem])
            step[np.any(used + size > cap, axis=1)] = np.inf
            imbalance += (size * (2 * used + size) / cap**2).sum(axis=1)
        return keys, step, imbalance

    def _own_indices(self, kind: Kind) -> tuple[list[tuple], np.ndarray, np.ndarray]:
        """(candidate keys, (candidates, own loads) indices into Accumulator.load_array, (candidates, own
        memories) indices into memory_array), cached by the names of the kind's own resources."""
        cache_key = (kind.family, len(kind.placement.shards), tuple((ph, r) for ph, r, _ in kind.own),
                     tuple(m for m, _ in kind.own_mem))
        if cache_key not in self._index_cache:
            index, rl = self._load_index, self.sym.relabel
            keys = self.candidates(kind)
            load_at = np.array([[index.of[(ph, rl(key, r))] for ph, r, _ in kind.own] for key in keys],
                               dtype=np.int64).reshape(len(keys), len(kind.own))
            mem_at = np.array([[index.mem_of[rl(key, m)] for m, _ in kind.own_mem] for key in keys],
                              dtype=np.int64).reshape(len(keys), len(kind.own_mem))
            self._index_cache[cache_key] = (keys, load_at, mem_at)
        return self._index_cache[cache_key]

    def _best_key(self, acc: Accumulator, kind: Kind, stay: tuple | None = None) -> tuple[tuple, float] | None:
        """(symmetry key, step s) of the candidate device with the least step time, ties (within 1e-12
        relative) to the least imbalance; None if ``kind`` fits nowhere. With ``stay`` (a key): None also
        unless the best beats staying there (the tables already sit at their own positions)."""
        keys, step, imbalance = self._scores(acc, kind)
        least = step.min()
        if not np.isfinite(least):
            return None
        tied = np.flatnonzero(step <= least + 1e-12 * least)
        best = int(tied[np.argmin(imbalance[tied])])
        if stay is not None:
            here = keys.index(stay)
            if best == here or not _better((step[best], imbalance[best]), (step[here], imbalance[here])):
                return None
        return keys[best], float(step[best])

    def _best_device(self, acc: Accumulator, kind: Kind):
        """(placement, symmetry key) of ``kind`` on its best device (see _scores), added to ``acc``; None if it
        fits nowhere."""
        best = self._best_key(acc, kind)
        if best is None:
            return None
        p = self.relabeled(kind, best[0])
        c = self.model.placement_cost(p)
        if not acc.fits(c):
            return None
        acc.add(c)
        return p, best[0]


def peak_levels(problem: Problem, count: int, cap: np.ndarray | None = None) -> list[PeakLevels]:
    """Peak levels (problem.PeakLevels) for every phase: ``count`` quantiles of the options' peaks above the
    phase's floor and up to ``cap`` (s, per phase; levels where the peaks are dense, so that each separates
    many options), and one at the highest peak."""
    peaks = problem.table_peaks()
    floor = problem.phase_floors()
    out = []
    for ph, pk in enumerate(peaks):
        top = float(pk.max())
        if top <= floor[ph] * (1 + 1e-9):
            continue
        above = np.unique(pk[pk > floor[ph]])
        if cap is not None and (above <= cap[ph]).any():
            above = above[above <= cap[ph]]
        levels = np.unique(np.append(np.quantile(above, np.linspace(0, 1, count)), top))
        members: list[list[np.ndarray]] = [[] for _ in levels]
        for g in problem.groups:  # a group's row at level j only where its set changes above j (the chain does the rest)
            g_peaks = pk[g]
            reach = [frozenset(np.asarray(g)[g_peaks >= level * (1 - 1e-12)].tolist()) for level in levels]
            for j, ids in enumerate(reach):
                if ids and (j + 1 == len(levels) or reach[j + 1] != ids):
                    members[j].append(np.asarray(sorted(ids), dtype=np.int64))
        out.append(PeakLevels(ph, float(floor[ph]), list(np.diff(np.concatenate([[floor[ph]], levels]))), members))
    return out


#: Stage 2's portfolio: it assigns devices once per variant while time is left (the next only if the time left
#: exceeds what the last took), keeping the best plan. A variant is (the phase times its balance measure is
#: relative to: stage 1's with the pigeonhole rows, "counted", or the class averages alone, "plain"; the weight
#: of its excess measure, see _scores). No variant wins everywhere; measured on one stage-1 choice each, with
#: the re-insertions, swaps and repacking (c = counted, p = plain, with the weight), ms:
#:   production-856 on 128 GPUs  c100 8.862  c0 8.882  p100 8.871  p0 8.879
#:   synthetic-1000 on 256 GPUs  c100 4.849  c0 4.849  p100 4.890  p0 4.849
#:   synthetic-1000 on 128 GPUs  c100 6.988  c0 6.993  p100 6.985  p0 7.003
#:   synthetic-1000 on 16 GPUs   c100 25.10  c0 25.08  p100 25.14  p0 25.14
#:   production-856 on 16 GPUs   c100 31.84  c0 31.78  p100 31.84  p0 31.78
#: The large clusters, where time allows one or two variants, favour c100; the small ones run all four.
STAGE2_VARIANTS = (("counted", 100.0), ("counted", 0.0), ("plain", 100.0), ("plain", 0.0))


def _better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Lexicographic (step, imbalance) with a relative tolerance on the step."""
    tol = 1e-12 * max(abs(a[0]), abs(b[0]))
    return a[0] < b[0] - tol or (a[0] <= b[0] + tol and a[1] < b[1])


def solve_two_stage(model: CostModel, sym: Symmetry, cfg: OptionConfig, *, time_limit_s: float, gap: float,
                    backend: str, threads: int | None, tracker: Tracker | None = None):
    """(placements or None, lower bound in s, stage-1 result, wall s). Stage 1 gets the time the kinds
    leave of ``time_limit_s``, less a reserve for stage 2."""
    t0 = time.perf_counter()
    tracker = tracker or Tracker(None)
    planner = TwoStagePlanner(model, sym, cfg, tracker)
    tracker.update("stage 1: option kinds")
    kinds = planner.kinds()
    spent = time.perf_counter() - t0
    reserve = min(0.2 * time_limit_s, 15.0)  # stage 2 + pricing the plan (measured: 8.5 s on 128 GPUs, 10 s on 256)
    result = planner.stage1(kinds, time_limit_s=max(5.0, time_limit_s - spent - reserve), gap=gap,
                            backend=backend, threads=threads)
    if result.chosen is None:
        return None, result.lower_bound_s, result, time.perf_counter() - t0
    deadline = t0 + time_limit_s - 2.0  # pricing the plan takes < 1 s (256 GPUs)
    best: tuple[list[Placement], float] = ([], float("inf"))

    def place(ids: list[int]) -> None:
        nonlocal best
        alt = _stage2(planner, kinds, ids, deadline)
        if alt[0] and alt[1] < best[1]:
            best = alt

    started = time.perf_counter()
    place(result.chosen)
    took = time.perf_counter() - started
    for ids in planner.other_choices:  # stage 1's other choices (the first rounding's, ...): stage 2 may do better
        if deadline - time.perf_counter() < took:
            break
        place(ids)
    if deadline - time.perf_counter() > 30.0:  # time left: branch and bound on stage 1, from the rounding
        plain = dataclasses.replace(planner.stage1_problem, levels=[])  # levels + a start crash CBC
        tracker.update(f"stage 1: {backend} branch and bound")
        try:
            other = ilp.solve(plain, backend=backend, time_limit_s=deadline - time.perf_counter() - 15.0, gap=gap,
                              threads=threads, warm_start=result.chosen, tracker=tracker.bounds_only())
        except SolverError:
            other = None
        if other is not None and other.chosen is not None:
            result.lower_bound_s = max(result.lower_bound_s, min(other.lower_bound_s, result.objective_s))
            if other.chosen != result.chosen:
                place(other.chosen)
    return best[0] or None, result.lower_bound_s, result, time.perf_counter() - t0


def _stage2(planner: TwoStagePlanner, kinds: list[list[Kind]], ids: list[int],
            deadline: float) -> tuple[list[Placement], float]:
    """Stage 2 for one stage-1 choice (option ids of the stage-1 problem): (placements or [], step time s
    without fixed latencies). Devices are assigned once per variant of STAGE2_VARIANTS while time is left,
    each improved by re-insertions, swaps and pairwise repacking (repack.py), and then assigned anew with its
    starved GPUs filled first (fill.py) while that helps. The least step time wins."""
    flat = [k for ks in kinds for k in ks]
    chosen = [flat[i] for i in ids]
    problem = planner.stage1_problem
    scales = {"counted": problem.phase_times(ids),
              "plain": dataclasses.replace(problem, counts=[]).phase_times(ids)}
    planner.tracker.update("stage 2: devices")
    best: tuple[list[Placement], float] = ([], float("inf"))
    took, tried = 0.0, set()
    for scale_from, weight in STAGE2_VARIANTS:
        variant = (tuple(scales[scale_from]), weight)
        if variant in tried:  # no pigeonhole rows: "plain" is "counted"
            continue
        if best[0] and deadline - time.perf_counter() < took:
            break
        tried.add(variant)
        t0 = time.perf_counter()
        planner.set_scale(scales[scale_from])
        placements, acc = _assign_and_improve(planner, chosen, kinds, weight, deadline)
        run_took = time.perf_counter() - t0
        while placements:  # starved GPUs filled first, while that helps; the MIP gets what the run leaves
            mip_time = min(fill.MIP_TIME_S, deadline - time.perf_counter() - run_took)
            if mip_time < fill.MIN_MIP_TIME_S:
                break
            pins = fill.fill_starved(planner, acc, mip_time)
            if not pins:
                break
            kept = dict(planner.where)
            filled, filled_acc = _assign_and_improve(planner, chosen, kinds, weight, deadline, pins)
            if not filled or filled_acc.step >= acc.step:
                planner.where = kept
                break
            placements, acc = filled, filled_acc
        if placements and acc.step < best[1]:
            best = (placements, acc.step)
        took = time.perf_counter() - t0
    return best


def _assign_and_improve(planner: TwoStagePlanner, chosen: list[Kind], kinds: list[list[Kind]], weight: float,
                        deadline: float, pinned: dict[int, tuple[Kind, tuple]] | None = None
                        ) -> tuple[list[Placement], Accumulator]:
    """One stage-2 run: devices assigned (excess weight ``weight``, see _scores; ``pinned`` first), then
    re-insertions, swaps and repacking in rounds while they change something."""
    planner.excess_weight = weight
    placements, acc = planner.assign_best(chosen, kinds, pinned)
    planner.excess_weight = 0.0
    if placements:
        planner.improve(placements, acc, deadline=deadline)
        for _ in range(3):  # swaps and repacking open room for re-insertions, and these for them
            if not (planner.swap(placements, acc, deadline=deadline)
                    + repack(planner, placements, acc, deadline=deadline)):
                break
            if not planner.improve(placements, acc, deadline=deadline):
                break
        planner.tracker.update(incumbent_s=acc.step + sum(planner.model.fixed_latency_s.values()))
    return placements, acc
