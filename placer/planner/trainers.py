"""What a solve may offer under the workload's trainer: every placer form for placer's runner; under TorchRec
(``--trainer torchrec``) only what DistributedModelParallel runs (program/torchrec_build.py): table-, row- and
column-wise shards and data-parallel replicas, rows in HBM, in host memory read by the GPU (fused_uvm) or split
into a cache of hot rows (fused_uvm_caching), fp32 or fp16; no table on a host CPU, no QR, TT, int8 or node-local
replica."""
from __future__ import annotations

import dataclasses

from placer.errors import SpecError
from placer.forms.storage import STORAGE

#: methods that produce only forms TorchRec cannot run, and why
TORCHREC_REFUSED = {
    "host_cpu": "every table looked up by the host CPU, which is not a TorchRec sharding",
    **{name: f"TorchRec has no {f.torchrec_lacks}" for name, f in STORAGE.items()},
}


def options_for(workload, options):
    """``options`` (options.OptionConfig) less the forms the workload's trainer cannot run."""
    if workload.trainer != "torchrec":
        return options
    return dataclasses.replace(options, host=False, compressed=False, node_local=False)


def for_trainer(workload, config):
    """``config`` (planner.solve.SolveConfig) restricted to the forms the workload's trainer runs; SpecError naming
    --method for a method whose plans the trainer cannot run."""
    if workload.trainer != "torchrec":
        return config
    why = TORCHREC_REFUSED.get(config.method)
    if why is not None:
        raise SpecError(f"--method {config.method} with --trainer torchrec: {why}; choose ilp, a baseline or "
                        "torchrec", field="--method")
    return dataclasses.replace(config, options=options_for(workload, config.options))
