"""Paths a command writes: checked BEFORE the work (a solve or a calibration can take minutes), and write
errors turned into SpecError (exit 2) naming the argument, never a traceback after the work is done; an output
that names one of the command's inputs refused (refuse_inputs_as_outputs, for every command)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from placer.errors import SpecError


def check_output_path(path: str | os.PathLike, argument: str) -> Path:
    """Refuse (SpecError naming ``argument``) a path that cannot be written as a regular file: an empty name,
    a directory, a FIFO/socket/block device, an existing file without write permission, or a parent that is missing,
    not a directory or not writable. Returns the path. Checked before the command's work starts."""
    text = os.fspath(path)
    if not text or not text.strip():
        raise SpecError(f"{argument}: empty file name")
    if "\x00" in text:
        raise SpecError(f"{argument}: the file name contains a NUL byte")
    p = Path(text)
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)):
        raise SpecError(f"{argument} {text}: names a directory; give a file name")
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise SpecError(f"{argument} {text}: cannot use this path ({exc.strerror})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise SpecError(f"{argument} {text}: is a directory; give a file name inside it")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):  # /dev/null is fine, a FIFO would block
            raise SpecError(f"{argument} {text}: is not a regular file (a FIFO, socket or block device); "
                            "give a regular file name")
        if not os.access(p, os.W_OK):
            raise SpecError(f"{argument} {text}: the file exists and is not writable")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise SpecError(f"{argument} {text}: the folder {parent} does not exist; create it first")
    if not parent.is_dir():
        raise SpecError(f"{argument} {text}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(f"{argument} {text}: the folder {parent} is not writable")
    _probe(p, st is not None, argument)
    return p


def _probe(p: Path, existed: bool, argument: str) -> None:
    """Open the file for appending (nothing is truncated) and close it; remove it again when it did not exist.
    Catches what permission bits do not show: a read-only file system, /proc, a full quota, root's access."""
    try:
        with open(p, "ab"):
            pass
    except OSError as exc:
        raise SpecError(f"{argument} {p}: cannot write ({exc.strerror or exc})") from None
    if not existed:
        try:
            p.unlink()
        except OSError:
            pass


def check_plot_path(path: str | os.PathLike, argument: str) -> Path:
    """``check_output_path`` plus the file type: the extension must be one matplotlib can write (png, pdf,
    svg, ...); no extension means PNG."""
    p = check_output_path(path, argument)
    ext = p.suffix[1:].lower()
    if ext:
        from matplotlib.figure import Figure

        supported = Figure().canvas.get_supported_filetypes()
        if ext not in supported:
            raise SpecError(f"{argument} {p}: cannot draw a .{ext} file; use one of "
                            f"{', '.join('.' + k for k in sorted(supported))}")
    return p


def write_text(path: str | os.PathLike, text: str, argument: str) -> None:
    """Write ``text`` (UTF-8) to ``path``; an OSError becomes SpecError naming ``argument`` and the path."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{argument} {os.fspath(path)}: cannot write ({exc.strerror or exc})") from None


def save_figure(save, path: str | os.PathLike, argument: str):
    """Call ``save()`` (which writes a plot to ``path``); OSError and matplotlib's ValueError on a file it
    cannot write become SpecError naming ``argument``. Returns what ``save`` returned."""
    try:
        return save()
    except OSError as exc:
        raise SpecError(f"{argument} {os.fspath(path)}: cannot write ({exc.strerror or exc})") from None


#: argument destinations that name a file the command writes (-o/--output, export's --python, --plot)
OUTPUT_DESTS = ("output", "python", "plot")
#: optional arguments that name files the command reads; every positional argument is taken as one too
INPUT_DESTS = ("hardware", "workload", "plan", "ids")


def _label(action) -> str:
    """How the user wrote the argument: '-o/--output', or a positional's metavar ('WL')."""
    if action.option_strings:
        return "/".join(action.option_strings)
    return str(action.metavar or action.dest)


def _paths(value) -> list[str]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, (str, os.PathLike)) and os.fspath(v)]


def _same_file(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` name one existing regular file (links, '..' and case of spelling included)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(sa.st_mode) and (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def refuse_inputs_as_outputs(args, actions) -> None:
    """Refuse (SpecError, exit 2, before any work) a file the command would write that is one of the files it
    reads (``solve hw.yaml wl.yaml -o wl.yaml``, a link to it, ``./wl.yaml``), or that two of its outputs share:
    writing it would silently replace the input with the output. ``actions``: the command's argparse actions;
    outputs are those in OUTPUT_DESTS, inputs the positional ones and those in INPUT_DESTS. Called by
    placer.cli.main for every command."""
    outputs, inputs = [], []
    for action in actions:
        value = getattr(args, action.dest, None)
        if value is None or action.dest.startswith("_"):
            continue
        if action.dest in OUTPUT_DESTS:
            outputs += [(_label(action), p) for p in _paths(value)]
        elif not action.option_strings or action.dest in INPUT_DESTS:
            inputs += [(_label(action), p) for p in _paths(value)]
    for n, (flag, path) in enumerate(outputs):
        for label, source in inputs:
            if _same_file(path, source):
                same = "" if os.fspath(path) == os.fspath(source) else f" ({source})"
                raise SpecError(f"{flag} {os.fspath(path)}: is the input {label}{same} of this command; writing "
                                "it would replace that file: give another file name")
        for other_flag, other in outputs[n + 1:]:
            if _same_file(path, other) or os.path.abspath(path) == os.path.abspath(other):
                raise SpecError(f"{flag} {os.fspath(path)}: {other_flag} names the same file; give each its own")
