"""DistributedModelParallel's step by phase: a torch.profiler profile of DMP's steps (dmp_train.train's
``ops_per_rank``) split into placer's phases (placer/program/ops.py PHASES), and placer's price of the same plan
re-cut the way the profile is cut, so that the two can be compared phase by phase.

Measured (``phases_of``): every operator of one rank's profile counted once, by its SELF CPU time per step
(seconds), in the phase of the first rule of RULES its name matches (so the phases sum to the profile's total self
time). Besides placer's phases two keys: ``dmp_python`` (DMP's own Python: the DDP wrapper's forward, which holds
the Python of every module under it, TorchRec's record_function ranges and awaitables not classified otherwise)
and ``other`` (names no rule knows; ``unclassified`` lists them). What the cut cannot see:

- a name has no caller: the aten ops (cat, copy_, split_with_sizes, ...) that TorchRec's input and output
  distributions call count as ``dense`` with the dense model's own, unless the profile keys a tensor op by its
  first caller that is not one, as ``"aten::cat <- ## EmbeddingBagCollectionAwaitable wait() ##"``: such an op
  goes to its caller's phase (the caller's own rule), but stays dense where the caller is dense too, unknown, or
  DMP's Python (DDP's forward holds the dense model's forward: its aten ops are the dense model's). On the CPU
  the all-to-alls' waits are the self time of the awaitables and autograd functions that block in them;
- the all-to-all collectives (c10d::alltoall_base_, gloo:all_to_all) carry no direction in their name: their time
  is split between the forward and the backward exchange by calls, the backward's share being the calls of the
  backward requesters (``All2All_*_ReqBackward``, one all-to-all each) over the collective's calls;
- under DMP a data-parallel table's weights are a plain parameter of the dense optimizer: their update is in
  ``Optimizer.step#...`` (``dense``, as the dense model's own optimizer step, which placer prices in the dense
  phase), their gradient's all-reduce in DDP's ``c10d::allreduce_`` (``gradient_allreduce``);
- Python outside every recorded range (the training loop, DDP's reducer waiting on its all-reduce in autograd's
  hooks) is in no operator: the profile's total is less than the step;
- the profiler's own overhead (a few microseconds an operator) is in the self times; on GPUs a self CPU time is
  the launch, not the kernel: the cut is meant for CPU (gloo) ranks.

Priced (``priced_phases``): placer's phases of the plan (simulate.phase_times) with three op kinds that placer
prices in another phase than the profile shows them moved, each by its load on the phase's busiest resource (the
one that sets the phase's time; a kind with no load there moves nothing): DMP's own Python per step (``dmp_step``,
priced in embedding_forward) to ``dmp_python``; the input distribution of the ids (``input_dist``, priced in
embedding_forward) to forward_exchange, where the profile has TorchRec's KJT all-to-all; a data-parallel table's
update (``update_dense``, priced in embedding_backward) to dense, where DMP's dense optimizer runs it.
"""
from __future__ import annotations

import re

from placer.program.ops import AR, BWD, BX, DENSE, FWD, FX, PHASES

DMP_PYTHON = "dmp_python"
OTHER = "other"
#: the keys of a phase split: placer's phases, DMP's Python, names no rule knows
KEYS = PHASES + (DMP_PYTHON, OTHER)
#: a rule's phase for the all-to-all collectives: split by direction (module docstring)
ALL_TO_ALL = "all_to_all"
#: the autograd engine's wrapper of a backward node: classified by the node it runs
_ENGINE = "autograd::engine::evaluate_function: "
#: the requesters of a backward all-to-all (one collective each)
_BACKWARD_REQUEST = re.compile(r"All2All\w*_ReqBackward$")

