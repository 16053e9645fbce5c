"""TorchRec ParameterConstraints files, read without running them, and written as the Python a TorchRec user pastes.

Read (``read_constraints_file``):

- JSON ``{table: {field: value}}``: ParameterConstraints fields per TorchRec table name (cache_params an object);
- placer's export document (``placer export --torchrec``): its ``workload_constraints`` block, its ``names`` map;
- Python (a ``.py`` file), parsed with ``ast`` and never executed: top-level ``constraints = {"t":
  ParameterConstraints(...), ...}`` and ``constraints["t"] = ParameterConstraints(...)``, and optionally ``topology
  = Topology(..., hbm_cap=...)`` (the headroom). Arguments are keywords with literal values (numbers, strings, True/
  False/None, lists, tuples, arithmetic on numbers such as ``40 * 1024**3``), TorchRec enum members
  (``ShardingType.ROW_WISE.value``, ``EmbeddingComputeKernel.FUSED.value``, ``CacheAlgorithm.LRU``, with or without
  ``.value``) and ``CacheParams(...)`` / ``KeyValueParams(...)`` calls of the same kind. Anything else (another call,
  a name, a comprehension, a top-level statement that changes ``constraints`` otherwise) is refused: SpecError
  naming the file, the field and the line (exit 2). Imports and other statements are ignored, never run.

Written (``python_snippet``): the same Python, so that a snippet placer writes reads back as it was.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field
from pathlib import Path

from placer.errors import SpecError
from placer.forms.shardings import TORCHREC_SHARDING_TYPES
from placer.specs.documents import parse_json
from placer.specs.files import read_text_guarded
from placer.torchrec_io import FORMAT

#: TorchRec enum members by class: ShardingType and EmbeddingComputeKernel (member -> value, TorchRec 1.8); the
#: others' members read as their names (the fields they fill are not carried; their names are shown)
ENUMS = {
    "ShardingType": TORCHREC_SHARDING_TYPES,
    "EmbeddingComputeKernel": {"DENSE": "dense", "FUSED": "fused", "FUSED_UVM": "fused_uvm",
                               "FUSED_UVM_CACHING": "fused_uvm_caching", "QUANT": "quant", "QUANT_UVM": "quant_uvm",
                               "QUANT_UVM_CACHING": "quant_uvm_caching", "KEY_VALUE": "key_value",
                               "CUSTOMIZED_KERNEL": "customized_kernel", "SSD_VIRTUAL_TABLE": "ssd_virtual_table",
                               "DRAM_VIRTUAL_TABLE": "dram_virtual_table",
                               "DRAM_SSD_VIRTUAL_TABLE": "dram_ssd_virtual_table", "FUSED_TRITON": "fused_triton"},
}
#: enums whose members read as their names
NAMED_ENUMS = ("CacheAlgorithm", "BoundsCheckMode", "DataType", "SparseType", "PoolingType")
#: the calls a file may make, and where (the field they fill, or the top-level name they are assigned to)
CALLS = {"ParameterConstraints": "constraints", "CacheParams": "cache_params", "KeyValueParams": "key_value_params",
         "Topology": "topology"}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
#: the largest number an arithmetic literal may reach (bytes of the largest machine, with room)
_MAX_NUMBER = 2.0 ** 64


@dataclass
class ConstraintsSource:
    """What a constraints file says: ParameterConstraints fields per TorchRec table, Topology.hbm_cap (bytes per
    rank) where given, the Topology's other fields, TorchRec -> placer table names (an export's map), and how
    messages name each table's entry and the hbm_cap."""

    path: str
    kind: str                                  # "json", "export" or "python"
    pcs: dict[str, dict]
    hbm_cap: float | None = None
    topology: dict = field(default_factory=dict)   # the Topology's other arguments
    names: dict | None = None                  # the export's "names" object
    export_not_carried: list[dict] = field(default_factory=list)  # what the export could not carry
    fields: dict[str, str] = field(default_factory=dict)   # table -> field path in the file
    hbm_cap_field: str = "topology.hbm_cap"

    def field_of(self, table: str) -> str:
        return self.fields.get(table, table)


