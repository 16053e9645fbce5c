"""The house rules on the code's shape, checked: modules under 600 lines, functions under 80, lines of at most 120
characters, and no import circles between placer's modules (imports at module level and inside functions alike: a
late import hides a circle, it does not remove it).

The module cap keeps a module to one job; on its own it cut modules into fragments of a few dozen lines while
functions grew past 100 lines. A function is the unit a reader holds in mind, so it has a cap too: 80 lines, the
longest a reader follows on one screen and a half. The functions longer than that when the cap came are listed at
their length (LONG_FUNCTIONS): they may shrink, not grow, and leave the list once under the cap."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_LINE = 120
#: functions over MAX_FUNCTION_LINES when the cap came, at their length then: "module:function" -> lines
LONG_FUNCTIONS = {
    "placer/planner/kinds.py:fold": 128,
    "placer/planner/ilp.py:solve": 108, "placer/commands/calibrate.py:run": 108,
    "placer/commands/compare.py:compare_rows": 100,
    "placer/planner/fill.py:_choose": 87, "placer/planner/stage1.py:solve_stage1": 86,
    "placer/planner/two_stage.py:_after_stage1": 83,
}


def _sources(*folders: str, root: Path = ROOT) -> list[Path]:
    return sorted(p for f in folders for p in (root / f).rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str], root: Path = ROOT) -> set[str]:
    """The placer modules (of ``modules``) ``path`` imports, at module level or inside functions and classes (not
    under TYPE_CHECKING): ``from package import name`` imports the module package.name where there is one, else
    the package's __init__."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(nodes) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - (node.level - 1)] + ([base] if base else []))
                out.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
            else:  # every statement that holds statements: functions, classes, if, try, with, loops
                for key in ("body", "orelse", "finalbody", "handlers"):
                    visit(getattr(node, key, None) or [])

    visit(tree.body)
    return out & modules


def import_circles(root: Path) -> list[list[str]]:
    """The circles of imports (module level and late) between the modules of the placer package under ``root``."""
    modules = {_module_name(p, root): p for p in _sources("placer", root=root)}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in _imports(path, set(modules), root):
            if target != name:
                graph.add_edge(name, target)
    return [c for c in nx.simple_cycles(graph) if len(c) > 1]


@pytest.mark.parametrize("path", _sources("placer"), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_small(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines (at most {MAX_MODULE_LINES})"


def function_lengths(root: Path = ROOT) -> dict[str, int]:
    """'placer/x.py:name' -> lines, of every function and method of placer (the longest of a repeated name)."""
    out: dict[str, int] = {}
    for path in _sources("placer", root=root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{path.relative_to(root)}:{node.name}"
                out[key] = max(out.get(key, 0), node.end_lineno - node.lineno + 1)
    return out


def test_functions_are_short():
    lengths = function_lengths()
    long = {k: n for k, n in lengths.items() if n > LONG_FUNCTIONS.get(k, MAX_FUNCTION_LINES)}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (or over their listed length): {long}"
    shrunk = {k: lengths.get(k) for k, n in LONG_FUNCTIONS.items() if lengths.get(k, 0) <= MAX_FUNCTION_LINES}
    assert not shrunk, f"under the cap now: take them off LONG_FUNCTIONS: {shrunk}"


def test_lines_are_short():
    long = [f"{p.relative_to(ROOT)}:{i}" for p in _sources("placer", "validation", "tests")
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if len(line) > MAX_LINE]
    assert not long, f"lines over {MAX_LINE} characters: {long}"


def test_no_import_circles():
    circles = import_circles(ROOT)
    assert not circles, f"import circles: {circles[:5]}"


def test_the_circle_check_finds_one(tmp_path):
    """The check itself can fail: a.py imports b (absolute), b.py imports a (relative); e.py imports f inside a
    function and f.py imports e: a circle too; c.py imports a inside a function and d.py imports c: none."""
    package = tmp_path / "placer" / "sub"
    package.mkdir(parents=True)
    (tmp_path / "placer" / "__init__.py").write_text("", encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "a.py").write_text("from placer.sub import b\n", encoding="utf-8")
    (package / "b.py").write_text("from . import a\n", encoding="utf-8")
    (package / "c.py").write_text("def f():\n    from placer.sub import a\n", encoding="utf-8")
    (package / "d.py").write_text("from placer.sub.c import f\n", encoding="utf-8")
    (package / "e.py").write_text("def g():\n    if True:\n        from placer.sub import f\n", encoding="utf-8")
    (package / "f.py").write_text("import placer.sub.e\n", encoding="utf-8")
    circles = import_circles(tmp_path)
    assert sorted(map(sorted, circles)) == [["placer.sub.a", "placer.sub.b"], ["placer.sub.e", "placer.sub.f"]]
