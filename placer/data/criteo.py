"""Criteo TSV (the Kaggle Display Advertising and Terabyte click logs): one sample per line, tab separated:
the label, the workload's ``num_dense_features`` integer columns (13 for Criteo), then one hashed categorical
value per feature as a hex string (26 for Criteo); an empty field is a missing value (no lookup for that
sample). Each value becomes ``int(hex, 16) % rows`` of its feature's table, the DLRM preprocessing (the
modulo hashing of dlrm_data_pytorch.py), so every id is in range. Columns map to the workload's features in
order. One-hot: a feature's pooling factor is the share of samples where it is present.

Read in blocks of lines (about 8 MiB), never the whole file.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from placer.data.chunk import MAX_DATA_BYTES, Chunk
from placer.errors import SpecError
from placer.specs.files import open_regular_file

BLOCK_BYTES = 8 << 20


def _parse_column(values, rows: int) -> np.ndarray:
    """Hex strings (bytes) -> ids modulo rows, -1 where empty. Raises ValueError on a value that is not hex."""
    try:
        arr = np.array([int(x, 16) if x else -1 for x in values], dtype=np.int64)
    except OverflowError:  # a hash wider than 63 bits: reduce each in Python
        return np.array([int(x, 16) % rows if x else -1 for x in values], dtype=np.int64)
    present = arr >= 0
    arr[present] %= rows
    return arr


def iter_tsv(path: str, fmap, *, limit_samples: int | None = None,
             progress: Callable[[float], None] | None = None) -> Iterator:
    f, size = open_regular_file(path, max_bytes=MAX_DATA_BYTES, what="Criteo TSV file")
    nd, names = fmap.num_dense, fmap.names
    expected = 1 + nd + len(names)
    first_cat = 1 + nd
    line_no = 0
    read_bytes = 0
    taken = 0
    with f:
        while limit_samples is None or taken < limit_samples:
            lines = f.readlines(BLOCK_BYTES)
            if not lines:
                break
            read_bytes += sum(len(x) for x in lines)
            if limit_samples is not None and taken + len(lines) > limit_samples:
                lines = lines[:limit_samples - taken]
            rows = [x.rstrip(b"\r\n").split(b"\t") for x in lines]
            # a trailing empty line is not a sample
            while rows and rows[-1] == [b""]:
                rows.pop()
            widths = {len(r) for r in rows}
            if widths != {expected} and rows:
                bad = next(i for i, r in enumerate(rows) if len(r) != expected)
                raise SpecError(f"line {line_no + bad + 1} has {len(rows[bad])} tab-separated columns; expected "
                                f"{expected} (label, {nd} dense, {len(names)} categorical: one per feature of the "
                                f"workload, in order)", file=path)
            columns = list(zip(*rows))
            chunk = Chunk(path)
            for j, name in enumerate(names):
                col = columns[first_cat + j] if columns else ()
                try:
                    arr = _parse_column(col, fmap.rows[name])
                except ValueError:
                    bad = next(i for i, x in enumerate(col) if x and not _is_hex(x))
                    raise SpecError(f"line {line_no + bad + 1}, column {first_cat + j + 1} (feature {name}): "
                                    f"{col[bad][:40]!r} is not a hex value", file=path) from None
                present = arr >= 0
                chunk.features[name] = (arr[present], present.astype(np.int64))
            line_no += len(lines)
            taken += len(rows)
            if progress and size:
                progress(min(read_bytes / size, 1.0))
            if rows:
                yield chunk


def _is_hex(x: bytes) -> bool:
    try:
        int(x, 16)
        return True
    except ValueError:
        return False
