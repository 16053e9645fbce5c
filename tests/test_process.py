"""The process around the work (issue 36, item 5): ``placer`` run as a command in a subprocess, with its stdout a
pipe whose reader left, a full device or a closed descriptor, stderr closed, SIGINT/SIGTERM during a CBC solve
and during start-up, and an output file that names one of its inputs. The promises (placer/process.py,
placer/commands/_output.py): never a traceback; exit 0 ok, 2 bad input or unwritable stdout, 130 SIGINT, 143
SIGTERM, killed by SIGPIPE (a shell's 141) when the reader left, as git; no solver process and no temporary file
left behind. No wall-clock asserts: every wait polls a condition under a generous timeout. About 40 s on 2 cores.
"""
from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from placer.cli import main

ROOT = Path(__file__).resolve().parent.parent
BIG_HW = "hardware_specs/dgx-h100-32node.yaml"  # `placer show` of it: about 8 KB
HW = "hardware_specs/dgx-h100.yaml"
ONE_GPU = "hardware_specs/h100-pcie-host.yaml"
TINY = "workloads/tiny.yaml"
#: how long any one placer subprocess may take before the test gives up on it (a hang), s
TIMEOUT_S = 240


def _env(tmp: Path) -> dict:
    """The child's environment: its own TMPDIR (to see what it leaves there), no terminal tricks."""
    env = dict(os.environ, TMPDIR=str(tmp), TMP=str(tmp), TEMP=str(tmp))
    env.pop("COLUMNS", None)
    return env


def _placer(*args: str) -> list[str]:
    return [sys.executable, "-m", "placer.cli", *args]


def _shell(command: str, tmp: Path) -> subprocess.CompletedProcess:
    """``python -m placer.cli <command>`` through sh (for redirections such as ``>&-``), in the repository."""
    return subprocess.run(["sh", "-c", f"exec {sys.executable} -m placer.cli {command}"], cwd=ROOT, env=_env(tmp),
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def _no_traceback(stderr: str | bytes) -> None:
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    assert "Traceback" not in text and "Error:" not in text.replace("error:", ""), text


def _empty(tmp: Path) -> None:
    left = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))
    assert left == [], f"temporary files left behind: {left}"


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"placer {metadata.version('placer')}\n"


