"""What the ``placer`` command owns as a process, and how it ends: its standard streams, its child processes
(CBC via PuLP, forked planners, the runner's ranks) and its temporary files. One place for each:

* streams: ``own()`` reopens a closed fd 0/1/2 on /dev/null (as git and Rust programs do) and wraps
  ``sys.stdout``/``sys.stderr`` in ``GuardedStream``; every write of every command (``print``, rich, JSON) goes
  through it, and a write that fails ends the command: the reader went away (EPIPE) -> quietly, killed by
  SIGPIPE as git is (a shell's ``$?`` is 141); stdout unwritable otherwise (a full device, an I/O error) -> one
  line on stderr, exit 2 (as an ``-o`` file that cannot be written). stderr unwritable otherwise: its
  diagnostics are dropped, the command goes on (there is nowhere left to report it).
* children and temporary files: ``own()`` makes one temporary folder (``placer-*`` in $TMPDIR) and points
  TMPDIR/TMP/TEMP and ``tempfile`` at it, so PuLP's .mps/.mst/.sol files and placer's own land there; every
  exit path (``finish``, a signal, a failed write) stops every descendant process, then removes that folder.
* signals: SIGINT -> exit 130, SIGTERM -> 143, SIGHUP -> 129 (128 + the signal, as shells report it),
  quietly, after the cleanup above. Forked children get the handlers they had before (``os.register_at_fork``).

Library callers (``placer.cli.main(argv)``, tests) never call ``own()``: nothing here changes their process.
Standard library only, so that ``placer.cli`` can call it before its heavy imports.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import NoReturn

#: exit status per signal that ends the command: 128 + the signal's number, as shells report a child killed by it
SIGNAL_EXITS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
#: exit status when stdout cannot be written (full device, I/O error): the -o files' bad-output code
EXIT_UNWRITABLE = 2
#: status when the reader of stdout/stderr went away and SIGPIPE could not end the process itself
EXIT_PIPE = 141

_owner_pid: int | None = None  # the command's process; None until own()
_tmpdir: str | None = None  # the folder own() made, removed on exit
_previous_handlers: dict[int, object] = {}
_ending = False  # set once an exit path has started its cleanup


def owned() -> bool:
    """Whether this process is the command that called ``own()`` (not a library caller, not a forked child)."""
    return _owner_pid is not None and os.getpid() == _owner_pid


def own() -> None:
    """Take over this process as the ``placer`` command: streams, signals, temporary folder (module docstring).
    Called once, first thing, by ``placer.cli.main`` when run as the command."""
    global _owner_pid
    if owned():
        return
    _owner_pid = os.getpid()
    _open_closed_std_fds()
    for sig in SIGNAL_EXITS:
        try:
            _previous_handlers[sig] = signal.signal(sig, _on_signal)
        except (OSError, ValueError):  # not the main thread, or not settable here
            pass
    os.register_at_fork(after_in_child=_restore_in_child)
    _make_tmpdir()
    if not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout, "stdout")
    if not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr, "stderr")


def finish(code: int) -> NoReturn:
    """End the command with ``code``: flush stdout and stderr (a failure there ends it as a failed write does),
    stop every descendant process, remove the temporary folder, and exit at once (``os._exit``: no
    interpreter teardown, which took seconds after large solves)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # not a GuardedStream (not owned): nothing more to do
            pass
    _cleanup()
    os._exit(code)


def _cleanup() -> None:
    """Stop every descendant process, then remove the temporary folder; once per process."""
    global _ending
    if _ending:
        return
    _ending = True
    kill_descendants()
    if _tmpdir is not None:
        shutil.rmtree(_tmpdir, ignore_errors=True)


# --- signals --------------------------------------------------------------------------------------------------

def _on_signal(signum: int, frame) -> None:
    if not owned():  # a forked child that kept the handler: behave as it would have without it
        _restore_in_child()
        os.kill(os.getpid(), signum)
        return
    if _ending:  # a second signal while the first one's cleanup runs: that cleanup ends the process
        return
    _cleanup()
    os._exit(SIGNAL_EXITS.get(signum, 128 + signum))


def _restore_in_child() -> None:
    """In a forked child: the signal handlers it had before ``own()`` (a child must not clean up the command)."""
    for sig, handler in _previous_handlers.items():
        try:
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass


# --- child processes ------------------------------------------------------------------------------------------

def _processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command name) of every process, from /proc (empty where there is no /proc)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        try:
            ppid = int(stat[stat.rfind(b")") + 2:].split()[1])
        except (IndexError, ValueError):
            continue
        out.append((int(entry), ppid, stat[stat.find(b"(") + 1:stat.rfind(b")")].decode(errors="replace")))
    return out


def _children_map() -> dict[int, list[int]]:
    """parent pid -> its children's pids, from /proc (empty where there is no /proc)."""
    out: dict[int, list[int]] = {}
    for pid, ppid, _ in _processes():
        out.setdefault(ppid, []).append(pid)
    return out


