"""Fuzz: mutated copies of the shipped specs, workloads and plans, damaged files, FIFOs, links to /dev/zero and
hostile arguments through ``placer.cli.main`` (validation/fuzz_mutations.py draws them). The promise: exit 0, 2
or 3 only, never an exception escaping ``main``, never past the case's time limit, and exit 0 never writes a
non-finite number. About a minute; the campaign (validation/fuzz_inputs.py) runs thousands of cases."""
from __future__ import annotations

import json
import os
import random
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placer.cli import main
from validation.fuzz_mutations import finite_numbers, load_bases, make_case

#: the suite's mix: the quick commands (the campaign adds ILP solves, runs, compare and sweep)
WEIGHTS = {"check": 40, "check_plan": 15, "show": 5, "simulate": 20, "baseline": 15, "args": 5}


@pytest.fixture(scope="module")
def bases():
    return load_bases()


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout("the case ran past its time limit (a hang)")


@settings(max_examples=int(os.environ.get("PLACER_FUZZ_EXAMPLES", 150)), deadline=None,
          derandomize=bool(os.environ.get("CI")), suppress_health_check=list(HealthCheck))
@given(seed=st.integers(min_value=0, max_value=2 ** 32 - 1))
def test_hostile_inputs_exit_cleanly(bases, seed, capsys):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        case = make_case(random.Random(seed), folder, bases, WEIGHTS)
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(int(case.timeout_s))
        try:
            code = main(case.argv)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        out = capsys.readouterr().out
        where = f"seed {seed}: placer {' '.join(case.argv)} ({case.note})"
        assert code in (0, 2, 3), where
        if case.expect_code is not None:  # a plan whose label is not its shards' geometry: refused
            assert code == case.expect_code, where
        if code == 0 and (folder / "out.json").is_file():
            assert finite_numbers(json.loads((folder / "out.json").read_text())), where
        if code == 0 and "--json" in case.argv:
            assert finite_numbers(json.loads(out)), where
        for path in folder.iterdir():  # an unreadable file made by the case must not stop the clean-up
            if path.is_file() and not path.is_symlink():
                path.chmod(0o600)
