"""The placement forms' registry (placer/forms): every form one module, registered once, and the rest of placer
asking the registry instead of spelling shardings' names."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from placer.forms import names
from placer.forms.base import ShardingForm, StorageForm
from placer.forms.shardings import FROM_TORCHREC, SHARDINGS, names_where, sharding_of
from placer.forms.storage import COMPRESSED, FORCED_FORMS, MENU_ORDER, STORAGE
from placer.plan import Placement
from tests.conftest import ROOT

#: modules of placer/forms that are not a form: the classes, the registries, the names, the rows' tiers
INFRASTRUCTURE = {"__init__", "base", "names", "shardings", "storage", "tiers"}
#: "host" names a memory and a device kind too (host_rows, the host side of calibrate), so only the other
#: shardings' names (and TorchRec's types) are counted as literals
COUNTED = (set(SHARDINGS) | set(FROM_TORCHREC)) - {names.HOST}
#: sharding names spelled as string literals (docstrings aside) allowed outside placer/forms
MAX_LITERALS_OUTSIDE = 0


def _form_modules() -> list[str]:
    return sorted(p.stem for p in (ROOT / "placer" / "forms").glob("*.py") if p.stem not in INFRASTRUCTURE)


def test_every_form_module_is_registered_once():
    registered = {f.name: f for f in [*SHARDINGS.values(), *STORAGE.values()]}
    for stem in _form_modules():
        form = importlib.import_module(f"placer.forms.{stem}").FORM
        assert isinstance(form, (ShardingForm, StorageForm)) and form.name == stem
        assert registered[stem] is form
    assert sorted(registered) == _form_modules()


def test_names_module_agrees_with_the_registry():
    """plan.py validates ``sharding`` against names.SHARDING_NAMES without importing the registry: the two agree."""
    assert names.SHARDING_NAMES == tuple(SHARDINGS)
    assert names.CPU_LOOKUP == tuple(n for n, f in SHARDINGS.items() if not f.on_gpus)
    assert FORCED_FORMS == tuple(STORAGE) and set(MENU_ORDER) == set(COMPRESSED.values())


def test_properties_say_what_the_names_said():
    assert names_where("pooled_exchange") == ("table_wise", "row_wise", "column_wise") == names_where("node_local")
    assert names_where("whole_copies") == ("data_parallel",)
    assert {n: f.split for n, f in SHARDINGS.items() if f.split} == {"row_wise": "rows", "column_wise": "cols"}
    assert {n: f.family for n, f in SHARDINGS.items()} == {
        "table_wise": "gpu", "row_wise": "node", "column_wise": "block", "data_parallel": "all", "host": "node"}
    assert {st: f.name for st, f in FROM_TORCHREC.items()} == {
        "table_wise": "table_wise", "row_wise": "row_wise", "table_row_wise": "row_wise",
        "column_wise": "column_wise", "table_column_wise": "column_wise", "data_parallel": "data_parallel"}
    assert not SHARDINGS["host"].runs_under_torchrec


@pytest.mark.parametrize("geometry, accepted", [
    ("table_wise", {"table_wise", "row_wise", "column_wise", "data_parallel", "host"}),
    ("row_wise", {"row_wise"}), ("column_wise", {"column_wise"}), ("data_parallel", {"data_parallel"}),
    (None, set())])
def test_labels_accept_their_geometry_and_one_whole_piece(geometry, accepted):
    assert {n for n, f in SHARDINGS.items() if f.accepts(geometry)} == accepted


def test_a_placement_asks_its_form():
    p = Placement.model_validate({"table": "t", "sharding": "host", "shards": [
        {"device": "node0/host", "rows": [0, 10], "cols": [0, 4], "hbm_rows": 0, "host_rows": 10}]})
    assert sharding_of(p) is SHARDINGS["host"] and p.label() == "host node0/host"
    with pytest.raises(ValueError):
        Placement.model_validate({**p.model_dump(), "sharding": "grid_wise"})


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
            and n.value in COUNTED]


def test_sharding_names_are_spelled_in_the_registry_only():
    """Outside placer/forms the code asks a form's properties (sharding_of(p).whole_copies) or uses its module's
    NAME; a new sharding is then a new module and its registry entry, not a hunt for string tests."""
    found = [f"{p.relative_to(ROOT)}:{line} {value!r}" for p in sorted((ROOT / "placer").rglob("*.py"))
             if "forms" not in p.relative_to(ROOT).parts for line, value in _literals(p)]
    assert len(found) <= MAX_LITERALS_OUTSIDE, found


def test_row_wise_is_offered_at_every_precision_the_table_allows():
    """A table that allows fp16 gets fp16 row-wise splits beside the fp32 ones (the menu's dedup key once left the
    precision out, so fp16 row-wise was never offered where fp32 row-wise was)."""
    from placer.options import table_options
    from tests.conftest import shipped_pair

    topo, wl = shipped_pair("dgx-h100", "tiny")
    t = next(t for t in wl.tables if t.allow_fp16)
    row_wise = [p for p in table_options(t, topo, wl) if p.sharding == "row_wise"]
    by_precision = {prec: sorted(tuple(s.hbm_rows for s in p.shards) for p in row_wise if p.precision == prec)
                    for prec in ("fp32", "fp16")}
    assert by_precision["fp32"] and by_precision["fp16"] == by_precision["fp32"]
