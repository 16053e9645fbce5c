"""Fuzz campaign: thousands of hostile inputs through the ``placer`` command; counts every outcome.

    python3 validation/fuzz_inputs.py --cases 5000 --jobs 2

Each case (validation/fuzz_mutations.py: a mutated shipped spec, workload or plan, a damaged file, a FIFO or a
link to /dev/zero, a hostile argument) runs ``placer.cli.main(argv)`` in a child forked from one warm process,
with a memory cap (``--memory-GiB``, address space beyond the parent's) and a wall-clock limit per case. The
promise checked: exit 0, 2 or 3 only; never a traceback (an exception escaping ``main``), never a hang (the
case's time limit), never unbounded memory (MemoryError or death by signal), and exit 0 never prints a
non-finite number in JSON output or in the plan it writes, and exit 3 names a shortfall in GiB or says the
candidate menu is the limit, and exit 0 with --json prints JSON and nothing else on stdout. Outcomes: ok,
traceback, exit1, hang, memory, crash, nonfinite, badjson, exit3_vague, wrong_exit (a case with a known exit code,
a mislabelled plan: 2, that ended otherwise).

Writes ``validation/results/fuzz-inputs-<date>.json``: the command, commit, versions, the counts per outcome and
per command, and each distinct failure (exception type and placer frame, or outcome and command) with its
first case's seed, argv and mutation, so that ``--replay SEED`` re-runs it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import random
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.common import ROOT, environment, write_json  # noqa: E402
from validation.fuzz_mutations import Case, finite_numbers, load_bases, make_case  # noqa: E402

OK_CODES = (0, 2, 3)


def _vm_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _child(case: Case, folder: Path, memory_bytes: int, write_fd: int) -> None:
    """Runs in the forked child: one ``main(argv)``; reports (code, error, stdout tail) on the pipe."""
    os.chdir(folder)
    resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + memory_bytes,) * 2)
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    fd1 = os.open(folder / "fd1.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # what bypasses sys.stdout
    os.dup2(fd1, 1)
    os.close(fd1)
    result = {"code": None, "error": None}
    try:
        from placer.cli import main

        result["code"] = main(case.argv)
    except MemoryError:
        result["error"] = {"type": "MemoryError", "where": "", "text": ""}
    except BaseException as exc:  # noqa: BLE001 - every escape is what the campaign counts
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/placer/" in f.filename]
        where = f"{frames[-1].filename.split('/placer/')[-1]}:{frames[-1].lineno}" if frames else ""
        result["error"] = {"type": type(exc).__name__, "where": where,
                           "text": "".join(traceback.format_exception_only(type(exc), exc))[-400:]}
    written = folder / "out.json"
    if result["code"] == 0 and written.is_file():
        try:
            result["written_finite"] = finite_numbers(json.loads(written.read_text()))
        except (ValueError, OSError):
            result["written_finite"] = None
    result["exit3_named"] = "GiB" in err.getvalue() or "candidate" in err.getvalue()
    json_out = "--json" in case.argv
    result["stdout"] = out.getvalue() if json_out else out.getvalue()[-20000:]  # JSON whole: it must parse
    try:
        result["stdout_fd"] = (folder / "fd1.txt").read_text(errors="replace")[:2000]  # e.g. a solver's banner
    except OSError:
        result["stdout_fd"] = ""
    result["stderr"] = err.getvalue()[-600:]
    os.write(write_fd, json.dumps(result, default=str).encode())
    os._exit(0)


class Running:
    """One child in flight."""

    def __init__(self, seed: int, case: Case, folder: Path, memory_bytes: int):
        self.seed, self.case, self.folder = seed, case, folder
        self.read_fd, write_fd = os.pipe()
        self.t0 = time.monotonic()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.read_fd)
            _child(case, folder, memory_bytes, write_fd)
        os.close(write_fd)
        self.buffer = b""

    def poll(self) -> dict | None:
        """The finished case's record, or None while it runs (a case over its time limit is killed)."""
        while select.select([self.read_fd], [], [], 0)[0]:
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                break
            self.buffer += chunk
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        elapsed = time.monotonic() - self.t0
        if pid == 0:
            if elapsed > self.case.timeout_s:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return self._record("hang", elapsed, {})
            return None
        while True:  # drain what the child wrote before it exited
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                break
            self.buffer += chunk
        try:
            result = json.loads(self.buffer.decode() or "null")
        except json.JSONDecodeError:
            result = None
        if result is None:
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            return self._record("memory" if sig == signal.SIGKILL else "crash", elapsed, {"signal": sig})
        return self._record(classify(self.case, result), elapsed, result)

    def _record(self, outcome: str, elapsed: float, result: dict) -> dict:
        os.close(self.read_fd)
        shutil.rmtree(self.folder, ignore_errors=True)
        return {"seed": self.seed, "command": self.case.command, "argv": self.case.argv, "note": self.case.note,
                "outcome": outcome, "wall_s": round(elapsed, 3), "code": result.get("code"),
                "error": result.get("error"), "stderr": result.get("stderr", "")}


