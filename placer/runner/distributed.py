"""Several processes: the runner over torch.distributed, with the real collectives. The entry points; the work
is in one module per job:

- runner/ranks.py:        which rank runs which plan device and owns which samples; the memory pre-flight
- runner/exchange.py:     the all-to-all of the shards' pooled outputs to the sample owners, and back
- runner/node_ranks.py:   node-local tables: the replica a rank holds (its node's) and the samples it serves
- runner/rank_trainer.py: one rank's step program: its groups, its side of the exchange, the dense model
- runner/rank_timing.py:  the instrumented passes' timers (ranks meet at barriers, charged to nothing)
- runner/worker.py:       one rank from its environment to its record (``worker_main``)
- runner/rank_results.py: the ranks' records merged into the result, on rank 0
- runner/launcher.py:     ``placer run --nproc N``: N local processes (``launch``, ``run_distributed``)

Launch: ``placer run HW WL PLAN --nproc N`` starts N local processes (``python -m placer.runner``) with the
environment torchrun gives, and ``torchrun --nproc-per-node N -m placer.runner HW WL PLAN ...`` runs the same
worker under torchrun (several nodes: torchrun's --nnodes/--node-rank/--rdzv-endpoint). Backend: NCCL on
cuda (rank on cuda:LOCAL_RANK), gloo on cpu.

Plan GPU i runs on rank i mod N, a host's tables on the rank of its node's first GPU; rank r owns samples
[B*r/N, B*(r+1)/N) of every global batch and holds one replica of every data-parallel table (pooling those
samples). Every rank builds the step program's fused groups of its plan devices; each shard's pooled output
goes to the sample owners, who assemble the tables over their samples; the backward is the reverse
all-to-all, then every group's pack_grad, sort, segment_reduce and update; replicas' dense gradients are
summed over the ranks. So N processes train exactly like one (tests/test_distributed.py).
"""
from __future__ import annotations

from placer.runner.launcher import free_port, launch, run_distributed
from placer.runner.worker import emit, worker_main

__all__ = ["emit", "free_port", "launch", "run_distributed", "worker_main"]
