"""The names plan files give the shardings, and the one fact of them the plan's data model needs (placer/plan.py
imports this module alone of placer/forms, so that every form's module may build Placements): which shardings
keep their rows in a host's memory, looked up by its CPU (no HBM tiers to label). The registry
(placer/forms/shardings.py) lists the same names, in this order, with everything else each form says; a test
checks that the two agree."""

TABLE_WISE = "table_wise"
ROW_WISE = "row_wise"
COLUMN_WISE = "column_wise"
DATA_PARALLEL = "data_parallel"
HOST = "host"

#: every sharding's name, in the registry's order
SHARDING_NAMES = (TABLE_WISE, ROW_WISE, COLUMN_WISE, DATA_PARALLEL, HOST)
#: the shardings whose rows a host CPU looks up (ShardingForm.on_gpus false)
CPU_LOOKUP = (HOST,)
