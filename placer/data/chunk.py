"""What every reader of real ids yields (placer/data/readers.py, criteo.py): a ``Chunk`` of consecutive samples,
and the bound on the files they open."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: largest data file opened (bytes); files are streamed, so this only guards against absurd inputs
MAX_DATA_BYTES = 2**44


@dataclass
class Chunk:
    """The file a run of samples came from and, per workload feature, their ids and how many ids each sample
    has: name -> (ids, lengths)."""
    file: str
    features: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
