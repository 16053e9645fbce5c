"""Hostile inputs for placer: mutated copies of the shipped specs, workloads, plans and a TorchRec export,
hostile files, hostile id samples for ``profile`` and hostile command-line arguments. Shared by the fuzz
campaign (validation/fuzz_inputs.py) and the suite's fuzz test (tests/test_fuzz.py). Every mutation is drawn
from a ``random.Random``, so a case is reproduced by its seed.

A *case* is a command line for ``placer`` plus the files it needs, written into a scratch folder:
``Case(command, argv, files, note)``. ``make_case(rng, folder, bases)`` draws one.
"""
from __future__ import annotations

import copy
import json
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent

#: shipped files the mutations start from: small enough that a solve of any of them ends in seconds
HARDWARE = ["h100-pcie-host", "pcie-4gpu-workstation", "dgx-h100", "dgx-h100-2node", "local-cpu-procs",
            "cpu-server", "measured-cpu-2026-11-23"]
WORKLOADS = ["tiny", "criteo-kaggle-dlrm", "mlperf-dlrm-v1"]

#: values a hostile user types where a number belongs (text forms: YAML reads them as written)
HOSTILE_NUMBERS: list[Any] = [float("inf"), float("-inf"), float("nan"), 0, -1, -0.0, 1e-310, 1e308, 2 ** 63 - 1,
                              2 ** 64, 10 ** 12, 1e30, 0.5, 1.5, 3, 65536, 2 ** 31, -(2 ** 63)]
HOSTILE_OTHER: list[Any] = [True, False, "yes", "", "x", None, [], {}, [1, 2], {"a": 1}, "1e400", "12 GiB",
                            "gpu9", "host", "nic0", "*", "../../etc/passwd", "\u00e9\u4e2d"]
SCALES = [1e-9, 1e-3, 0.1, 2, 1000, 1024, 1e6, 1e12, -1]
PLAUSIBLE_SCALES = [0.01, 0.1, 0.5, 0.9, 1.1, 2, 10, 100, 1000]
#: numeric command-line arguments of each command and hostile values for them
HOSTILE_ARGS = ["0", "-1", "-3", "nan", "inf", "-inf", "1e400", "1e-310", "9" * 30, "abc", "", "0.5", "1e9"]
ARGS = {"solve": ["--time-limit", "--gap", "--threads", "--seed"],
        "compare": ["--time-limit", "--gap", "--threads", "--seed"],
        "sweep": ["--gpus", "--target-throughput", "--max-gpus", "--time-limit"],
        "run": ["--steps", "--warmup", "--phase-steps", "--scale", "--seed", "--threads", "--pool", "--nproc"]}


@dataclass
class Bases:
    """Parsed shipped documents (hardware by name, workloads by name) and one plan per (hw, wl) pair."""

    hardware: dict[str, dict]
    workloads: dict[str, dict]
    plans: dict[tuple[str, str], dict] = field(default_factory=dict)
    torchrec: dict = field(default_factory=dict)  # tiny's plan on h100-pcie-host as placer export --torchrec wrote it


def load_bases(plan_pairs: list[tuple[str, str]] = (("h100-pcie-host", "tiny"), ("dgx-h100", "tiny"),
                                                     ("local-cpu-procs", "tiny"))) -> Bases:
    """Read the shipped files and solve one plan per pair (a few seconds)."""
    from placer.planner.solve import SolveConfig, solve
    from placer.specs import load_hardware, load_workload
    from placer.topology import Topology

    hw = {n: yaml.safe_load((ROOT / "hardware_specs" / f"{n}.yaml").read_text()) for n in HARDWARE}
    wl = {n: yaml.safe_load((ROOT / "workloads" / f"{n}.yaml").read_text()) for n in WORKLOADS}
    bases = Bases(hw, wl)
    for h, w in plan_pairs:
        workload = load_workload(ROOT / "workloads" / f"{w}.yaml")
        topo = Topology(load_hardware(ROOT / "hardware_specs" / f"{h}.yaml"), workload.dense.dtype)
        plan = solve(topo, workload, SolveConfig(time_limit_s=20))
        bases.plans[(h, w)] = json.loads(plan.model_dump_json())
    bases.torchrec = _exported(bases.plans[("h100-pcie-host", "tiny")])
    return bases