class Watchdog:
    """Kills this process's children whose command name starts with ``prefix`` once ``seconds`` have passed (nan,
    inf and huge values: the longest wait, MAX_S; at least 1 s): for a solver that does not always honour its own
    time limit (CBC in preprocessing of large models, MIP starts), so that a plan comes back in bounded time.
    ``fired``: whether it killed one."""

    #: Longest wait, seconds: threading.Timer overflows on inf and on values past ~9e9 s.
    MAX_S = 1e7

    def __init__(self, seconds: float, prefix: str):
        import threading

        self.fired = False
        self.prefix = prefix
        seconds = float(seconds)
        seconds = self.MAX_S if not seconds <= self.MAX_S else max(seconds, 1.0)  # nan and inf: the longest
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        me = os.getpid()
        for pid, ppid, name in _processes():
            if ppid == me and name.startswith(self.prefix):
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.fired = True
                except OSError:
                    pass


def descendants(pid: int | None = None) -> list[int]:
    """Every process below ``pid`` (default: this one), children before grandchildren."""
    tree = _children_map()
    found, todo = [], list(tree.get(os.getpid() if pid is None else pid, []))
    while todo:
        p = todo.pop(0)
        if p not in found:
            found.append(p)
            todo.extend(tree.get(p, []))
    return found


#: how long an ending command waits for its killed descendants to be gone (seconds): a killed process still
#: runs until the kernel next schedules it, which on a loaded machine can take a while (issue 47: CBC was still
#: running a second after placer ended)
KILL_WAIT_S = 10.0


def kill_descendants(wait_s: float = KILL_WAIT_S) -> None:
    """Stop (SIGSTOP) every descendant until no new one appears, then SIGKILL them all: a process stopped first
    cannot start another, and one killed first would leave its children to init, out of reach. Then wait, at
    most ``wait_s`` seconds, until every one is gone: our own children reaped, the others exited (a zombie
    whose parent was killed too has ended; init reaps it)."""
    stopped: list[int] = []
    for _ in range(20):
        new = [p for p in descendants() if p not in stopped]
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
        stopped.extend(new)
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    _wait_gone(stopped, wait_s)


def _wait_gone(pids: list[int], wait_s: float) -> None:
    """Until every process of ``pids`` has ended (or ``wait_s`` seconds have passed): our own children reaped,
    the others gone from /proc or zombies."""
    deadline = time.monotonic() + wait_s
    left = list(pids)
    while left:
        left = [p for p in left if not _ended(p)]
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.005)


def _ended(pid: int) -> bool:
    """Whether ``pid`` has ended: reaped here if it is our child, else absent or a zombie."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:  # not our child (or already reaped): look it up
        pass
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] in (b"Z", b"X")


# --- temporary files ------------------------------------------------------------------------------------------

def _make_tmpdir() -> None:
    """One ``placer-*`` folder in the caller's temporary folder, made this process's (and its children's)
    temporary folder; left as it was where none can be made (an unwritable $TMPDIR)."""
    global _tmpdir
    try:
        path = tempfile.mkdtemp(prefix="placer-")
    except OSError:
        return
    _tmpdir = path
    for name in ("TMPDIR", "TMP", "TEMP"):  # PuLP reads TMP before TMPDIR
        os.environ[name] = path
    tempfile.tempdir = path


def tmpdir() -> str | None:
    """The command's temporary folder (removed when it ends), or None where it has none."""
    return _tmpdir


# --- standard streams -----------------------------------------------------------------------------------------

def _open_closed_std_fds() -> None:
    """A closed fd 0, 1 or 2 (``>&-``, some daemons and cron set-ups) opened on /dev/null: else the next file
    opened would take its number and output meant for the terminal would go into it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            new = os.open(os.devnull, os.O_RDWR)
        except OSError:
            continue
        if new != fd:
            os.dup2(new, fd)
            os.close(new)
    if sys.stdin is None:
        sys.stdin = open(0, "r", closefd=False)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", errors="backslashreplace", closefd=False)


class GuardedStream:
    """``sys.stdout`` or ``sys.stderr`` with its write errors handled in one place (module docstring); every
    other attribute is the wrapped stream's."""

    def __init__(self, stream, name: str):
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            _write_failed(self._name, exc)
            return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            _write_failed(self._name, exc)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _write_failed(name: str, exc: BaseException) -> None:
    """A write to stdout/stderr failed: end the command (EPIPE anywhere, anything on stdout) or drop the
    diagnostics (anything else on stderr). In a forked child or a library caller: raise it, as before."""
    if not owned():
        raise exc
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        _cleanup()
        try:  # as git: die of SIGPIPE, which shells do not report
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGPIPE)
        except OSError:
            pass
        os._exit(EXIT_PIPE)
    if name == "stderr":
        return
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    try:
        err = sys.stderr._stream if isinstance(sys.stderr, GuardedStream) else sys.stderr
        err.write(f"error: cannot write to stdout: {reason}\n")
        err.flush()
    except (OSError, ValueError, AttributeError):
        pass
    _cleanup()
    os._exit(EXIT_UNWRITABLE)
