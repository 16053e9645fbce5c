"""The one guarded way placer reads a file it was given: regular files only, a size cap, errors as SpecError.

Every reader of user files (spec and plan documents, a workload's access-count ``.npy``) comes through here:

- ``open_regular_file``: opens without blocking (``O_NONBLOCK``, so a FIFO never hangs the open), then checks
  the opened descriptor (``fstat``, links already followed) is a regular file no larger than the cap. FIFOs,
  devices (``/dev/zero``), sockets and directories are refused before a byte is read; so is a missing or
  unreadable file. The check is on the descriptor that is then read, so swapping the file in between cannot
  slip a FIFO past it.
- ``read_text_guarded``: the whole file as UTF-8 text (a UTF-8 byte-order mark is dropped).
- ``load_npy_guarded``: one numeric array from a ``.npy`` file, never unpickling objects.

Sizes are bytes. Every failure is a ``SpecError`` naming the file.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from placer.errors import SpecError

#: largest spec or plan document read, bytes (64 MiB: the largest shipped workload is under 1 MiB; a
#: 50,000-table workload is about 5 MiB)
MAX_DOCUMENT_BYTES = 64 * 2**20
#: largest access-count array read, bytes (1 GiB: 134 million float64 counts)
MAX_NPY_BYTES = 2**30

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular_file(path: str | Path, *, max_bytes: int = MAX_DOCUMENT_BYTES, what: str = "file"):
    """Open ``path`` for binary reading if it is a regular file (after following links) of at most
    ``max_bytes`` bytes; returns ``(binary file object, size in bytes)``. Never blocks on a FIFO.
    Raises SpecError naming the file otherwise. ``what`` names the file's role in messages."""
    name = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise SpecError(f"{what} not found", file=name) from None
    except IsADirectoryError:
        raise SpecError(f"is a directory, expected a {what}", file=name) from None
    except PermissionError:
        raise SpecError(f"permission denied: cannot read this {what}", file=name) from None
    except OSError as exc:
        raise SpecError(f"cannot open this {what}: {exc.strerror or exc}", file=name) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            hint = f", expected a {what}" if stat.S_ISDIR(st.st_mode) else "; placer reads only regular files"
            raise SpecError(f"is {_kind_of(st.st_mode)}{hint}", file=name)
        if st.st_size > max_bytes:
            raise SpecError(f"{what} is {_mib(st.st_size)}, over the {_mib(max_bytes)} placer reads",
                            file=name)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_bytes_guarded(path: str | Path, *, max_bytes: int = MAX_DOCUMENT_BYTES, what: str = "file") -> bytes:
    """All bytes of a regular file of at most ``max_bytes`` bytes (see ``open_regular_file``)."""
    f, _ = open_regular_file(path, max_bytes=max_bytes, what=what)
    with f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise SpecError(f"cannot read this {what}: {exc.strerror or exc}", file=str(path)) from None
    if len(data) > max_bytes:  # it grew after the check
        raise SpecError(f"{what} is over the {_mib(max_bytes)} placer reads", file=str(path))
    return data


def read_text_guarded(path: str | Path, *, max_bytes: int = MAX_DOCUMENT_BYTES, what: str = "file") -> str:
    """The text of a regular UTF-8 file of at most ``max_bytes`` bytes. Raises SpecError naming the file
    (and the line of the first byte that is not UTF-8)."""
    data = read_bytes_guarded(path, max_bytes=max_bytes, what=what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (offset {exc.start}) "
                        "cannot be decoded; save the file as UTF-8", file=str(path)) from None
    except ValueError as exc:  # pragma: no cover - other codec failures
        raise SpecError(f"cannot decode this {what}: {exc}", file=str(path)) from None


def load_npy_guarded(path: str | Path, *, max_bytes: int = MAX_NPY_BYTES, what: str = "array file") -> np.ndarray:
    """One real numeric array (float64) from a ``.npy`` file: a regular file of at most ``max_bytes`` bytes,
    no pickled objects, every value finite. An ``.npz`` archive, a text file or an array of strings, objects
    or complex numbers is refused with a SpecError naming the file."""
    name = str(path)
    f, _ = open_regular_file(path, max_bytes=max_bytes, what=what)
    with f:
        head = f.read(len(_NPY_MAGIC))
        if head.startswith(_ZIP_MAGIC):
            raise SpecError("is an .npz archive (several arrays); save the one array with numpy.save as .npy",
                            file=name)
        if head != _NPY_MAGIC:
            raise SpecError("is not a .npy file (no NumPy header); save the array with numpy.save", file=name)
        f.seek(0)
        try:
            arr = np.load(f, allow_pickle=False)
        except ValueError as exc:
            if "pickle" in str(exc).lower() or "object" in str(exc).lower():
                raise SpecError("holds Python objects (pickled), which placer does not load; save a numeric "
                                "array", file=name) from None
            raise SpecError(f"unreadable .npy file: {exc}", file=name) from None
        except (OSError, EOFError) as exc:
            raise SpecError(f"unreadable .npy file: {exc}", file=name) from None
    if not isinstance(arr, np.ndarray):  # pragma: no cover - np.load returns an array for a .npy
        raise SpecError("does not hold one array", file=name)
    if arr.dtype.kind not in "biuf":
        raise SpecError(f"holds {arr.dtype} values; expected real numbers (integers or floats)", file=name)
    out = np.asarray(arr, dtype=np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        first = int(np.flatnonzero(bad.ravel())[0])
        raise SpecError(f"holds {int(bad.sum()):,} values that are not finite (NaN or infinity), the first at "
                        f"flat index {first}", file=name)
    return out