def _exported(plan: dict) -> dict:
    """The TorchRec JSON ``placer export --torchrec`` writes for tiny's plan on h100-pcie-host."""
    import contextlib
    import io
    import tempfile

    from placer.cli import main

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        (Path(tmp) / "plan.json").write_text(json.dumps(plan))
        code = main(["export", "--torchrec", str(ROOT / "hardware_specs" / "h100-pcie-host.yaml"),
                     str(ROOT / "workloads" / "tiny.yaml"), str(Path(tmp) / "plan.json"), "-o",
                     str(Path(tmp) / "plan.torchrec.json")])
        assert code == 0, "placer export --torchrec failed on a shipped plan"
        return json.loads((Path(tmp) / "plan.torchrec.json").read_text())


# ---- document mutations -------------------------------------------------------------------------------------

def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) in a document, containers included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, prefix + (i,))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _set(doc, path, value):
    _get(doc, path[:-1])[path[-1]] = value


def mutate_document(doc: dict, rng: random.Random, count: int = 1) -> tuple[dict, list[str]]:
    """A deep copy of ``doc`` with ``count`` random mutations; returns it and what each mutation did."""
    doc = copy.deepcopy(doc)
    notes = []
    for _ in range(count):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        numeric = [p for p in paths if isinstance(_get(doc, p), (int, float)) and not isinstance(_get(doc, p), bool)]
        kind = "plausible" if rng.random() < 0.5 else rng.choice(
            ["number", "number", "scale", "other", "delete", "duplicate", "unknown_key", "empty", "rename"])
        if kind in ("number", "scale", "plausible") and numeric:
            p = rng.choice(numeric)
            old = _get(doc, p)
            if kind == "number":
                new = rng.choice(HOSTILE_NUMBERS)
            elif kind == "scale":
                new = old * rng.choice(SCALES)
            else:  # a value that passes the schema but stresses the planner and the runner
                new = old * rng.choice(PLAUSIBLE_SCALES)
                new = max(1, round(new)) if isinstance(old, int) else new
            _set(doc, p, new)
            notes.append(f"{_fmt(p)}: {old!r} -> {new!r}")
        elif kind == "other":
            p = rng.choice(paths)
            new = rng.choice(HOSTILE_OTHER)
            _set(doc, p, copy.deepcopy(new))
            notes.append(f"{_fmt(p)} -> {new!r}")
        elif kind == "delete":
            p = rng.choice(paths)
            parent = _get(doc, p[:-1])
            del parent[p[-1]]
            notes.append(f"deleted {_fmt(p)}")
        elif kind == "duplicate":
            lists = [p for p in paths if isinstance(_get(doc, p), list) and _get(doc, p)]
            if lists:
                p = rng.choice(lists)
                items = _get(doc, p)
                items.insert(rng.randrange(len(items) + 1), copy.deepcopy(rng.choice(items)))
                notes.append(f"duplicated an item of {_fmt(p)}")
        elif kind == "unknown_key":
            dicts = [p for p in [()] + paths if isinstance(_get(doc, p), dict)]
            p = rng.choice(dicts)
            _get(doc, p)[rng.choice(["hbm_speed", "Count", "rows ", "tables2"])] = 1
            notes.append(f"unknown key in {_fmt(p)}")
        elif kind == "empty":
            containers = [p for p in paths if isinstance(_get(doc, p), (list, dict))]
            if containers:
                p = rng.choice(containers)
                _set(doc, p, type(_get(doc, p))())
                notes.append(f"emptied {_fmt(p)}")
        elif kind == "rename":
            strings = [p for p in paths if isinstance(_get(doc, p), str)]
            if strings:
                p = rng.choice(strings)
                new = rng.choice(["gpu0", "gpu-switch", "host", "nic1", "t_users", "node0/gpu0", "a" * 300, ""])
                _set(doc, p, new)
                notes.append(f"{_fmt(p)} -> {new!r}")
    return doc, notes


def _fmt(path: tuple) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def dump(doc: Any, suffix: str) -> str:
    """A document as YAML or JSON text (non-finite floats as YAML .inf/.nan or JSON Infinity/NaN)."""
    if suffix == ".json":
        return json.dumps(doc, indent=1)
    return yaml.safe_dump(doc, sort_keys=False)


