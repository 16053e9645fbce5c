"""Why a workload does not fit, in the user's terms (docs/design.md 'infeasible'): every message either names a
shortfall in GiB (which memory, which table or the dense model) or says that the candidate options, not the
capacity, are the limit, and which split would fit.

All sizes are bytes inside and GiB in messages.
"""
from __future__ import annotations

import numpy as np

from placer.cost import CostModel
from placer.errors import InfeasibleError
from placer.options import OptionConfig, precisions
from placer.planner import fit
from placer.planner.constrained import constraints_note
from placer.planner.problem import Problem
from placer.units import GiB

SLOT_BYTES = 4  # a hot/cold split's slot map: one int32 per row of the shard, in host DRAM (program/build.py)


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GiB:,.1f} GiB"


def machine_sentence(model: CostModel) -> str:
    """'the 2 GPU(s) + 1 host(s) hold 187.6 GiB for tables (HBM 75.6 GiB, host DRAM 112.0 GiB)'."""
    topo, usable = model.topo, model.usable_memory
    gpu_mem = {topo.memory_of(g) for g in topo.gpus}
    hbm = sum(max(v, 0.0) for m, v in usable.items() if m in gpu_mem)
    host = sum(max(v, 0.0) for m, v in usable.items() if m not in gpu_mem)
    return (f"the {len(topo.gpus)} GPU(s) + {len(topo.hosts)} host(s) hold {_gib(hbm + host)} for tables "
            f"(HBM {_gib(hbm)}, host DRAM {_gib(host)}, after reserves and the dense model)")


def total_usable(model: CostModel) -> float:
    return sum(max(v, 0.0) for v in model.usable_memory.values())


def largest_free(model: CostModel) -> str:
    """'node0/host 112.0 GiB': the memory with the most usable bytes."""
    m = max(model.usable_memory, key=model.usable_memory.get)
    return f"{m} {_gib(max(model.usable_memory[m], 0.0))}"


def check_dense(model: CostModel) -> None:
    """Raise when the placement-free part of the step (dense model, exchange buffers) overflows a memory."""
    over = [(m, -v) for m, v in model.usable_memory.items() if v < 0]
    if not over:
        return
    m, short = max(over, key=lambda o: o[1])
    mem = model.topo.memories[m]
    headroom = model.wl.constraints.hbm_headroom_GiB if mem.kind == "hbm" else 0.0
    kept = f", less the workload's HBM headroom of {headroom:g} GiB (constraints.hbm_headroom_GiB)" if headroom else ""
    raise InfeasibleError(
        f"the dense model (weights, gradients, optimizer state, activations at batch {model.wl.batch_size:,}) "
        f"and the exchange buffers need {_gib(model.base_cost.memory.get(m, 0.0))} in {m}, which holds "
        f"{_gib(mem.usable_bytes)} after its {_gib(mem.reserve_bytes)} reserve{kept}: short by "
        f"{_gib(short)} before any table" + (f" ({len(over)} memories short)" if len(over) > 1 else "")
        + (". Use a smaller batch or dense model, or GPUs with more memory." if not headroom else
           ". Lower the headroom, use a smaller batch or dense model, or GPUs with more memory."))


def min_footprint_bytes(problem: Problem) -> float:
    """Bytes the tables need at least: each at its candidate option with the least memory, summed."""
    total = np.zeros(problem.num_options)
    for _, (ids, b) in problem.mem_rows.items():
        total[ids] += b
    return float(sum(total[g].min() for g in problem.groups))


def capacity_sentence(model: CostModel, problem: Problem | None = None) -> str:
    need = min_footprint_bytes(problem) if problem is not None else model.wl.total_bytes()
    how = ("each at its smallest candidate footprint, optimizer state and buffers included" if problem is not None
           else "at their own precision, optimizer state included")
    return f"tables need at least {_gib(need)} ({how}); {machine_sentence(model)}"


def table_nowhere(model: CostModel, names: list[str], cfg: OptionConfig) -> InfeasibleError:
    """The error for tables none of whose candidate options fits the empty machine (``names`` largest
    first): a capacity shortfall, or the menu as the limit with a split that would fit; the workload's constraints
    named where it has some (constrained.constraints_note)."""
    return InfeasibleError(str(_table_nowhere(model, names, cfg)) + constraints_note(model))


def _table_nowhere(model: CostModel, names: list[str], cfg: OptionConfig) -> InfeasibleError:
    t = model.tables[names[0]]
    more = f" ({len(names) - 1} more tables too)" if len(names) > 1 else ""
    need = fit.footprint_bytes(model, t)
    hold = total_usable(model)
    head = f"table {t.name!r} ({t.rows:,} rows x {t.dim}, {_gib(need)} with optimizer state)"
    if need > hold:
        return InfeasibleError(
            f"{head} does not fit: {machine_sentence(model)}. Short by {_gib(need - hold)}{more}. "
            "Add host DRAM or GPUs, allow fp16 storage, or use a smaller optimizer state.")
    for prec in sorted(precisions(t, OptionConfig()), key=t.row_bytes):
        for g in reversed(fit.groups(model)):
            s = fit.fitting_split(model, t, g, prec)
            if s is not None:
                return InfeasibleError(
                    f"no plan among the candidate options: {head} fits none of them{more}, but {s.describe()}. "
                    + _menu_hint(cfg, s))
    best = None  # (short, need, group, precision): the split closest to fitting
    for prec in precisions(t, OptionConfig()):
        for g in fit.groups(model):
            got = fit.shortfall(model, t, g, prec)
            if got is not None and (best is None or got[0] - got[1] < best[0]):
                best = (got[0] - got[1], got[0], g, prec)
    if best is not None and best[0] > 0:
        short, need_split, g, prec = best
        where = f"{g[0]} and its host" if len(g) == 1 else f"{len(g)} GPUs and their host DRAM"
        return InfeasibleError(
            f"{head} does not fit: split over {where} at {prec} with HBM full it needs {_gib(need_split)} "
            f"(rows, optimizer state and a 4-byte slot map per row in host DRAM), and those memories "
            f"hold {_gib(need_split - short)} for tables. Short by {_gib(short)}{more}. "
            "Add host DRAM or GPUs, allow fp16 storage, or use a smaller optimizer state.")
    return InfeasibleError(
        f"no plan among the candidate options: {head} fits none of them{more}, though "
        f"{machine_sentence(model)} (largest free memory {largest_free(model)}). Add host DRAM or GPUs, or "
        "allow fp16 storage.")


