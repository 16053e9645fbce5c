"""Hot rows, UVM and memory tiers: how a shard's rows are split between HBM and a slower memory. A shard keeps its
hottest ``hbm_rows`` in the HBM of its GPU and the rest (``host_rows``, the cold rows) in its host's memory, read by
the GPU across PCIe: every row in HBM, none (UVM, TorchRec's fused_uvm) or a split (hot rows in HBM, TorchRec's
fused_uvm_caching with the hot fraction as its load factor). Where the node has memory tiers beyond host DRAM
(the hardware spec's ``tiers``: a CXL expander, ...), the cold rows may live in one of them instead
(``Shard.cold_memory``): the GPU reads them as it reads host memory, across the links of its path, at the rate
Topology.read_costs gives. A memory tier is data: a spec that declares one is priced and planned with no code of
its own (table-wise options offer it; placer's runner and TorchRec refuse such plans, naming the tier).
Levels: hot_rows_levels; pricing: program/build.py and program/locations.py (a split shard's lookups go to both
memories; Shard.is_split); TorchRec: torchrec_io/mapping.kernel_of."""
from __future__ import annotations

from placer.errors import SpecError


def tier_label(hot_fraction: float) -> str:
    """'' (every row in HBM), ' uvm' (none) or ' hot 10%': what a placement's label adds for its rows' tiers."""
    if hot_fraction == 0:
        return " uvm"
    return f" hot {hot_fraction:.0%}" if hot_fraction < 1 else ""


def local_tiers(topo, gpu: str) -> list[str]:
    """The local names of the memory tiers of ``gpu``'s node ('cxl0'), in the spec's order."""
    return [m.rsplit("/", 1)[-1] for m in topo.tiers_of(gpu)]


def hot_rows_levels(rows: int, levels) -> list[int]:
    """Distinct HBM row counts for a shard of ``rows`` rows at the hot fractions ``levels``, in their order."""
    out = []
    for f in levels:
        k = int(round(f * rows))
        if k not in out:
            out.append(k)
    return out


def refuse_tiers(plan, what: str, why: str, file: str | None = None) -> None:
    """SpecError (exit 2) naming the first shard of ``plan`` whose cold rows live in a memory tier, for a command
    (``what``) that cannot run or write it as planned (``why``); nothing for a plan without one."""
    for i, p in enumerate(plan.placements):
        for j, s in enumerate(p.shards):
            if s.cold_memory is not None:
                raise SpecError(f"{what}: table {p.table!r} keeps its cold rows in the memory tier {s.cold_memory!r} "
                                f"of {s.device}'s node, and {why}", file=file,
                                field=f"placements[{i}].shards[{j}].cold_memory")

