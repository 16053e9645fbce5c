"""Hot rows and UVM: how a shard's rows are split between HBM and host memory. A shard keeps its hottest
``hbm_rows`` in the HBM of its GPU and the rest (``host_rows``) in its host's memory, read by the GPU across PCIe:
every row in HBM, none (UVM, TorchRec's fused_uvm) or a split (hot rows in HBM, TorchRec's fused_uvm_caching with
the hot fraction as its load factor). Levels: options.hot_rows_levels; pricing: program/build.py (a split shard's
lookups go to both memories; Shard.is_split); TorchRec: torchrec_io/mapping.kernel_of."""
from __future__ import annotations


def tier_label(hot_fraction: float) -> str:
    """'' (every row in HBM), ' uvm' (none) or ' hot 10%': what a placement's label adds for its rows' tiers."""
    if hot_fraction == 0:
        return " uvm"
    return f" hot {hot_fraction:.0%}" if hot_fraction < 1 else ""


def hot_rows_levels(rows: int, levels) -> list[int]:
    """Distinct HBM row counts for a shard of ``rows`` rows at the hot fractions ``levels``, in their order."""
    out = []
    for f in levels:
        k = int(round(f * rows))
        if k not in out:
            out.append(k)
    return out