def _menu_hint(cfg: OptionConfig, s: fit.Split) -> str:
    if len(s.gpus) > 1 and not cfg.row_wise:
        return "Allow row-wise sharding."
    if s.precision == "fp16" and not cfg.fp16:
        return "Allow fp16 storage."
    return f"Offer the hot-row level {s.hi:.4g} (OptionConfig.hot_levels)."


def explain_infeasible(model: CostModel, problem: Problem, names: list[str], cfg: OptionConfig) -> None:
    """Raise InfeasibleError in the user's terms when the dense part, a table, or the total cannot fit."""
    check_dense(model)
    fits_alone = np.ones(problem.num_options, dtype=bool)
    for m, (ids, b) in problem.mem_rows.items():
        fits_alone[ids[b > problem.mem_capacity[m]]] = False
    nowhere = [names[i] for i, g in enumerate(problem.groups) if not fits_alone[g].any()]
    if nowhere:
        nowhere.sort(key=lambda n: -fit.footprint_bytes(model, model.tables[n]))
        raise table_nowhere(model, nowhere, cfg)
    need, hold = min_footprint_bytes(problem), total_usable(model)
    if need > hold:
        raise InfeasibleError("does not fit: " + capacity_sentence(model, problem)
                              + f". Short by {_gib(need - hold)}. Add host DRAM or GPUs, allow fp16 storage, "
                              "or use a smaller optimizer state." + constraints_note(model))


def check_tables(model: CostModel, cfg: OptionConfig) -> None:
    """Raise when a big table (planner/fit.py) fits neither whole in one memory nor split over any device
    group: a quick check for planners that do not price every option first (the two-stage planner)."""
    exc = _big_table_nowhere(model, cfg)
    if exc is not None:
        raise InfeasibleError(str(exc) + constraints_note(model))


def _big_table_nowhere(model: CostModel, cfg: OptionConfig) -> InfeasibleError | None:
    """check_tables' error, without the constraints' note (None: every big table fits somewhere)."""
    topo = model.topo
    if any(topo.memory_of(g) == topo.memory_of(topo.host_of(g)) for g in topo.gpus):
        return None  # unified memory: fit.py's HBM/host split does not apply; the solver's verdict stands
    largest = max(model.usable_memory.values(), default=0.0)
    for t in fit.big_tables(model):
        if fit.footprint_bytes(model, t) <= largest:
            continue
        if not any(fit.fitting_split(model, t, g, prec) is not None
                   for prec in precisions(t, OptionConfig()) for g in fit.groups(model)):
            return _table_nowhere(model, [t.name], cfg)
    return None


def after_solver(model: CostModel, problem: Problem | None, cfg: OptionConfig = OptionConfig()) -> InfeasibleError:
    """The error when the solver proved that no choice of candidate options fits memory (the workload's
    constraints named where it has some)."""
    return InfeasibleError(str(_after_solver(model, problem, cfg)) + constraints_note(model))


def _after_solver(model: CostModel, problem: Problem | None, cfg: OptionConfig) -> InfeasibleError:
    exc = _big_table_nowhere(model, cfg)
    if exc is not None:
        return exc
    need = min_footprint_bytes(problem) if problem is not None else model.wl.total_bytes()
    hold = total_usable(model)
    if need > hold:
        return InfeasibleError("does not fit: " + capacity_sentence(model, problem)
                               + f". Short by {_gib(need - hold)}. Add host DRAM or GPUs, allow fp16 storage, "
                               "or use a smaller optimizer state.")
    big = fit.big_tables(model) or sorted(model.wl.tables, key=lambda t: -fit.footprint_bytes(model, t))[:3]
    slots = sum(t.rows * SLOT_BYTES for t in big)  # a split table's slot map in host DRAM
    over = need + slots - hold
    named = ", ".join(f"{t.name} {_gib(fit.footprint_bytes(model, t))}" for t in big[:3]) + (
        f" and {len(big) - 3} more" if len(big) > 3 else "")
    return InfeasibleError(
        "no plan among the candidate options fits every table at once: " + capacity_sentence(model, problem)
        + ". The bytes fit in total, so packing is the limit: whole tables and the offered splits cannot share "
        f"the memories out (largest tables: {named}; largest free memory {largest_free(model)})"
        + (f", and splitting those tables adds a slot map of {SLOT_BYTES} bytes per row in host DRAM "
           f"({_gib(slots)}), which would leave the machine short by up to {_gib(over)}" if over > 0 else "")
        + ". Add host DRAM or GPUs, or allow fp16 storage.")
