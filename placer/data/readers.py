"""Readers of real sparse ids: one stream of chunks per data set, whatever the format (``placer profile`` and
``placer run --ids`` share them).

A reader yields ``Chunk``s: the file they came from and, per workload feature, the ids of a run of
consecutive samples and how many ids each sample has (``lengths``). A chunk may carry every feature (Criteo
TSV: a block of lines) or one (columnar formats: a block of one feature's samples). Memory is bounded by the
chunk size, never by the file.

Formats (``--format``; guessed from the file name when not given):

- ``criteo-tsv`` (placer/data/criteo.py): label, the dense ints, then one hashed hex value per feature.
- ``npy``: a ``.npy`` holds one feature (named by the file stem): 1-D = one id per sample, 2-D (N, k) = up to k
  ids per sample with negative entries as padding. A ``.npz`` holds several: keys are feature names.
- ``dlrm-torch``: the layout of the public DLRM embedding-lookup data sets (facebookresearch/dlrm_datasets):
  ``indices, offsets, lengths = torch.load(f)``: ``indices`` 1-D (every id, table-major), ``offsets`` 1-D of
  T*B+1 (CSR: the ids of table t, sample b are indices[offsets[t*B+b]:offsets[t*B+b+1]]), ``lengths`` (T, B)
  (optional: a 2-tuple ``(indices, offsets)`` is read too, B = (len(offsets)-1)/T). Table t is the workload's
  feature t. Loaded with ``weights_only=True`` (memory-mapped when the file is in the zip format).

Ids must lie in [0, rows) of the feature's table: anything else is a SpecError naming the file, the feature and
the value (Criteo hex values are reduced modulo rows, as the DLRM preprocessing does, so they always fit).
"""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from placer.data.chunk import MAX_DATA_BYTES, Chunk
from placer.data.criteo import iter_tsv
from placer.errors import SpecError
from placer.specs.files import open_regular_file
from placer.specs.workload import Workload

FORMATS = ("criteo-tsv", "dlrm-torch", "npy")
#: ids per chunk of a columnar reader
CHUNK_IDS = 1 << 20

Progress = Callable[[float], None]  # called with the fraction of the current file just consumed


def guess_format(path: str) -> str:
    name = path.lower()
    if name.endswith((".npy", ".npz")):
        return "npy"
    if name.endswith((".pt", ".pth", ".torch")):
        return "dlrm-torch"
    return "criteo-tsv"


class FeatureMap:
    """The workload's features in order, with each one's table rows."""

    def __init__(self, workload: Workload):
        rows = {t.name: t.rows for t in workload.tables}
        self.names = [f.name for f in workload.resolved_features]
        self.table = {f.name: f.table for f in workload.resolved_features}
        self.rows = {f.name: rows[f.table] for f in workload.resolved_features}
        self.num_dense = workload.dense.num_dense_features


def check_range(ids: np.ndarray, rows: int, file: str, feature: str) -> None:
    if ids.size == 0:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= rows:
        bad = lo if lo < 0 else hi
        raise SpecError(f"feature {feature}: id {bad} is out of range for its table's {rows:,} rows "
                        f"(ids must lie in 0..{rows - 1:,})", file=file)


