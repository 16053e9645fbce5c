"""Placement forms, one module each, and their registries.

Shardings (how a table is cut into shards and where they live; ``Placement.sharding``): table_wise.py,
row_wise.py, column_wise.py, data_parallel.py, host.py, registered in shardings.py. Storage forms (how the rows are
kept): qr.py, tt.py, int8.py (compressed rows, ``Placement.compression``) and node_local.py (a replica per node,
``Placement.replicated``), registered in storage.py. A shard's rows may further be split between HBM and host
memory (hot rows / UVM: tiers.py). base.py says what a form is; names.py holds the shardings' names, the one
module of this package that placer/plan.py imports (every form's module builds Placements); docs/design.md says
where a new form goes. This package's __init__ imports nothing, so that plan.py may import names.py.
"""