def _small_pipe() -> tuple[int, int]:
    """A pipe of one page (4 KiB): a child's output longer than that cannot all be written before the reader
    reads, so closing the read end early gives the child EPIPE every time."""
    r, w = os.pipe()
    fcntl.fcntl(w, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    return r, w


@pytest.mark.parametrize("read_first_line", [True, False], ids=["head-1", "reader-gone-before-start"])
def test_broken_pipe_exits_quietly_like_git(tmp_path, read_first_line):
    """``placer show big.yaml | head -1``: killed by SIGPIPE, as git (shell $? 141), nothing on stderr."""
    r, w = _small_pipe()
    proc = subprocess.Popen(_placer("show", BIG_HW), cwd=ROOT, env=_env(tmp_path), stdout=w,
                            stderr=subprocess.PIPE)
    os.close(w)
    if read_first_line:  # as head -1: read up to the first newline, then leave
        got = b""
        while b"\n" not in got:
            chunk = os.read(r, 256)
            assert chunk, "placer wrote no line"
            got += chunk
        assert got.startswith(b"hardware dgx-h100-32node")
    os.close(r)
    _, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == -signal.SIGPIPE, (proc.returncode, err)
    assert err == b""
    _empty(tmp_path)


@pytest.mark.parametrize("command", [f"show {BIG_HW}",
                                     f"solve {ONE_GPU} {TINY} --method greedy_size -q --json"],
                         ids=["show", "solve-json"])
def test_stdout_on_a_full_device_is_one_line_and_exit_2(tmp_path, command):
    res = _shell(f"{command} > /dev/full", tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr == "error: cannot write to stdout: No space left on device\n"
    _empty(tmp_path)


@pytest.mark.parametrize("redirect,code,out", [
    (">&-", 0, ""),  # stdout closed: written to /dev/null, as git does
    ("2>&-", 0, "ok  workloads/tiny.yaml"),  # stderr closed, the file is fine
    ("2>&- >&-", 0, ""),
], ids=["stdout-closed", "stderr-closed", "both-closed"])
def test_closed_descriptors_run_normally(tmp_path, redirect, code, out):
    res = _shell(f"check {TINY} {redirect}", tmp_path)
    assert res.returncode == code, res.stderr
    assert res.stdout.startswith(out)
    _no_traceback(res.stderr)
    _empty(tmp_path)


def test_closed_stderr_keeps_the_bad_input_exit_code(tmp_path):
    """A file that fails its check exits 2 even when its error message has nowhere to go."""
    res = _shell(f"check {tmp_path / 'missing.yaml'} 2>&-", tmp_path)
    assert res.returncode == 2
    res = _shell(f"check {tmp_path / 'missing.yaml'} 2>/dev/full", tmp_path)
    assert res.returncode == 2


#: the process fuzz's commands: (arguments, exit code when nothing goes wrong, writes stdout, writes stderr)
QUICK = [(["check", TINY, HW], 0, True, False), (["show", BIG_HW], 0, True, False),
         (["show", "workloads/production-856.yaml"], 0, True, False), (["check", "missing.yaml"], 2, False, True),
         (["solve", ONE_GPU, TINY, "--method", "greedy_size", "-q", "--json"], 0, True, False)]
STREAMS = ("ok", "closed", "full", "reader-gone")


def _target(kind: str, keep: list):
    """What the child's stream is: captured, closed (by preexec), /dev/full, or a pipe whose reader left."""
    if kind == "ok":
        return subprocess.PIPE
    if kind == "full":
        f = open("/dev/full", "wb")
        keep.append(f)
        return f
    if kind == "closed":
        return subprocess.DEVNULL
    r, w = os.pipe()
    os.close(r)
    keep.append(w)
    return w


@pytest.mark.parametrize("seed", range(int(os.environ.get("PLACER_FUZZ_PROCESS", 6))))
def test_fuzz_streams(tmp_path, seed):
    """Fuzz: a quick command whose output stream is closed, a full device or a pipe whose reader left (the other
    one any of those, or captured). Exit: the command's own code, 2 when its stdout is a full device, killed by
    SIGPIPE when its reader left; never a traceback, nothing left in TMPDIR."""
    rng = random.Random(seed)
    args, code, writes_out, writes_err = rng.choice(QUICK)
    adverse = rng.choice(STREAMS[1:])  # the stream the command writes to is always one that goes wrong
    out = adverse if writes_out else rng.choice(STREAMS)
    err = adverse if writes_err else rng.choice(STREAMS)
    keep: list = []
    closed = [fd for fd, kind in ((1, out), (2, err)) if kind == "closed"]
    try:
        proc = subprocess.Popen(_placer(*args), cwd=ROOT, env=_env(tmp_path), stdout=_target(out, keep),
                                stderr=_target(err, keep),
                                preexec_fn=(lambda: [os.close(fd) for fd in closed]) if closed else None)
    finally:
        for k in keep:
            k.close() if hasattr(k, "close") else os.close(k)
    got_out, got_err = proc.communicate(timeout=TIMEOUT_S)
    expected = code
    if writes_out and out == "reader-gone" or writes_err and err == "reader-gone":
        expected = -signal.SIGPIPE
    elif writes_out and out == "full":
        expected = 2
    assert proc.returncode == expected, (args, out, err, got_err)
    if got_err is not None:
        _no_traceback(got_err)
        if expected == 2 and out == "full":
            assert got_err == b"error: cannot write to stdout: No space left on device\n"
    _empty(tmp_path)


# --- signals ----------------------------------------------------------------------------------------------------

def _stat(pid: int) -> tuple[str, str] | None:
    """(command name, state letter) of a live process; None once it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm, rest = text[text.find("(") + 1:text.rfind(")")], text[text.rfind(")") + 2:]
    state = rest.split()[0]
    return None if state in "ZX" else (comm, state)


def _descendants(pid: int) -> list[int]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            tree.setdefault(int(text[text.rfind(")") + 2:].split()[1]), []).append(int(entry))
    found, todo = [], list(tree.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo += tree.get(p, [])
    return found


def _wait_for(condition, timeout_s: float, what: str):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _kill_left(pids) -> None:
    for p in pids:
        if _stat(p) is not None:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.parametrize("sig,to_group,code", [(signal.SIGTERM, False, 143), (signal.SIGINT, True, 130)],
                         ids=["SIGTERM-to-placer", "SIGINT-to-group-as-ctrl-c"])
def test_signal_during_cbc_solve_leaves_no_solver_and_no_files(tmp_path, sig, to_group, code):
    proc = subprocess.Popen(_placer("solve", HW, TINY, "--solver", "cbc", "--time-limit", "60", "-q"), cwd=ROOT,
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    kids: list[int] = []
    try:
        def cbc_running():
            if proc.poll() is not None:
                raise AssertionError(f"placer ended before CBC started: {proc.communicate()}")
            kids[:] = _descendants(proc.pid)
            return [p for p in kids if (_stat(p) or ("",))[0] == "cbc"]

        cbc = _wait_for(cbc_running, TIMEOUT_S, "CBC to start")
        assert list(tmp_path.rglob("*-pulp.mps")), "the solve's files should be there while CBC runs"
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == code, (proc.returncode, err)
        _no_traceback(err)
        assert out == b""
        # placer ends after its descendants (issue 47: CBC still ran a second after it on a loaded machine)
        running = [p for p in kids + cbc if _stat(p) is not None]
        assert running == [], f"descendants {running} outlived placer"
        _empty(tmp_path)
    finally:
        proc.kill()
        _kill_left(kids)


def _signal_mask(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
    return 0


def test_ctrl_c_during_start_up_is_quiet(tmp_path):
    """SIGINT as soon as placer handles signals (SIGTERM caught: placer/process.py's own()), while it still
    imports its commands: exit 130, no KeyboardInterrupt traceback."""
    proc = subprocess.Popen(_placer("show", BIG_HW), cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    term = 1 << (signal.SIGTERM - 1)
    try:
        _wait_for(lambda: proc.poll() is not None or _signal_mask(proc.pid, "SigCgt") & term, TIMEOUT_S,
                  "placer to start")
    except (OSError, FileNotFoundError):
        pass
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == b""
    _empty(tmp_path)


# --- outputs that name inputs -----------------------------------------------------------------------------------

def test_output_naming_an_input_is_refused_before_the_work(tmp_path):
    wl = tmp_path / "wl.yaml"
    shutil.copy(ROOT / TINY, wl)
    before = wl.read_bytes()
    res = subprocess.run(_placer("solve", HW, str(wl), "-o", str(wl)), cwd=ROOT, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert res.returncode == 2
    assert res.stderr.startswith(f"error: -o/--output {wl}: is the input WL of this command")
    assert wl.read_bytes() == before


def _spellings(path: Path, tmp: Path, rng: random.Random) -> str:
    """Another name for ``path``: itself, relative with ./ or ../, a symlink, a hard link."""
    kind = rng.choice(["same", "dot", "dotdot", "symlink", "hardlink", "relative"])
    if kind == "same":
        return str(path)
    if kind == "dot":
        return str(path.parent / "." / path.name)
    if kind == "dotdot":
        return str(path.parent / ".." / path.parent.name / path.name)
    if kind == "relative":
        return os.path.relpath(path, ROOT)
    link = tmp / f"link-{rng.randrange(10 ** 9)}{path.suffix}"
    (os.symlink if kind == "symlink" else os.link)(path, link)
    return str(link)


#: command -> (its arguments with {hw} {wl} {plan} {data} for input files, the output flags it has)
COMMANDS = {
    "solve": (["solve", "{hw}", "{wl}", "--method", "greedy_size", "-q"], ["-o", "--plot"]),
    "profile": (["profile", "{wl}", "{data}"], ["-o"]),
    "export": (["export", "--torchrec", "{hw}", "{wl}", "{plan}"], ["-o", "--python"]),
    "import": (["import", "--torchrec", "{plan}", "{hw}", "{wl}"], ["-o"]),
    "calibrate": (["calibrate", "--quick", "--workload", "{wl}"], ["-o"]),
    "show": (["show", "{wl}"], ["--plot"]),
    "sweep": (["sweep", "{hw}", "{wl}", "--gpus", "8"], ["--plot"]),
}


@pytest.mark.parametrize("seed", range(int(os.environ.get("PLACER_FUZZ_OUTPUTS", 40))))
def test_fuzz_outputs_that_name_inputs(tmp_path, seed, capsys):
    """Fuzz: any command, any of its output flags naming any of its input files by any spelling: exit 2 before
    any work, the input unchanged. In process (``main(argv)``: the check is the same; fast)."""
    rng = random.Random(seed)
    files = {"hw": tmp_path / "hw.yaml", "wl": tmp_path / "wl.yaml", "plan": tmp_path / "plan.json",
             "data": tmp_path / "ids.tsv"}
    shutil.copy(ROOT / HW, files["hw"])
    shutil.copy(ROOT / TINY, files["wl"])
    files["plan"].write_text("{}\n")
    files["data"].write_text("0\t1\n")
    command = rng.choice(sorted(COMMANDS))
    template, flags = COMMANDS[command]
    argv = [a.format(**{k: str(v) for k, v in files.items()}) for a in template]
    inputs = [k for k in files if any("{" + k + "}" in a for a in template)]
    victim = files[rng.choice(inputs)]
    flag = rng.choice(flags)
    argv += [flag, _spellings(victim, tmp_path, rng)]
    for other in flags:  # the command's other required outputs: harmless names
        if other != flag:
            argv += [other, str(tmp_path / f"out{other.strip('-')}.txt")]
    before = {k: v.read_bytes() for k, v in files.items()}
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        code = main(argv)
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert "would replace that file" in err and flag in err, (argv, err)
    assert {k: v.read_bytes() for k, v in files.items()} == before


def test_two_outputs_naming_one_file_are_refused(tmp_path, capsys):
    out = tmp_path / "same.txt"
    argv = ["export", "--torchrec", str(ROOT / HW), str(ROOT / TINY), str(ROOT / TINY)]
    assert main(argv + ["-o", str(out), "--python", str(out)]) == 2
    assert "--python names the same file" in capsys.readouterr().err