def iter_chunks(paths: list[str], fmt: str | None, fmap: FeatureMap, *, limit_ids: int | None = None,
                limit_samples: int | None = None, progress: Callable[[str, float], None] | None = None
                ) -> Iterator[Chunk]:
    """Chunks of every file in turn. ``limit_ids``: stop after about that many ids in all (columnar formats:
    each feature's share, limit/features); ``limit_samples``: read at most that many samples per feature."""
    per_feature = None if limit_ids is None else max(1, -(-limit_ids // max(len(fmap.names), 1)))
    seen_ids = 0
    samples: dict[str, int] = {}
    ids_per_feature: dict[str, int] = {}
    for path in paths:
        kind = fmt or guess_format(path)
        report = (lambda frac, p=path: progress(p, frac)) if progress else None
        if kind == "criteo-tsv":
            left = None if limit_samples is None else limit_samples - samples.get("", 0)
            if left is not None and left <= 0:
                return
            for chunk in iter_tsv(path, fmap, limit_samples=left, progress=report):
                n = next(iter(chunk.features.values()))[1].size if chunk.features else 0
                samples[""] = samples.get("", 0) + n
                seen_ids += sum(v[0].size for v in chunk.features.values())
                yield chunk
                if limit_ids is not None and seen_ids >= limit_ids:
                    return
            continue
        if kind == "npy":
            streams = _npy_streams(path, fmap, report)
        elif kind == "dlrm-torch":
            streams = _torch_streams(path, fmap, report)
        else:
            raise SpecError(f"unknown format {kind!r}; use one of {', '.join(FORMATS)}", field="--format")
        for feature, stream in streams:
            for ids, lengths in stream:
                cap = []
                if limit_samples is not None:
                    cap.append(limit_samples - samples.get(feature, 0))
                if per_feature is not None:
                    left_ids = per_feature - ids_per_feature.get(feature, 0)
                    cap.append(int(np.searchsorted(np.cumsum(lengths), left_ids) + 1))
                if cap:
                    keep = max(0, min(min(cap), lengths.size))
                    if keep < lengths.size:
                        ids, lengths = ids[:int(lengths[:keep].sum())], lengths[:keep]
                if lengths.size:
                    samples[feature] = samples.get(feature, 0) + lengths.size
                    ids_per_feature[feature] = ids_per_feature.get(feature, 0) + ids.size
                    yield Chunk(path, {feature: (ids, lengths)})
                if (limit_samples is not None and samples.get(feature, 0) >= limit_samples) or \
                        (per_feature is not None and ids_per_feature.get(feature, 0) >= per_feature):
                    break


# ---- .npy / .npz -------------------------------------------------------------------------------------------------

def _npy_streams(path: str, fmap: FeatureMap, report: Progress | None):
    f, size = open_regular_file(path, max_bytes=MAX_DATA_BYTES, what="ids file (.npy or .npz)")
    with f:
        head = f.read(6)
        f.seek(0)
        if head.startswith(b"PK"):
            try:
                zf = zipfile.ZipFile(f)
            except (zipfile.BadZipFile, OSError) as exc:
                raise SpecError(f"unreadable .npz file: {exc}", file=path) from None
            with zf:
                members = [m for m in zf.infolist() if not m.is_dir()]
                names = [m.filename[:-4] if m.filename.endswith(".npy") else m.filename for m in members]
                unknown = [n for n in names if n not in fmap.rows]
                if unknown:
                    raise SpecError(f"key {unknown[0]!r} is not a feature of the workload (its features: "
                                    f"{', '.join(fmap.names[:10])}{', ...' if len(fmap.names) > 10 else ''})",
                                    file=path)
                total = sum(m.file_size for m in members) or 1
                done = 0
                for m, name in zip(members, names):
                    with zf.open(m) as member:
                        def rep(frac, base=done, share=m.file_size / total):
                            if report:
                                report(base / total + frac * share)
                        yield name, _npy_chunks(member, m.file_size, f"{path}[{name}]", name, fmap.rows[name], rep)
                    done += m.file_size
            return
        name = Path(path).stem
        if name not in fmap.rows:
            raise SpecError(f"a .npy file holds one feature named by the file stem, and {name!r} is not a feature "
                            f"of the workload (its features: {', '.join(fmap.names[:10])}"
                            f"{', ...' if len(fmap.names) > 10 else ''}); or give a .npz keyed by feature", file=path)
        yield name, _npy_chunks(f, size, path, name, fmap.rows[name], report)


def _npy_chunks(f, size: int, where: str, feature: str, rows: int, report: Progress | None):
    """(ids, lengths) blocks of one .npy stream, read CHUNK_IDS values at a time."""
    try:
        version = np.lib.format.read_magic(f)
        reader = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in reader:
            raise ValueError(f"unsupported .npy version {version}")
        shape, fortran, dtype = reader[version](f)
    except (ValueError, OSError, EOFError) as exc:
        raise SpecError(f"is not a readable .npy array ({exc}); save the ids with numpy.save", file=where) from None
    if dtype.hasobject or dtype.kind not in "iu":
        raise SpecError(f"holds {dtype} values; expected integer ids (feature {feature})", file=where)
    if len(shape) not in (1, 2) or (len(shape) == 2 and fortran and shape[1] > 1):
        raise SpecError(f"holds an array of shape {shape}{' in Fortran order' if fortran else ''}; expected "
                        "1-D ids (one per sample) or C-order 2-D (samples, ids per sample)", file=where)
    n = shape[0]
    width = shape[1] if len(shape) == 2 else 1
    row_bytes = dtype.itemsize * width
    per = max(1, CHUNK_IDS // max(width, 1))
    done = 0
    while done < n:
        k = min(per, n - done)
        buf = f.read(k * row_bytes)
        if len(buf) < k * row_bytes:
            raise SpecError(f"the file ends early: its header promises {n:,} samples", file=where)
        block = np.frombuffer(buf, dtype=dtype).astype(np.int64, copy=False)
        if dtype.kind == "u" and dtype.itemsize == 8 and block.size and int(block.min()) < 0:
            raise SpecError(f"feature {feature}: id {int(np.frombuffer(buf, dtype=dtype).max())} is out of range "
                            f"for its table's {rows:,} rows", file=where)
        if len(shape) == 1:
            check_range(block, rows, where, feature)
            ids, lengths = block, np.ones(k, dtype=np.int64)
        else:
            block = block.reshape(k, width)
            keep = block >= 0  # negative entries pad short samples
            ids = block[keep]
            check_range(ids, rows, where, feature)
            lengths = keep.sum(axis=1).astype(np.int64)
        done += k
        if report:
            report(done / n)
        yield ids, lengths


# ---- DLRM data sets (torch) -------------------------------------------------------------------------------------

def _torch_streams(path: str, fmap: FeatureMap, report: Progress | None):
    import torch

    f, _ = open_regular_file(path, max_bytes=MAX_DATA_BYTES, what="DLRM torch file")
    f.close()  # checked: a regular file; torch opens it by name (memory-mapped when it can)
    try:
        try:
            data = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
        except RuntimeError:  # the legacy (non-zip) format cannot be memory-mapped
            data = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many kinds (UnpicklingError, RuntimeError, EOFError, ...)
        raise SpecError(f"not a torch file placer can load with weights_only=True ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''})", file=path) from None
    layout = "expected a tuple (indices, offsets[, lengths]) of integer tensors (the DLRM data sets' layout)"
    if not isinstance(data, (tuple, list)) or len(data) not in (2, 3) or \
            not all(isinstance(x, torch.Tensor) for x in data):
        raise SpecError(f"holds {type(data).__name__}; {layout}", file=path)
    if any(x.is_floating_point() or x.is_complex() or x.dtype == torch.bool for x in data):
        raise SpecError(f"holds {', '.join(str(x.dtype) for x in data)} tensors; {layout}", file=path)
    indices, offsets = data[0].reshape(-1), data[1].reshape(-1)
    T = len(fmap.names)
    if len(data) == 3:
        lengths = data[2]
        if lengths.dim() != 2:
            raise SpecError(f"lengths has shape {tuple(lengths.shape)}; {layout} with lengths (tables, batch)",
                            file=path)
        if lengths.shape[0] != T:
            raise SpecError(f"holds {lengths.shape[0]} tables (lengths has shape {tuple(lengths.shape)}); the "
                            f"workload has {T} features, matched in order", file=path)
        B = int(lengths.shape[1])
    else:
        if (offsets.numel() - 1) % T:
            raise SpecError(f"offsets has {offsets.numel():,} entries, not tables*batch+1 for the workload's {T} "
                            "features", file=path)
        B = (offsets.numel() - 1) // T
    if offsets.numel() != T * B + 1:
        raise SpecError(f"offsets has {offsets.numel():,} entries; expected tables*batch+1 = {T * B + 1:,}",
                        file=path)
    off = offsets.numpy() if hasattr(offsets, "numpy") else np.asarray(offsets)
    if off[0] != 0 or off[-1] != indices.numel() or np.any(np.diff(off) < 0):
        raise SpecError(f"offsets must start at 0, never decrease and end at the {indices.numel():,} indices",
                        file=path)
    idx = indices.numpy()
    for t, name in enumerate(fmap.names):
        yield name, _torch_table_chunks(idx, off[t * B:(t + 1) * B + 1], path, name, fmap.rows[name],
                                        (lambda frac, t=t: report((t + frac) / T)) if report else None)


def _torch_table_chunks(idx: np.ndarray, off: np.ndarray, where: str, feature: str, rows: int,
                        report: Progress | None):
    B = off.size - 1
    start = 0
    while start < B:
        end = start + 1
        # as many samples as fit CHUNK_IDS ids (at least one)
        end = max(end, int(np.searchsorted(off, off[start] + CHUNK_IDS, side="right")) - 1)
        end = min(end, B)
        ids = np.asarray(idx[off[start]:off[end]], dtype=np.int64)
        check_range(ids, rows, where, feature)
        lengths = np.diff(off[start:end + 1]).astype(np.int64)
        start = end
        if report:
            report(start / B)
        yield ids, lengths
