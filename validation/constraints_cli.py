"""A sample of validation/constraints_random.py's solves run again through ``python3 -m placer.cli solve``: the exit
code must be the one the Python API's verdict implies (a plan 0, a SpecError 2, an InfeasibleError 3) and stderr
must hold no traceback. Wall times are seconds."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from validation.common import ROOT

#: the exit code each API verdict implies (the CLI's contract, placer/errors.py)
EXIT_OF = {"plan": 0, "exit3_named": 3, "exit3_unnamed": 3, "exit2_named": 2, "exit2_unnamed": 2}
#: how many of the sample each verdict gets at most, before the rest is filled at random (chosen: every kind of
#: exit seen, plans and infeasible sets most)
QUOTA = {"plan": 0.4, "exit3_named": 0.4, "exit2_named": 0.2}
#: seconds one CLI solve may take before it counts as a hang (a work-limited solve on PAIRS takes under 60 s)
CLI_TIMEOUT_S = 600


def sample(cases: list[dict], n: int, rng: random.Random) -> list[tuple[dict, dict]]:
    """Up to ``n`` (case, result) pairs, drawn across verdicts (QUOTA), then at random among the rest."""
    solves = [(c, r) for c in cases for r in c["results"] if r["verdict"] in EXIT_OF]
    rng.shuffle(solves)
    picked: list[tuple[dict, dict]] = []
    for verdict, share in QUOTA.items():
        picked += [s for s in solves if s[1]["verdict"] == verdict][:round(n * share)]
    rest = [s for s in solves if s not in picked]
    return (picked + rest)[:n]


def run_cli(hardware: str, workload_file: str, method: str, work_limit: float, seed: int) -> dict:
    """``placer solve`` in a subprocess (this checkout's placer): exit code, stderr's last lines, wall seconds."""
    argv = [sys.executable, "-m", "placer.cli", "solve", str(ROOT / "hardware_specs" / f"{hardware}.yaml"),
            workload_file, "--method", method, "--work-limit", f"{work_limit:g}", "--seed", str(seed), "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
        code, err = done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        code, err = None, f"no exit within {CLI_TIMEOUT_S} s"
    shown = ["placer", "solve", f"hardware_specs/{hardware}.yaml", Path(workload_file).name] + argv[6:]
    return {"argv": shown, "exit": code, "stderr_tail": err.strip()[-400:],
            "traceback": "Traceback (most recent call last)" in err, "wall_s": round(time.perf_counter() - t0, 2)}


def cli_checks(cases: list[dict], n: int, work_limit: float, rng: random.Random) -> list[dict]:
    """The CLI run of ``n`` sampled solves (``sample``), each with the exit code expected and whether it held."""
    out = []
    for case, result in sample(cases, n, rng):
        got = run_cli(case["hardware"], case["workload_file"], result["method"], work_limit, case["set"])
        want = EXIT_OF[result["verdict"]]
        ok = got["exit"] == want and not got["traceback"]
        out.append({"pair": f"{case['workload']}@{case['hardware']}", "set": case["set"],
                    "method": result["method"], "api_verdict": result["verdict"], "want_exit": want, **got,
                    "ok": ok})
        print(f"  CLI {out[-1]['pair']} set {case['set']} {result['method']}: exit {got['exit']} "
              f"(want {want}){'' if ok else '  MISMATCH'}", flush=True)
    return out
