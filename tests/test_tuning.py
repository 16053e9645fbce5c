"""The planner's fitted constants (planner/tuning.py): one entry each, its value the one the modules use, and a
validation/tune_planner.py group that re-derives it; no "/tmp" or "scripts not kept" evidence left in placer/.
Nothing here times anything (the script's --dry-run measures nothing)."""
from __future__ import annotations

import subprocess
import sys

from placer.planner import effort, single_stage, stage1_groups, stage2, tiebreak, tuning, two_stage_solve
from tests.conftest import ROOT
from validation import tune_planner


def test_every_entry_is_the_module_value_with_a_unit_and_a_script():
    assert len(tuning.TABLE) >= 30
    for name, entry in tuning.TABLE.items():
        assert getattr(tuning, name) == entry.value and entry.unit and entry.what, name
        group = entry.script.split()[-1]
        assert entry.script.startswith("python3 validation/tune_planner.py ") and group in tune_planner.GROUPS, name
        assert name in tune_planner.GROUPS[group][0], f"{name}: not listed in its group {group}"
    assert (ROOT / "validation" / "tune_planner.py").is_file()


def test_the_modules_read_the_constants_from_tuning():
    assert effort.SETUP_S_PER_PAIR is tuning.SETUP_S_PER_PAIR and effort.LP_CALL_S is tuning.LP_CALL_S
    assert two_stage_solve.BASELINES_NICE == tuning.BASELINES_NICE == 10
    assert stage2.CHILD_NICE == tuning.STAGE2_CHILD_NICE == 15
    assert stage1_groups.LEVEL == tuning.GROUP_LEVEL and tiebreak.STEP_WEIGHT == tuning.STEP_WEIGHT
    assert single_stage.WHAT_IF_S_PER_PAIR == tuning.WHAT_IF_S_PER_PAIR


def test_no_evidence_cites_tmp_or_lost_scripts():
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "placer").rglob("*.py"))
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if "/tmp" in line or "scripts not kept" in line]
    assert not bad, bad


def test_the_script_lists_every_group_without_measuring():
    run = subprocess.run([sys.executable, str(ROOT / "validation" / "tune_planner.py"), "all", "--dry-run"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    for group in tune_planner.GROUPS:
        assert f"== {group}:" in run.stdout
    for name in tuning.TABLE:
        assert name in run.stdout