def read_constraints_file(path: str) -> ConstraintsSource:
    """The constraints of ``path`` (module docstring); SpecError naming the file and field."""
    text = read_text_guarded(path, what="TorchRec constraints file")
    if Path(path).suffix == ".py":
        return _read_python(text, str(path))
    if not text.lstrip().startswith("{"):
        raise SpecError("expected JSON ({table: {field: value}}, or placer's export) or a Python file named .py",
                        file=str(path))
    doc = parse_json(text, str(path))
    if doc.get("format") == FORMAT:
        return _read_export(doc, str(path))
    for name, fields in doc.items():
        if not isinstance(fields, dict):
            raise SpecError(f"expected an object of ParameterConstraints fields, got {type(fields).__name__}",
                            file=str(path), field=name)
    return ConstraintsSource(str(path), "json", dict(doc))


def _read_export(doc: dict, path: str) -> ConstraintsSource:
    block = doc.get("workload_constraints")
    if block is None:
        raise SpecError("this export has no workload_constraints (its workload has no constraints block); the "
                        "per-table parameter_constraints pin the plan's own choices: import the plan with placer "
                        "import --torchrec instead", file=path, field="workload_constraints")
    pcs = block.get("parameter_constraints") if isinstance(block, dict) else None
    if not isinstance(pcs, dict) or not all(isinstance(v, dict) for v in pcs.values()):
        raise SpecError("expected an object of table -> ParameterConstraints fields", file=path,
                        field="workload_constraints.parameter_constraints")
    topo = block.get("topology") or {}
    where = "workload_constraints.parameter_constraints"
    lost = block.get("not_carried") or []
    if not isinstance(lost, list) or not all(isinstance(n, dict) and set(n) == {"table", "field", "why"}
                                             and all(isinstance(v, str) for v in n.values()) for n in lost):
        raise SpecError("expected a list of {table, field, why}", file=path, field="workload_constraints.not_carried")
    return ConstraintsSource(path, "export", pcs, hbm_cap=topo.get("hbm_cap"), names=doc.get("names"),
                             fields={t: f"{where}.{t}" for t in pcs}, export_not_carried=lost,
                             hbm_cap_field="workload_constraints.topology.hbm_cap")


# ---- Python, parsed without running it -----------------------------------------------------------------------