#: tensor ops and autograd's nodes of them (the last rule)
_TENSOR_OP = r"^aten::|^detach_?$|Backward\d*$|^torch::autograd::AccumulateGrad$"
#: (name pattern, phase or ALL_TO_ALL or DMP_PYTHON, why); the first match wins; re.search on the name with the
#: autograd engine's prefix taken off
RULES: tuple[tuple[str, str, str], ...] = (
    (r"^fbgemm::split_embedding_backward_codegen_", PHASES[BWD],
     "FBGEMM's fused TBE backward: gradients sorted, reduced and the embedding optimizer's update in one"),
    (r"^torch::autograd::CppNode<.*SplitLookupFunction_", PHASES[BWD],
     "a TBE's autograd node; for a data-parallel table's dense TBE (_Dense_Op) its whole backward"),
    (r"^fbgemm::(split|dense)_embedding_codegen_(forward|lookup)_", PHASES[FWD],
     "a TBE's forward: the fused (sharded) kernels and a data-parallel table's dense TBE"),
    (r"^fbgemm::(bounds_check_indices|asynchronous_complete_cumsum)$", PHASES[FWD],
     "a TBE's input checks and the offsets of its ids (KeyedJaggedTensor.offsets)"),
    (r"^\[lookup\]_", PHASES[FWD], "TorchRec's lookup module's Python around its TBEs (calibrate's tbe_forward "
                                   "times FBGEMM's TBE module, Python included)"),
    (r"^fbgemm::(permute_\w*sparse\w*|block_bucketize_sparse_features\w*)$", PHASES[FX],
     "the input distribution: ids permuted after their all-to-all, a row-wise table's ids bucketized"),
    (r"^## (KJT\w*|SplitsAllToAll)Awaitable wait\(\) ##$|^## all2all_data:|^## dist_init:|^\[(splits|input)_dist\]_",
     PHASES[FX], "the input distribution: the KeyedJaggedTensor's splits, lengths and ids all-to-all and its waits"),
    (r"^(\w*All2All\w*|ReduceScatter\w*|AllGather\w*)_(Req|Wait)$|^## All2All_\w*_fwd ##$|^\[output_dist(_wait)?\]_"
     r"|^## (PooledEmbeddings|EmbeddingBagCollection)Awaitable wait\(\) ##$|^## Request wait\(\) ##$", PHASES[FX],
     "the output distribution: the pooled embeddings' all-to-all (a row-wise table's reduce-scatter) and its waits"),
    (r"^(\w*All2All\w*|ReduceScatter\w*|AllGather\w*)_(Req|Wait)Backward$|^## All2All_\w*_bwd ##$", PHASES[BX],
     "the pooled embeddings' gradients sent back and their waits"),
    (r"^(autograd::engine::evaluate_function: )?torch::autograd::CppNode<fbgemm_gpu::PermutePooledEmbs\w*", PHASES[BX],
     "the backward of the pooled embeddings' permute (a column-wise table's pieces rejoined): gradients split back"),
    (r"^fbgemm::permute_pooled_embs\w*$", PHASES[FX],
     "the output distribution: the pooled embeddings permuted into the features' order (column-wise pieces joined)"),
    (r"^(c10d::alltoall\w*|gloo:all_to_all)$", ALL_TO_ALL, "the all-to-all collective: split by direction"),
    (r"^c10d::(_?reduce_scatter\w*)$|^gloo:reduce_scatter$", PHASES[FX],
     "a row-wise table's partial sums reduced onto the sample owners"),
    (r"^c10d::(_?allgather\w*)$|^gloo:all_gather$", PHASES[BX], "a row-wise table's gradients gathered back"),
    (r"^(c10d::allreduce\w*|gloo:all_reduce|torch::distributed::reducer::)", PHASES[AR],
     "DDP's gradient all-reduce (the dense model's and the data-parallel tables') and its gradient division"),
    (r"^Optimizer\.(step|zero_grad)#", PHASES[DENSE],
     "the dense optimizer's Python (it also updates the data-parallel tables under DMP)"),
    (r"^DistributedDataParallel\.forward$|^## .* ##$|^\[[^]]*\]_", DMP_PYTHON,
     "DDP's forward wrapper (with the Python of the modules under it), TorchRec's other ranges and awaitables"),
    (_TENSOR_OP, PHASES[DENSE],
     "tensor ops and their autograd nodes: the dense model, its loss and optimizer (and TorchRec's glue, unseen)"),
)
_COMPILED = tuple((re.compile(p), phase) for p, phase, _ in RULES)
_IS_TENSOR_OP = re.compile(r"^aten::|^detach_?$")
#: between an operator and its first caller that is not a tensor op, in a profile keyed by caller
CALLED_BY = " <- "


def _rule_phase(name: str) -> str:
    bare = name[len(_ENGINE):] if name.startswith(_ENGINE) else name
    return next((phase for rx, phase in _COMPILED if rx.search(bare)), OTHER)


def phase_of(name: str) -> str:
    """The phase key (KEYS, or ALL_TO_ALL) of an operator's name: its first rule's, OTHER if none matches; a
    tensor op keyed with its caller (``"aten::cat <- caller"``) takes the caller's phase, unless that is
    ``dmp_python`` or ``other`` (module docstring)."""
    op, _, caller = name.partition(CALLED_BY)
    if caller and _IS_TENSOR_OP.search(op):
        by_caller = _rule_phase(caller)
        if by_caller not in (OTHER, DMP_PYTHON):
            return by_caller
    return _rule_phase(op)