def classify(case: Case, result: dict) -> str:
    """ok / traceback / memory / exit1 / exit3_vague / nonfinite from one child's result."""
    error = result.get("error")
    if error:
        return "memory" if error["type"] == "MemoryError" else "traceback"
    if result["code"] not in OK_CODES:
        return "exit1"
    if case.expect_code is not None and result["code"] != case.expect_code:
        return "wrong_exit"  # e.g. a mislabelled plan (fuzz_mutations.mislabel_plan) accepted
    if result["code"] == 3 and not result.get("exit3_named"):
        return "exit3_vague"
    if result["code"] == 0 and result.get("written_finite") is False:
        return "nonfinite"
    if result["code"] == 0 and "--json" in case.argv:
        if result.get("stdout_fd"):
            return "badjson"  # written to descriptor 1 past sys.stdout: the JSON would be corrupted
        try:
            if not finite_numbers(json.loads(result["stdout"])):
                return "nonfinite"
        except (json.JSONDecodeError, ValueError):
            return "badjson"  # --json must print JSON and nothing else on stdout
    return "ok"


def signature(record: dict) -> str:
    """What makes two failures the same failure: outcome, command, exception type and placer frame."""
    err = record.get("error") or {}
    if record["outcome"] == "exit1":
        return f"exit1 {record['command']}: {(record.get('stderr') or '').strip()[:120]}"
    return f"{record['outcome']} {record['command']} {err.get('type', '')} {err.get('where', '')}".strip()


def draw(seed: int, bases, scratch: Path) -> tuple[Case, Path]:
    folder = Path(tempfile.mkdtemp(prefix=f"case{seed}-", dir=scratch))
    return make_case(random.Random(seed), folder, bases), folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=5000, help="hostile inputs to try (default 5000)")
    ap.add_argument("--first-seed", type=int, default=0, help="seed of the first case (default 0)")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--memory-GiB", type=float, default=4.0, help="address space a case may add (default 4)")
    ap.add_argument("--replay", type=int, default=None, metavar="SEED", help="run one case and print its record")
    ap.add_argument("--out", default=str(ROOT / "validation" / "results"), help="folder of the summary JSON")
    ap.add_argument("--date", default=dt.date.today().isoformat())
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    import placer.cli  # noqa: F401 - warm: every child forks with placer, torch and the commands imported
    for name in placer.cli.COMMANDS:
        __import__(f"placer.commands.{placer.cli.MODULES.get(name, name)}")
    bases = load_bases()
    scratch = Path(tempfile.mkdtemp(prefix="placer-fuzz-"))
    memory = int(args.memory_GiB * 2 ** 30)
    seeds = [args.replay] if args.replay is not None else list(range(args.first_seed, args.first_seed + args.cases))
    records, running, t0 = [], [], time.monotonic()
    try:
        while seeds or running:
            while seeds and len(running) < args.jobs:
                seed = seeds.pop(0)
                case, folder = draw(seed, bases, scratch)
                running.append(Running(seed, case, folder, memory))
            time.sleep(0.005)
            for r in list(running):
                rec = r.poll()
                if rec is None:
                    continue
                running.remove(r)
                records.append(rec)
                if rec["outcome"] != "ok" or args.replay is not None:
                    print(f"[{len(records)}] seed {rec['seed']} {rec['outcome']} {rec['command']}: "
                          f"{signature(rec)} | {rec['note'][:160]}", flush=True)
                elif len(records) % 250 == 0:
                    print(f"[{len(records)}] {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        for r in running:
            os.kill(r.pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)
    if args.replay is not None:
        print(json.dumps(records[0], indent=1))
        return 0

    outcomes = Counter(r["outcome"] for r in records)
    per_command = {}
    for r in records:
        per_command.setdefault(r["command"], Counter())[r["outcome"]] += 1
    failures: dict[str, dict] = {}
    for r in records:
        if r["outcome"] != "ok":
            f = failures.setdefault(signature(r), {"count": 0, "first": r})
            f["count"] += 1
    wall = time.monotonic() - t0
    summary = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "date": args.date, **environment(),
               "cases": len(records), "jobs": args.jobs, "memory_GiB": args.memory_GiB, "wall_s": round(wall, 1),
               "outcomes": dict(outcomes), "per_command": {k: dict(v) for k, v in per_command.items()},
               "exit_codes": dict(Counter(str(r["code"]) for r in records if r["outcome"] == "ok")),
               "median_case_s": sorted(r["wall_s"] for r in records)[len(records) // 2] if records else None,
               "failures": [{"signature": k, **v} for k, v in sorted(failures.items(), key=lambda kv: -kv[1]["count"])]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"fuzz-inputs-{args.date}.json"
    write_json(path, summary)
    print(f"\n{len(records)} cases in {wall:.0f} s: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    print(f"{'command':<12} " + " ".join(f"{o:>9}" for o in sorted(outcomes)))
    for cmd, counts in sorted(per_command.items()):
        print(f"{cmd:<12} " + " ".join(f"{counts.get(o, 0):>9}" for o in sorted(outcomes)))
    print(f"{len(failures)} distinct failures; written {path}")
    return 0 if set(outcomes) <= {"ok"} else 1


if __name__ == "__main__":
    sys.exit(main())