def mutate_text(text: str, rng: random.Random) -> tuple[bytes, str]:
    """Damage a document's text: duplicate a line (duplicate keys), cut it, add bytes that are not UTF-8,
    nest brackets deeply, or swap a character."""
    lines = text.splitlines(keepends=True)
    kind = rng.choice(["dup_line", "truncate", "bad_bytes", "nesting", "swap_char", "bom", "tabs", "tag", "anchor"])
    if kind == "tag" and ": " in text:
        tag = rng.choice(["!!bool", "!!int", "!!float", "!!timestamp", "!!binary", "!!set", "!!omap", "!!str",
                          "!!python/object/apply:os.system", "!custom", "!!null", "!!seq", "!!map"])
        spots = [i for i in range(len(text) - 1) if text[i:i + 2] == ": "]
        at = rng.choice(spots) + 2
        return (text[:at] + tag + " " + text[at:]).encode(), f"tag {tag} at character {at}"
    if kind == "anchor" and ": " in text:
        depth = rng.choice([3, 9, 30])
        bomb = "lol0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"lol{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n"
            for i in range(1, depth))
        return (bomb + text).encode(), f"alias expansion {depth} levels deep"
    if kind == "dup_line" and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "".join(lines).encode(), f"line {i + 1} duplicated"
    if kind == "truncate":
        cut = rng.randrange(max(1, len(text)))
        return text[:cut].encode(), f"cut at character {cut}"
    if kind == "bad_bytes":
        data = bytearray(text.encode())
        at = rng.randrange(max(1, len(data)))
        data[at:at] = bytes([0xff, 0xfe, 0xc3])
        return bytes(data), f"bytes 0xff 0xfe 0xc3 at {at}"
    if kind == "nesting":
        depth = rng.choice([200, 5000, 20000])
        return (text + "\nextra: " + "[" * depth + "]" * depth + "\n").encode(), f"{depth} nested brackets"
    if kind == "bom":
        return b"\xef\xbb\xbf" + text.encode(), "UTF-8 byte order mark"
    if kind == "tabs":
        return text.replace("  ", "\t", 3).encode(), "tabs for indentation"
    at = rng.randrange(max(1, len(text)))
    return (text[:at] + rng.choice(":{}[]-#&*!|>'\"%@`,") + text[at + 1:]).encode(), f"character {at} swapped"


# ---- hostile files --------------------------------------------------------------------------------------------

