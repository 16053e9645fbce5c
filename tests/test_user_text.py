"""User text in reports (issue 47): a name or description is printed as written (brackets are not rich markup,
'$' is not matplotlib math), a long description costs what is printed, and a name has a bounded length."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from placer.cli import main
from placer.shown_text import clipped
from placer.specs.limits import MAX_NAME_CHARS

ROOT = Path(__file__).resolve().parents[1]
HW = str(ROOT / "hardware_specs" / "dgx-h100.yaml")
TINY = (ROOT / "workloads" / "tiny.yaml").read_text()
ODD = "[/x] [red]$\\frac{$"  # a closing tag rich cannot match, a style, and a mathtext fragment matplotlib cannot parse


def _odd_workload(tmp_path: Path, description: str = ODD) -> Path:
    text = re.sub(r"^description: .*$", lambda _: f"description: {json.dumps(description)}", TINY, count=1,
                  flags=re.M)
    text = re.sub(r"^name: tiny$", lambda _: f"name: {json.dumps('w' + ODD)}", text, count=1, flags=re.M)
    odd = json.dumps(ODD)
    text = text.replace("name: t_users,", f"name: {odd},").replace("table: t_users", f"table: {odd}")
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    return path


def test_names_with_markup_and_math_are_printed_as_written(tmp_path, capsys):
    wl = _odd_workload(tmp_path)
    assert main(["show", str(wl), "--plot", str(tmp_path / "w.png")]) == 0
    out = capsys.readouterr().out
    assert ODD in out and f"workload w{ODD}: {ODD}" in out
    plan = tmp_path / "p.json"
    assert main(["solve", HW, str(wl), "--method", "greedy_size", "-q", "-o", str(plan),
                 "--plot", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr().out
    assert f"for w{ODD} on dgx-h100" in out and f"│ {ODD} " in out
    assert main(["explain", HW, str(wl), str(plan)]) == 0
    assert ODD in capsys.readouterr().out
    assert (tmp_path / "w.png").stat().st_size > 0 and (tmp_path / "p.png").stat().st_size > 0


def test_a_long_description_is_shown_clipped(tmp_path, capsys):
    wl = _odd_workload(tmp_path, "d" * 2_000_000)
    assert main(["show", str(wl)]) == 0
    out = capsys.readouterr().out
    assert len(out) < 20_000 and "(1,999,600 more characters)" in " ".join(out.split())  # wrapped
    assert main(["check", str(wl)]) == 0  # the file keeps it whole and stays valid


def test_clipped_is_one_bounded_line():
    assert clipped("a\nb\x1b[31mc", 100) == "a b [31mc"
    assert clipped("x" * 1000, 10) == "x" * 10 + "... (990 more characters)"
    assert clipped("short") == "short"


def test_a_name_longer_than_the_limit_is_refused_naming_the_field(tmp_path):
    long = "g" * (MAX_NAME_CHARS + 1)
    text = TINY.replace("name: t_geo,", f"name: {long},").replace("table: t_geo", f"table: {long}")
    path = tmp_path / "long.yaml"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "placer.cli", "check", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 2, proc.stderr
    assert "long.yaml" in proc.stderr and "tables[2].name" in proc.stderr and "Traceback" not in proc.stderr
