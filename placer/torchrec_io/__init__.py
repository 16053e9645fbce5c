"""TorchRec plans in and out (docs/torchrec.md).

- ``mapping``: one placer Placement <-> one TorchRec ParameterSharding (as plain JSON-able dicts), global ranks.
- ``exporter``: a placer plan -> the export document (ParameterSharding + ParameterConstraints per table, the
  nearest-kernel notes and the predicted step time of what TorchRec will run), and the generated module.
- ``importer``: an export document, or a pickled ShardingPlan, -> a placer Plan.
- ``plan_builder``: the standalone module ``placer export`` copies next to the JSON; it builds TorchRec's
  ShardingPlan and ParameterConstraints (needs torchrec, not placer).
- ``torchrec_types``: TorchRec objects -> the document (needs torchrec).

Everything but ``plan_builder`` and ``torchrec_types`` works without torchrec installed.
"""
from __future__ import annotations

#: the install line that works on a CPU-only machine (a plain ``pip install torchrec`` pulls the CUDA
#: fbgemm-gpu into the same folder and breaks); tested with these versions
INSTALL_HINT = ("python3 -m pip install torch==2.13.0 fbgemm-gpu-cpu==1.8.0 tensordict torchmetrics==1.0.3 "
                "pyre-extensions tqdm && python3 -m pip install --no-deps torchrec==1.8.0")

FORMAT = "placer-torchrec-plan"
FORMAT_VERSION = 1