def phases_of(ops: dict) -> dict[str, float]:
    """One rank's profile ``ops`` ({operator name: [self CPU seconds per step, calls per step]}) split into KEYS,
    seconds per step; the values sum to the profile's total self time (module docstring)."""
    out = dict.fromkeys(KEYS, 0.0)
    backward_calls = sum(v[1] for n, v in ops.items() if _BACKWARD_REQUEST.search(n.partition(CALLED_BY)[0]))
    a2a_calls = sum(v[1] for n, v in ops.items() if n.startswith("c10d::") and phase_of(n) == ALL_TO_ALL)
    share = min(1.0, backward_calls / a2a_calls) if a2a_calls else 0.0  # the backward's share of the all-to-alls
    for name, (self_s, _calls) in ops.items():
        key = phase_of(name)
        if key == ALL_TO_ALL:
            out[PHASES[BX]] += self_s * share
            out[PHASES[FX]] += self_s * (1.0 - share)
        else:
            out[key] += self_s
    return out


def unclassified(ops: dict) -> list[str]:
    """The names of ``ops`` that no rule knows (their time is in ``other``), slowest first."""
    return sorted((n for n in ops if phase_of(n) == OTHER), key=lambda n: -ops[n][0])


def slowest_rank_phases(ops_per_rank: list[dict]) -> tuple[int, dict[str, float]]:
    """(rank, its phases_of) of the rank whose profile's total self time is the largest.

    One rank's phases, not each phase's maximum over the ranks: the ranks meet at every collective, so the time one
    rank spends working shows on the others as waiting in the exchange that follows; the maximum per phase would
    count a slow rank's lookup and a fast rank's wait for it both. One rank's phases sum to one timeline, the
    step as that rank lived it; the busiest rank's is the one with the least idle Python outside the profile."""
    phases = [phases_of(ops) for ops in ops_per_rank]
    rank = max(range(len(phases)), key=lambda r: sum(phases[r].values()))
    return rank, phases[rank]


def measured(ops_per_rank: list[dict]) -> dict:
    """What a row of a campaign keeps of a profile: ``measured_phases_s`` (slowest_rank_phases), the rank,
    ``per_rank_phases_s``, ``profile_total_s`` (that rank's total self time per step) and ``unclassified`` (names
    in ``other`` on any rank)."""
    rank, phases = slowest_rank_phases(ops_per_rank)
    names = sorted({n for ops in ops_per_rank for n in unclassified(ops)})
    return {"measured_phases_s": phases, "measured_phases_rank": rank,
            "per_rank_phases_s": [phases_of(ops) for ops in ops_per_rank],
            "profile_total_s": sum(v[0] for v in ops_per_rank[rank].values()), "unclassified": names}


#: priced op kinds (placer/program/torchrec_build.py) moved to the phase the profile shows them in:
#: (kind, the phase placer prices it in, the key it moves to)
MOVES = (("dmp_step", FWD, DMP_PYTHON), ("input_dist", FWD, PHASES[FX]), ("update_dense", BWD, PHASES[DENSE]))


def priced_phases(model, plan) -> dict[str, float]:
    """placer's phases of ``plan`` on ``model`` (a CostModel under the torchrec trainer), seconds, re-cut as the
    profile is cut (module docstring: MOVES); KEYS, ``other`` 0. Sums to placer's step."""
    from placer.cost import Cost, cost_of
    from placer.simulate import phase_times, total_cost

    times, busiest = phase_times(model, total_cost(model, plan))
    out = dict.fromkeys(KEYS, 0.0)
    out.update({PHASES[p]: t for p, t in enumerate(times)})
    every_gpu = (model.builder.gpu_streams, model.builder.gpu_memories)
    for kind, phase, to in MOVES:
        if busiest[phase] is None:
            continue
        pick = lambda ops: [op for op in ops if op.kind == kind and op.phase == phase]  # noqa: E731
        moved = Cost()
        moved += cost_of(pick(model.base_ops), (), every_gpu)
        for p in plan.placements:  # as total_cost adds them: a group's fixed costs charged once
            moved += cost_of(pick(model.placement_ops(p)), (), every_gpu)
        seconds = moved.total_loads().get((phase, busiest[phase]), 0.0)
        out[PHASES[phase]] -= seconds
        out[to] += seconds
    return out