class _Reader:
    """Literal values of one parsed file; ``where`` names the field in messages."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, node: ast.AST, where: str, what: str):
        line = getattr(node, "lineno", None)
        raise SpecError(f"line {line}: {what}" if line else what, file=self.path, field=where)

    def value(self, node: ast.AST, where: str):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e, f"{where}[{i}]") for i, e in enumerate(node.elts)]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return self._number(node, where)
        if isinstance(node, ast.BinOp):
            return self._number(node, where)
        if isinstance(node, ast.Attribute):
            return self._enum(node, where)
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name in ("CacheParams", "KeyValueParams") and where.endswith(CALLS[name]):
                return self.keywords(node, where)
            self.fail(node, where, f"a call to {ast.unparse(node.func)}(): placer reads literal values only (it "
                                   "never runs the file); write the value out")
        self.fail(node, where, f"{ast.unparse(node)[:60]!r} is not a literal: placer reads numbers, strings, lists, "
                               "True/False/None and TorchRec enum members only (it never runs the file)")

    def _number(self, node: ast.AST, where: str):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self._number(node.operand, where)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = self._number(node.left, where), self._number(node.right, where)
            if isinstance(node.op, ast.Pow) and (abs(b) > 64 or abs(a) > _MAX_NUMBER):
                self.fail(node, where, "a power too large to be a constraint's number")
            try:
                v = _OPS[type(node.op)](a, b)
            except (ZeroDivisionError, OverflowError) as exc:
                self.fail(node, where, f"{ast.unparse(node)}: {exc}")
            if isinstance(v, complex) or abs(v) > _MAX_NUMBER:
                self.fail(node, where, f"{ast.unparse(node)} is not a number placer reads")
            return v
        self.fail(node, where, f"{ast.unparse(node)[:60]!r}: arithmetic on numbers only")

    def _enum(self, node: ast.Attribute, where: str):
        parts = _dotted(node)
        if parts and parts[-1] == "value":
            parts = parts[:-1]
        if parts and len(parts) >= 2:
            cls, member = parts[-2], parts[-1]
            if cls in ENUMS:
                if member not in ENUMS[cls]:
                    self.fail(node, where, f"{cls}.{member} is not a member of TorchRec's {cls} "
                                           f"({', '.join(ENUMS[cls])})")
                return ENUMS[cls][member]
            if cls in NAMED_ENUMS:
                return member
        self.fail(node, where, f"{ast.unparse(node)[:60]!r} is not a TorchRec enum member placer knows "
                               f"({', '.join(list(ENUMS) + list(NAMED_ENUMS))})")

    def keywords(self, call: ast.Call, where: str) -> dict:
        if call.args:
            self.fail(call, where, f"{_call_name(call.func)}() with positional arguments: write them as keywords "
                                   "(sharding_types=[...], ...)")
        out = {}
        for kw in call.keywords:
            if kw.arg is None:
                self.fail(call, where, "**arguments: placer reads keyword arguments written out only")
            out[kw.arg] = self.value(kw.value, f"{where}.{kw.arg}")
        return out


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def _call_name(func: ast.AST) -> str | None:
    parts = _dotted(func)
    return parts[-1] if parts else None


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _read_python(text: str, path: str) -> ConstraintsSource:
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise SpecError(f"Python syntax error at line {exc.lineno}: {exc.msg}", file=path) from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SpecError(f"cannot parse this file ({type(exc).__name__})", file=path) from None
    r = _Reader(path)
    src = ConstraintsSource(path, "python", {}, hbm_cap_field="topology.hbm_cap")
    seen = False
    for stmt in tree.body:
        target, value = _assignment(stmt)
        if isinstance(target, ast.Name) and target.id == "constraints":
            seen = True
            src.pcs, src.fields = {}, {}
            _read_dict(r, value, src)
        elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
              and target.value.id == "constraints"):
            key = target.slice
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                r.fail(stmt, "constraints[...]", "a table name must be a string literal")
            _read_entry(r, key.value, value, src)
        elif isinstance(target, ast.Name) and target.id == "topology":
            _read_topology(r, value, src)
        elif _mentions(stmt, "constraints"):
            r.fail(stmt, "constraints", "placer reads constraints = {...} and constraints[\"t\"] = "
                                        "ParameterConstraints(...) at the top level only (it never runs the file)")
    if not seen and not src.pcs:
        raise SpecError("defines no top-level constraints = {\"table\": ParameterConstraints(...), ...}", file=path)
    return src


def _assignment(stmt: ast.stmt) -> tuple[ast.AST | None, ast.AST | None]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return stmt.targets[0], stmt.value
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return stmt.target, stmt.value
    return None, None


def _read_dict(r: _Reader, node: ast.AST, src: ConstraintsSource) -> None:
    if not isinstance(node, ast.Dict):
        r.fail(node, "constraints", "expected a dict literal {\"table\": ParameterConstraints(...), ...} (placer "
                                    "never runs the file: no comprehensions or calls)")
    for k, v in zip(node.keys, node.values):
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            r.fail(v, "constraints", "a table name must be a string literal (not **other or an expression)")
        _read_entry(r, k.value, v, src)


def _read_entry(r: _Reader, table: str, node: ast.AST, src: ConstraintsSource) -> None:
    where = f"constraints[{table!r}]"
    if not (isinstance(node, ast.Call) and _call_name(node.func) == "ParameterConstraints"):
        r.fail(node, where, "expected ParameterConstraints(...)")
    src.pcs[table] = r.keywords(node, where)
    src.fields[table] = where


def _read_topology(r: _Reader, node: ast.AST, src: ConstraintsSource) -> None:
    if not (isinstance(node, ast.Call) and _call_name(node.func) == "Topology"):
        r.fail(node, "topology", "expected Topology(...)")
    args = r.keywords(node, "topology")
    src.hbm_cap = args.pop("hbm_cap", None)
    src.topology = args


# ---- Python, written ----------------------------------------------------------------------------------------

_ENUM_OF = {cls: {v: m for m, v in members.items()} for cls, members in ENUMS.items()}


def _py(key: str, value) -> str:
    if key == "sharding_types":
        return "[" + ", ".join(f"ShardingType.{_ENUM_OF['ShardingType'][v]}.value" for v in value) + "]"
    if key == "compute_kernels":
        return "[" + ", ".join(f"EmbeddingComputeKernel.{_ENUM_OF['EmbeddingComputeKernel'][v]}.value"
                               for v in value) + "]"
    return repr(value)


def _one_line(text: str) -> str:
    """``text`` safe inside one comment line (Python's or YAML's): line breaks written as \\n."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def python_snippet(exported, *, workload: str, world_size: int, local_world_size: int) -> str:
    """The Python a TorchRec user pastes (and ``read_constraints_file`` reads back): ``constraints`` (one
    ParameterConstraints per constrained table) and, with a headroom, ``topology`` with its hbm_cap. Names and
    reasons go in comments, one line each."""
    lines = ['"""TorchRec ParameterConstraints of a workload\'s constraints, written by placer export --torchrec.',
             "",
             "EmbeddingShardingPlanner(topology=topology, constraints=constraints) plans under them; placer import",
             "--torchrec --constraints reads this file back (without running it).",
             '"""', f"# workload: {_one_line(workload)}"]
    if exported.not_carried:
        lines.append("# not carried (TorchRec cannot say them; placer's check holds a plan to them):")
        lines += [f"# - {_one_line(n.text())}" for n in exported.not_carried]
    lines += ["from torchrec.distributed.embedding_types import EmbeddingComputeKernel",
              "from torchrec.distributed.planner import ParameterConstraints, Topology",
              "from torchrec.distributed.types import ShardingType", "", "constraints = {"]
    for table, fields in exported.parameter_constraints.items():
        lines.append(f"    {table!r}: ParameterConstraints(")
        lines += [f"        {k}={_py(k, v)}," for k, v in fields.items()]
        lines.append("    ),")
    lines.append("}")
    if exported.hbm_cap is not None:
        lines += ["", f"# hbm_headroom_GiB {exported.hbm_headroom_GiB:g}: hbm_cap is HBM per rank less placer's "
                      "reserve and the headroom, bytes",
                  f'topology = Topology(world_size={world_size}, local_world_size={local_world_size}, '
                  f'compute_device="cuda", hbm_cap={exported.hbm_cap})']
    return "\n".join(lines) + "\n"