def hostile_file(folder: Path, rng: random.Random, name: str) -> tuple[Path, str]:
    """A path that is not a regular, readable document: FIFO, link to /dev/zero or /dev/urandom, directory,
    missing, empty, binary, a NumPy archive."""
    path = folder / name
    kind = rng.choice(["fifo", "dev_zero", "dev_urandom", "directory", "missing", "empty", "binary", "npz",
                       "dangling_link", "unreadable"])
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("dev_zero", "dev_urandom"):
        os.symlink(f"/dev/{kind[4:]}", path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "binary":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    elif kind == "npz":
        import numpy as np

        np.savez(path.with_suffix(".npz"), a=np.arange(10))
        path.with_suffix(".npz").rename(path)
    elif kind == "dangling_link":
        os.symlink(folder / "nowhere", path)
    elif kind == "unreadable":
        path.write_text("name: x\n")
        path.chmod(0)
    return path, kind


def hostile_array(path: Path, rng: random.Random) -> str:
    """An access-count or CDF .npy that is not one: NaN, negative, objects (a pickle), 3-D, strings, empty,
    all zeros, a CDF that falls, or not a .npy at all (a hostile file)."""
    import numpy as np

    kind = rng.choice(["nan", "negative", "object", "3d", "strings", "empty", "zeros", "falling_cdf", "huge",
                       "file"])
    arrays = {"nan": np.array([1.0, np.nan, 3.0]), "negative": np.array([5.0, -1.0, 2.0]),
              "object": np.array([{"a": 1}, None], dtype=object), "3d": np.ones((2, 2, 2)),
              "strings": np.array(["a", "b"]), "empty": np.zeros(0), "zeros": np.zeros(100),
              "falling_cdf": np.array([[0.1, 0.9], [0.5, 0.2]]), "huge": np.full(10, 1e308)}
    if kind == "file":
        made, what = hostile_file(path.parent, rng, path.name)
        return f"access file is {what}"
    np.save(path, arrays[kind], allow_pickle=kind == "object")
    if path.with_suffix(".npy.npy").exists():
        path.with_suffix(".npy.npy").rename(path)
    return f"access file holds {kind}"


#: tiny's features and their tables' rows (profile's ids must index them)
TINY_FEATURES = {"f_user": 20000, "f_item": 5000, "f_geo": 300, "f_ad": 8000, "f_hist": 2000, "f_cat_a": 1000,
                 "f_cat_b": 1000}


def hostile_ids(path: Path, rng: random.Random) -> tuple[Path, str]:
    """An .npz of ids per tiny feature for ``placer profile``: sound, or with one feature's ids out of range,
    negative, float, NaN, 3-D, empty, an unknown key; or not an .npz at all."""
    import numpy as np

    kind = rng.choice(["sound", "sound", "out_of_range", "negative", "float", "nan", "3d", "empty", "unknown_key",
                       "huge", "file"])
    if kind == "file":
        made, what = hostile_file(path.parent, rng, path.name)
        return made, f"ids file is {what}"
    gen = np.random.default_rng(rng.randrange(2 ** 32))
    arrays = {f: gen.integers(0, rows, size=rng.choice([1, 100, 5000])) for f, rows in TINY_FEATURES.items()}
    f = rng.choice(list(arrays))
    bad = {"out_of_range": lambda a: a + 10 ** 6, "negative": lambda a: -a - 1, "float": lambda a: a + 0.5,
           "nan": lambda a: np.full(a.shape, np.nan), "3d": lambda a: np.zeros((2, 2, 2), dtype=np.int64),
           "empty": lambda a: a[:0], "huge": lambda a: np.full(a.shape, 2 ** 62, dtype=np.int64)}
    if kind in bad:
        arrays[f] = bad[kind](arrays[f])
    elif kind == "unknown_key":
        arrays["not_a_feature"] = arrays.pop(f)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path, f"ids {kind} ({f})"


# ---- cases -------------------------------------------------------------------------------------------------

@dataclass
class Case:
    """One hostile invocation: ``placer <argv>`` run in ``folder``."""

    command: str
    argv: list[str]
    note: str
    timeout_s: float = 60.0
    #: the exit code the case must end with, where one is known (a mislabelled plan: 2), else None (0, 2 or 3)
    expect_code: int | None = None


#: the note of a plan whose sharding label no longer describes its shards (mislabel_plan)
MISLABELLED = "mislabelled"


def mislabel_plan(doc: dict, rng: random.Random) -> tuple[dict, str] | None:
    """A copy of the plan with one single-shard placement cut in two pieces (by rows or by columns, on the
    same device) under a label that does not describe the cut: table_wise or the other axis's label. The
    plan check must refuse it (exit 2) in every command that reads the plan (plan.check_plan)."""
    placements = doc.get("placements") if isinstance(doc, dict) else None
    if not isinstance(placements, list):
        return None
    ok = [i for i, p in enumerate(placements) if isinstance(p, dict) and len(p.get("shards") or []) == 1
          and p.get("sharding") in ("table_wise", "row_wise", "column_wise")
          and p["shards"][0]["rows"][1] - p["shards"][0]["rows"][0] >= 2
          and p["shards"][0]["cols"][1] - p["shards"][0]["cols"][0] >= 2]
    if not ok:
        return None
    doc = copy.deepcopy(doc)
    i = rng.choice(ok)
    p = doc["placements"][i]
    s = p["shards"][0]
    hot = s["hbm_rows"] / max(s["hbm_rows"] + s["host_rows"], 1)
    axis = rng.choice(["rows", "cols"])
    lo, hi = s[axis]
    cut = rng.randint(lo + 1, hi - 1)
    pieces = []
    for span in ((lo, cut), (cut, hi)):
        piece = dict(s, **{axis: [span[0], span[1]]})
        n = piece["rows"][1] - piece["rows"][0]
        piece["hbm_rows"] = int(round(hot * n))
        piece["host_rows"] = n - piece["hbm_rows"]
        pieces.append(piece)
    p["shards"] = pieces
    p["sharding"] = rng.choice(["table_wise", "column_wise" if axis == "rows" else "row_wise"])
    p.pop("hot_fraction", None)
    return doc, f"{MISLABELLED}: placements[{i}] cut by {axis} at {cut}, labelled {p['sharding']}"


def _write(folder: Path, name: str, data: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def _document(rng: random.Random, folder: Path, name: str, doc: dict, mutate: bool) -> tuple[Path, str]:
    """Write ``doc`` (mutated when asked: the document, its text, or a hostile file) as YAML or JSON."""
    suffix = rng.choice([".yaml", ".yaml", ".json"]) if not name.startswith("plan") else ".json"
    if not mutate:
        return _write(folder, name + suffix, dump(doc, suffix)), ""
    has_tables = isinstance(doc.get("tables"), list)
    has_placements = isinstance(doc.get("placements"), list)
    how = rng.choices(["doc", "text", "file", "access_file", "label"],
                      weights=[8, 2, 1, 1 if has_tables else 0, 2 if has_placements else 0])[0]
    if how == "label":  # the sharding label against the shards' geometry (falls through when no table can be cut)
        mislabelled = mislabel_plan(doc, rng)
        if mislabelled is not None:
            return _write(folder, name + suffix, dump(mislabelled[0], suffix)), mislabelled[1]
        how = "doc"
    if how == "access_file":  # a table's access read from a .npy beside the workload: hostile file or array
        doc = copy.deepcopy(doc)
        i = rng.randrange(len(doc["tables"]))
        doc["tables"][i]["access"] = {"kind": "cdf", "file": "access.npy"}
        note = hostile_array(folder / "access.npy", rng)
        return _write(folder, name + suffix, dump(doc, suffix)), f"tables[{i}].access.file: {note}"
    if how == "doc":
        mutated, notes = mutate_document(doc, rng, count=rng.choice([1, 1, 1, 2, 3]))
        return _write(folder, name + suffix, dump(mutated, suffix)), "; ".join(notes)
    if how == "text":
        data, note = mutate_text(dump(doc, suffix), rng)
        return _write(folder, name + suffix, data), note
    path, kind = hostile_file(folder, rng, name + suffix)
    return path, f"{name} is {kind}"


#: how often the campaign draws each kind of case
CAMPAIGN_WEIGHTS = {"check": 30, "check_plan": 10, "show": 5, "solve": 15, "simulate": 15, "baseline": 8,
                    "args": 8, "run": 4, "compare": 3, "sweep": 2, "explain": 5, "export": 3, "import": 3,
                    "profile": 4}


def make_case(rng: random.Random, folder: Path, bases: Bases, weights: dict[str, float] | None = None) -> Case:
    """Draw one case: a command and which of its inputs is hostile. ``folder`` is an empty scratch folder;
    ``weights`` (command -> weight, default CAMPAIGN_WEIGHTS) says how often each kind of case is drawn."""
    weights = weights or CAMPAIGN_WEIGHTS
    command = rng.choices(list(weights), weights=list(weights.values()))[0]
    hw_name, wl_name = rng.choice(list(bases.plans))
    if command in ("solve", "baseline", "compare", "sweep", "check", "show") and rng.random() < 0.5:
        hw_name = rng.choice(HARDWARE)
    if command in ("check", "show", "solve", "baseline", "compare") and rng.random() < 0.5:
        wl_name = rng.choice(WORKLOADS)
    target = rng.choice(["hw", "wl", "plan"] if command in ("check_plan", "simulate", "run") else ["hw", "wl"])
    if command == "args":
        target = None
    hw, hw_note = _document(rng, folder, "hw", bases.hardware[hw_name], target == "hw")
    wl, wl_note = _document(rng, folder, "wl", bases.workloads[wl_name], target == "wl")
    plan, plan_note = _document(rng, folder, "plan", bases.plans.get((hw_name, wl_name), {}), target == "plan")
    note = f"{hw_name} x {wl_name}; {target or 'arguments'}: {hw_note or wl_note or plan_note}"
    refused = 2 if plan_note.startswith(MISLABELLED) and target == "plan" else None
    out = str(folder / "out.json")
    fast = ["--time-limit", "3"]
    if command == "check":
        return Case("check", ["check", str(hw if target == "hw" else wl)], note, 30)
    if command == "show":
        return Case("show", ["show", str(hw if target == "hw" else wl)], note, 30)
    if command == "check_plan":
        return Case(command, ["check", str(plan), "--hardware", str(hw), "--workload", str(wl)], note, 30, refused)
    if command == "solve":
        return Case(command, ["solve", str(hw), str(wl), "-o", out] + fast, note, 90)
    if command == "baseline":
        method = rng.choice(["host_cpu", "uvm", "greedy_size", "round_robin", "random", "fae"])
        return Case(command, ["solve", str(hw), str(wl), "--method", method, "-o", out], note + f"; {method}", 60)
    if command == "simulate":
        return Case(command, ["simulate", str(hw), str(wl), str(plan), "--json"], note, 60, refused)
    if command == "compare":
        return Case(command, ["compare", str(hw), str(wl), "--methods", "ilp,greedy_size,fae"] + fast, note, 120)
    if command == "sweep":
        return Case(command, ["sweep", str(hw), str(wl), "--json"] + fast, note, 120)
    if command == "explain":
        return Case(command, ["explain", str(hw), str(wl), str(plan), "--json"], note, 90)
    if command == "export":
        return Case(command, ["export", "--torchrec", str(hw), str(wl), str(plan), "-o",
                              str(folder / "plan.torchrec.json")], note, 90)
    if command == "import":
        h, w = (folder / "hwi.yaml"), (folder / "wli.yaml")
        h.write_text(dump(bases.hardware["h100-pcie-host"], ".yaml"))
        w.write_text(dump(bases.workloads["tiny"], ".yaml"))
        tr, tnote = _document(rng, folder, "plantr", bases.torchrec, rng.random() < 0.9)
        return Case(command, ["import", "--torchrec", str(tr), str(h), str(w), "-o", out], f"import: {tnote}", 60)
    if command == "profile":
        w = folder / "wlp.yaml"
        w.write_text(dump(bases.workloads["tiny"], ".yaml"))
        data, dnote = hostile_ids(folder / "ids.npz", rng)
        return Case(command, ["profile", str(w), str(data), "--format", "npy", "-o", str(folder / "prof.yaml")],
                    f"profile: {dnote}", 60)
    if command == "run":
        hw_cpu, _ = _document(rng, folder, "hwcpu", bases.hardware["local-cpu-procs"], target == "hw")
        plan_cpu, pnote = _document(rng, folder, "plancpu", bases.plans[("local-cpu-procs", "tiny")],
                                    target == "plan")
        wl_tiny, wnote = _document(rng, folder, "wltiny", bases.workloads["tiny"], target == "wl")
        return Case(command, ["run", str(hw_cpu), str(wl_tiny), str(plan_cpu), "--device", "cpu", "--steps", "2",
                              "--warmup", "1", "--threads", "1", "--json"], f"run {target}: {pnote or wnote}", 120)
    # hostile arguments of a command over sound files
    sub = rng.choice(list(ARGS))
    flag = rng.choice(ARGS[sub])
    value = rng.choice(HOSTILE_ARGS)
    base = {"solve": ["solve", str(hw), str(wl), "-o", out],
            "compare": ["compare", str(hw), str(wl), "--methods", "ilp,greedy_size"],
            "sweep": ["sweep", str(hw), str(wl), "--json"],
            "run": ["run", str(hw), str(wl), str(plan), "--device", "cpu", "--steps", "2", "--warmup", "1"]}[sub]
    if sub == "run":
        hw_cpu, _ = _document(rng, folder, "hwcpu", bases.hardware["local-cpu-procs"], False)
        plan_cpu, _ = _document(rng, folder, "plancpu", bases.plans[("local-cpu-procs", "tiny")], False)
        wl_tiny, _ = _document(rng, folder, "wltiny", bases.workloads["tiny"], False)
        base = ["run", str(hw_cpu), str(wl_tiny), str(plan_cpu), "--device", "cpu", "--steps", "2", "--warmup", "1"]
    extra = [] if flag == "--time-limit" or sub == "run" else fast
    if rng.random() < 0.2 and sub != "run":  # an output path that cannot be written
        bad = rng.choice([str(folder), "/proc/nope/out.json", str(folder / "missing" / "out.json"), "/dev/full"])
        base = [a if a != out else bad for a in base]
        note = f"output path {bad}"
    return Case("args", base + [flag, value] + extra, f"{sub} {flag} {value!r}; {note}", 120)


def finite_numbers(value: Any) -> bool:
    """True when every number in a JSON-like value is finite (exit 0 must never print inf or NaN times)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_numbers(v) for v in value)
    return True