# ---- the workload with the imported constraints -------------------------------------------------------------


def _block(imported, source: str) -> list[str]:
    """The YAML lines of a ``constraints:`` block, each number and entry with its source comment."""
    import yaml

    c = imported.constraints
    source = _one_line(source)
    lines = [f"# constraints: from {source} (TorchRec ParameterConstraints), by placer import --torchrec --constraints"]
    lines += [f"# not carried: {_one_line(n.text())}" for n in imported.not_carried]
    lines.append("constraints:")
    if c.hbm_headroom_GiB:
        lines.append(f"  hbm_headroom_GiB: {c.hbm_headroom_GiB:g}   # from {source}: its Topology hbm_cap, below "
                     "placer's usable HBM per GPU")
    if not c.tables:
        lines.append("  tables: []")
        return lines
    lines.append("  tables:")
    for entry, said in zip(c.tables, imported.sources):
        text = yaml.safe_dump(entry.model_dump(exclude_none=True, exclude_defaults=True), default_flow_style=True,
                              width=10_000, sort_keys=False).strip()
        lines.append(f"    - {text}   # {_one_line(said)}")
    return lines


def _replace_top_level(text: str, key: str, block: list[str]) -> str:
    """``text`` (YAML) with its top-level ``key:`` block (the key's line up to the next top-level line, the comment
    lines right above it included) replaced by ``block``, or ``block`` appended where it has none."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"{key}:")), None)
    if start is None:
        return text.rstrip("\n") + "\n" + "\n".join(block) + "\n"
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t", "#", "-")):
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1  # comments and blank lines before the next key belong to it
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return "\n".join(lines[:start] + block + lines[end:]) + "\n"


def workload_with(text: str, imported, *, source: str, json_syntax: bool) -> str:
    """The workload file ``text`` with its constraints block replaced by ``imported``'s (added where it has
    none): YAML keeps every other line and comment; JSON is written again whole (2-space indent)."""
    if json_syntax:
        import json

        doc = json.loads(text)
        doc["constraints"] = imported.constraints.model_dump(exclude_none=True, exclude_defaults=True)
        return json.dumps(doc, indent=2) + "\n"
    return _replace_top_level(text, "constraints", _block(imported, source))
