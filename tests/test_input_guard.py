"""Hostile input to the spec loaders: every bad file or value is a SpecError (exit 2) naming the file and the
field, never a traceback, a hang or a silent wrong answer (issue 16, the spec-loading room)."""
from __future__ import annotations

import copy
import json
import math
import os
import random
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from placer.cli import main
from placer.errors import SpecError
from placer.specs.files import load_npy_guarded, read_text_guarded
from placer.specs.hardware import HardwareSpec, load_hardware
from placer.specs.loading import read_document
from placer.specs.plausible import SpecWarning
from placer.specs.workload import Workload, load_workload
from placer.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
HW = yaml.safe_load((ROOT / "hardware_specs" / "dgx-h100.yaml").read_text())
WL = yaml.safe_load((ROOT / "workloads" / "tiny.yaml").read_text())
T = "dgx-h100"


def _edit(base, **edits):
    """Deep copy of ``base`` with ``a__b__0__c=value`` edits applied."""
    doc = copy.deepcopy(base)
    for path, value in edits.items():
        keys = [int(k) if k.isdigit() else k for k in path.split("__")]
        target = doc
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
    return doc


def _check(path, capsys) -> str:
    """``placer check path`` must exit 2, name the file and print no traceback; returns stderr, one line."""
    code = main(["check", str(path)])
    err = capsys.readouterr().err
    assert code == 2, f"exit {code}, stderr: {err}"
    assert "Traceback" not in err
    err = " ".join(err.split())
    assert Path(path).name in err, err
    return err


def _in_thread(fn, timeout_s=120.0):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it has not returned in time."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout_s)
    assert not th.is_alive(), "hung"
    if "error" in box:
        raise box["error"]
    return box.get("value")


# ---- 1. reading files ---------------------------------------------------------------------------------

def test_not_utf8(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    err = _check(path, capsys)
    assert "not UTF-8" in err and "line 1" in err


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + (ROOT / "workloads" / "tiny.yaml").read_bytes())
    assert load_workload(path).name == "tiny"


@pytest.mark.parametrize("text", ["a: " + "[" * 20000 + "]" * 20000, "a: " + "{b: " * 300000 + "}" * 300000,
                                  "- " * 300000 + "x",
                                  "".join(f"{' ' * i}k{i}:\n" for i in range(150)) + " " * 150 + "v"],
                         ids=["flow-20000", "flow-300000", "block-seq-300000", "block-map-150"])
def test_deep_nesting(tmp_path, capsys, text):
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    assert "nested" in _check(path, capsys)


def test_deep_json(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text('{"a": ' + "[" * 100000 + "]" * 100000 + "}")
    assert "nested" in _check(path, capsys)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path, capsys):
    path = tmp_path / "secret.yaml"
    path.write_text("name: x\n")
    path.chmod(0)
    assert "permission denied" in _check(path, capsys)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_does_not_hang(tmp_path, capsys):
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    code = _in_thread(lambda: main(["check", str(path)]))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "FIFO" in err and "pipe.yaml" in err


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_symlink_to_dev_zero_does_not_hang(tmp_path, capsys):
    path = tmp_path / "zero.yaml"
    path.symlink_to("/dev/zero")
    code = _in_thread(lambda: main(["check", str(path)]))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "device" in err and "zero.yaml" in err


def test_directory(tmp_path, capsys):
    (tmp_path / "dir.yaml").mkdir()
    assert "directory" in _check(tmp_path / "dir.yaml", capsys)


def test_size_cap_is_named(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("a: 1\n" * 1000)
    with pytest.raises(SpecError, match=r"over the 1,000 bytes placer reads") as exc:
        read_text_guarded(path, max_bytes=1000)
    assert exc.value.file == str(path)


def test_read_document_is_the_guarded_way_in(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text('{"a": 1}')
    assert read_document(path) == {"a": 1}
    with pytest.raises(SpecError, match="not found"):
        read_document(tmp_path / "missing.yaml")


@pytest.mark.parametrize("name, text, lines", [
    ("dup.yaml", "name: a\nbatch_size: 1\nname: b\n", "lines 1 and 3"),
    ("nested-dup.yaml", "tables:\n  - name: t\n    rows: 1\n    rows: 2\n", "lines 3 and 4"),
    ("dup.json", '{"name": "a",\n "dense": {"x": 1,\n  "x": 2}}', "lines 2 and 3"),
])
def test_duplicate_keys_name_both_lines(tmp_path, capsys, name, text, lines):
    path = tmp_path / name
    path.write_text(text)
    err = _check(path, capsys)
    assert "duplicate key" in err and lines in err, err


def test_yaml_merge_keys_may_still_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n")
    assert read_document(path)["m"] == {"x": 3, "y": 2}


def test_alias_bomb_and_recursive_alias(tmp_path, capsys):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    assert "aliases expand" in _in_thread(lambda: _check(bomb, capsys))
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [1, *a]\n")
    assert "infinite" in _check(loop, capsys)


@pytest.mark.parametrize("name, text, words", [
    ("nan.json", '{"a": NaN}', "NaN is not a JSON number"),
    ("inf.json", '{"a": -Infinity}', "Infinity is not a JSON number"),
    ("bigint.yaml", "a: " + "1" * 5000 + "\n", "cannot be read"),
    ("bigint.json", '{"a": ' + "1" * 5000 + "}", "cannot be read"),
])
def test_unreadable_values(tmp_path, capsys, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    assert words in _check(path, capsys)


# ---- 1b. the access-count file -------------------------------------------------------------------------

def _cdf_file_workload(tmp_path, filename) -> Path:
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(_edit(WL, tables__4__access={"kind": "cdf", "file": filename})))
    return path


def _write_npz(p):
    np.savez(p, a=np.ones(3))


def _write_objects(p):
    np.save(p, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)


@pytest.mark.parametrize("filename, make, words", [
    ("counts.npz", _write_npz, ".npz archive"),
    ("dir.npy", lambda p: p.mkdir(), "directory"),
    ("objects.npy", _write_objects, "pickled"),
    ("nan.npy", lambda p: np.save(p, np.array([1.0, np.nan, 3.0])), "not finite"),
    ("negative.npy", lambda p: np.save(p, np.array([5.0, -1.0, 3.0])), "non-negative"),
    ("cube.npy", lambda p: np.save(p, np.ones((2, 2, 2))), "shape (2, 2, 2)"),
    ("strings.npy", lambda p: np.save(p, np.array(["a", "b"])), "expected real numbers"),
    ("text.npy", lambda p: p.write_text("1 2 3\n"), "not a .npy file"),
    ("empty.npy", lambda p: np.save(p, np.zeros((0, 2))), "non-empty"),
])
def test_bad_access_files(tmp_path, capsys, filename, make, words):
    make(tmp_path / filename)
    err = _check(_cdf_file_workload(tmp_path, filename), capsys)
    assert "tables[4].access.file:" in err and filename in err and words in err, err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_access_file_fifo_does_not_hang(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.npy")
    path = _cdf_file_workload(tmp_path, "pipe.npy")
    assert _in_thread(lambda: main(["check", str(path)])) == 2
    assert "FIFO" in capsys.readouterr().err


def test_good_access_files_load(tmp_path):
    np.save(tmp_path / "counts.npy", np.array([9, 0, 3, 1], dtype=np.int64))
    wl = load_workload(_cdf_file_workload(tmp_path, "counts.npy"))
    model = wl.access_models[wl.tables[4].name]
    assert model.coverage(0.25) == pytest.approx(9 / 13) and model.coverage(1.0) == 1.0
    arr = load_npy_guarded(tmp_path / "counts.npy")
    assert arr.dtype == np.float64 and arr.tolist() == [9, 0, 3, 1]


# ---- 2. numbers ---------------------------------------------------------------------------------------

HW_NUMBERS = [f"templates__{T}__gpus__{f}" for f in ("hbm_GiB", "hbm_bw_GBps", "kernel_launch_us",
                                                      "hbm_gather_efficiency")] + \
             [f"templates__{T}__gpus__peak_TFLOPs__fp32", f"templates__{T}__host__dram_GiB",
              f"templates__{T}__host__dram_bw_GBps", f"templates__{T}__host__cpu_gather_GBps",
              f"templates__{T}__nics__bw_GBps", f"templates__{T}__links__0__bw_GBps",
              f"templates__{T}__links__0__latency_us"]
BAD_FLOATS = {"inf": "inf", "nan": "nan", "tiny": 1e-310, "huge": 1e308, "over": "1e400"}


def _field(path: str) -> str:
    out = ""
    for k in path.split("__"):
        out += f"[{k}]" if k.isdigit() else (f".{k}" if out else k)
    return out


def _yaml_with_raw(doc, path, raw) -> str:
    """YAML of ``doc`` with the value at ``path`` written as the raw token ``raw`` (e.g. .inf, 1e400)."""
    marker = "__RAW_VALUE__"
    text = yaml.safe_dump(_edit(doc, **{path: marker}), sort_keys=False)
    token = {"inf": ".inf", "nan": ".nan"}.get(raw, raw) if isinstance(raw, str) else repr(raw)
    return text.replace(marker, token)


@pytest.mark.parametrize("path", HW_NUMBERS)
@pytest.mark.parametrize("bad", list(BAD_FLOATS), ids=list(BAD_FLOATS))
def test_hardware_numbers_finite_and_bounded(tmp_path, capsys, path, bad):
    if bad == "tiny" and path.endswith("_us"):
        pytest.skip("a latency may be 0; 1e-310 us is harmless")
    f = tmp_path / "hw.yaml"
    f.write_text(_yaml_with_raw(HW, path, BAD_FLOATS[bad]))
    err = _check(f, capsys)
    assert f"{_field(path)}:" in err, err


WL_NUMBERS = ["tables__0__rows", "tables__0__dim", "batch_size", "tables__0__pooling_factor",
              "dense__top_mlp__0", "optimizer__lr"]


@pytest.mark.parametrize("path", WL_NUMBERS)
@pytest.mark.parametrize("bad", ["inf", "nan", 2**63 - 1, 1e308, "1e400", -1, 0], ids=str)
def test_workload_numbers_finite_and_bounded(tmp_path, capsys, path, bad):
    f = tmp_path / "wl.yaml"
    f.write_text(_yaml_with_raw(WL, path, bad))
    assert f"{_field(path)}:" in _check(f, capsys)


@pytest.mark.parametrize("access, field", [
    ({"kind": "zipf", "alpha": 1e308}, "tables[0].access.alpha"),
    ({"kind": "zipf", "alpha": 1e-310}, "tables[0].access.alpha"),
    ({"kind": "histogram", "bins": [{"accesses_per_row": 1e300, "rows_fraction": 1.0}]},
     "tables[0].access.bins[0].accesses_per_row"),
    ({"kind": "histogram", "bins": [{"accesses_per_row": 3, "rows_fraction": 0.5}]}, "tables[0].access.bins"),
    ({"kind": "cdf", "points": []}, "tables[0].access.points"),
    ({"kind": "cdf", "points": [[0.5, float("nan")]]}, "tables[0].access.points[0][1]"),
])
def test_access_numbers(tmp_path, capsys, access, field):
    f = tmp_path / "wl.yaml"
    f.write_text(yaml.safe_dump(_edit(WL, tables__0__access=access)))
    assert f"{field}:" in _check(f, capsys)


@pytest.mark.parametrize("raw", ["yes", "true", "on", "1e12", "1.0e12", "4.5"])
def test_gpu_count_is_a_strict_bounded_integer(tmp_path, capsys, raw):
    f = tmp_path / "hw.yaml"
    f.write_text(_yaml_with_raw(HW, f"templates__{T}__gpus__count", raw))
    err = _in_thread(lambda: _check(f, capsys))
    assert f"templates.{T}.gpus.count:" in err


def test_cluster_size_is_bounded(tmp_path, capsys):
    doc = _edit(HW, nodes=[{"template": T, "count": 60000}], fabric={"latency_us": 1})
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(doc))
    assert "more than the 1,024 placer models" in _in_thread(lambda: _check(f, capsys))


def test_empty_peak_mapping(tmp_path, capsys):
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(_edit(HW, **{f"templates__{T}__gpus__peak_TFLOPs": {}})))
    assert f"templates.{T}.gpus.peak_TFLOPs:" in _check(f, capsys)


def test_histograms_rounded_to_two_decimals_are_accepted(tmp_path):
    rng = random.Random(16)
    for trial in range(300):
        k = rng.randint(1, 17)
        raw = [rng.random() + 0.2 for _ in range(k)]
        fractions = [round(r / sum(raw), 2) for r in raw]  # each rounded: the sum is off by their rounding
        bins = [{"accesses_per_row": rng.choice([0, 1, 5, 1e3]) + i + 1, "rows_fraction": f}
                for i, f in enumerate(fractions)]
        f = tmp_path / f"h{trial}.yaml"
        f.write_text(yaml.safe_dump(_edit(WL, tables__0__access={"kind": "histogram", "bins": bins})))
        wl = load_workload(f)
        assert wl.access_models[wl.tables[0].name].coverage(1.0) == pytest.approx(1.0)


@pytest.mark.parametrize("hw_path, value, words", [
    (f"templates__{T}__gpus__hbm_GiB", 143771, "MiB"),
    (f"templates__{T}__nics__bw_GBps", 400, "Gb/s"),
    (f"templates__{T}__gpus__hbm_bw_GBps", 4.8, "TB/s"),
])
def test_unit_mistakes_warn(tmp_path, hw_path, value, words):
    """Allowed (--allow-implausible), a likely unit mistake is a warning; refused otherwise
    (tests/test_semantics.py)."""
    f = tmp_path / "hw.yaml"
    doc = _edit(HW, **{hw_path: value})
    f.write_text(yaml.safe_dump(doc))
    with pytest.warns(SpecWarning) as record:
        load_hardware(f, allow_implausible=True)
    text = " ".join(str(w.message) for w in record)
    assert str(f) in text and _field(hw_path) in text and words in text, text


def test_shipped_specs_load_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in sorted((ROOT / "hardware_specs").glob("*.yaml")):
            load_hardware(path)
        for path in sorted((ROOT / "workloads").glob("*.yaml")):
            load_workload(path)


# ---- 3. names and structure ---------------------------------------------------------------------------

def test_device_kind_comes_from_where_it_is_declared(tmp_path):
    doc = _edit(HW, **{f"templates__{T}__switches": ["gpu-switch"]})
    for link in doc["templates"][T]["links"]:
        link["between"] = ["gpu-switch" if b == "nvswitch" else b for b in link["between"]]
        link["between"] = ["gpu[0-9]*" if b == "gpu*" else b for b in link["between"]]
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(doc))
    topo = Topology(load_hardware(f))
    assert len(topo.gpus) == 8 and "node0/gpu-switch" not in topo.gpus
    assert topo.graph.nodes["node0/gpu-switch"]["kind"] == "switch"
    assert "node0/gpu-switch" not in topo.memories


@pytest.mark.parametrize("switches, words", [(["gpu3"], "clashes"), (["sw", "sw"], "duplicate switch name"),
                                             (["a/b"], "'/'"), ([""], "empty")])
def test_bad_switch_names(tmp_path, capsys, switches, words):
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(_edit(HW, **{f"templates__{T}__switches": switches + ["nvswitch"]})))
    assert words in _check(f, capsys)


def test_duplicate_links_name_both(tmp_path, capsys):
    doc = copy.deepcopy(HW)
    links = doc["templates"][T]["links"]
    links.append({**links[0], "between": ["gpu3", "nvswitch"]})  # links[0] is gpu* <-> nvswitch
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(doc))
    err = _check(f, capsys)
    assert f"templates.{T}.links[{len(links) - 1}].between:" in err and "links[0]" in err, err


@pytest.mark.parametrize("edits, field", [
    ({f"templates__{T}__gpus__hbm_reserve_GiB": 79.6}, f"templates.{T}.gpus.hbm_reserve_GiB"),
    ({f"templates__{T}__gpus__hbm_reserve_GiB": 500}, f"templates.{T}.gpus.hbm_reserve_GiB"),
    ({f"templates__{T}__host__dram_reserve_GiB": 2048}, f"templates.{T}.host.dram_reserve_GiB"),
])
def test_reserve_at_or_above_capacity(tmp_path, capsys, edits, field):
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(_edit(HW, **edits)))
    assert f"{field}:" in _check(f, capsys)


# ---- 4. API -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", [0, -2, float("nan"), float("inf"), True, "2", 1e-300])
def test_with_scaled_rows_refuses_bad_scales(scale):
    wl = load_workload(ROOT / "workloads" / "tiny.yaml")
    with pytest.raises(SpecError):
        wl.with_scaled_rows(scale)
    assert wl.with_scaled_rows(10).tables[0].rows == max(1, wl.tables[0].rows // 10)


@pytest.mark.parametrize("nodes", [0, -1, 2.5, float("nan"), float("inf"), True, 10**9])
def test_with_gpu_count_refuses_bad_counts(nodes):
    spec = load_hardware(ROOT / "hardware_specs" / "dgx-h100-2node.yaml")
    with pytest.raises(SpecError):
        spec.with_gpu_count(nodes)
    assert spec.with_gpu_count(3).num_gpus == 24


def test_with_gpu_count_validates_the_new_spec():
    single = load_hardware(ROOT / "hardware_specs" / "dgx-h100.yaml")  # no fabric
    with pytest.raises(SpecError, match="fabric"):
        single.with_gpu_count(2)


# ---- 5. linear time -----------------------------------------------------------------------------------

def test_20000_tables_load_and_check(tmp_path, capsys):  # how fast: validation/perf_checks.py
    n = 20000
    tables = [{"name": f"t{i}", "rows": 1000 + i, "dim": 64, "pooling_factor": 2.0,
               "access": {"kind": "zipf", "alpha": 1.05}} for i in range(n)]
    features = [{"name": f"f{i}", "table": f"t{i}"} for i in range(n)]
    doc = {"name": "wide", "batch_size": 4096, "optimizer": {"name": "rowwise_adagrad"}, "tables": tables,
           "features": features, "dense": {"bottom_mlp": [64], "top_mlp": [64, 1]}}
    f = tmp_path / "wide.json"
    f.write_text(json.dumps(doc))
    wl = load_workload(f)
    total = wl.total_bytes()
    lookups = sum(wl.lookups_per_sample(t.name) for t in wl.tables)
    assert main(["check", str(f)]) == 0
    assert lookups == 2.0 * n and math.isfinite(total)
    capsys.readouterr()


def test_models_are_still_the_public_types():
    assert HardwareSpec.__name__ == "HardwareSpec" and Workload.__name__ == "Workload"


def test_spec_warnings_can_be_printed_plainly(tmp_path, capsys):
    from placer.specs.plausible import print_spec_warnings_plainly

    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(_edit(HW, **{f"templates__{T}__nics__bw_GBps": 400})))
    before = warnings.showwarning
    try:
        print_spec_warnings_plainly()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            load_hardware(f, allow_implausible=True)
    finally:
        warnings.showwarning = before
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "nics.bw_GBps" in err and "Gb/s" in err, err


# ---- 1c. the fast YAML path (events straight to values) agrees with the composed path ----------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from placer.specs import documents  # noqa: E402

#: plain scalars whose meaning YAML 1.1 fixes (ints, floats, bools, nulls, timestamps) and some near misses
YAML11_PLAIN = ["0x1F", "-0x_1F", "1_000", "017", "0o17", "0b101", "1:20", "1:20.5", "190:20:30.15", "+12", "-0",
                "0", "1e3", "1.0e+3", "685.230_15e+03", "+.5", "1.", ".inf", "-.Inf", "+.INF", ".nan", ".NaN", "~",
                "null", "Null", "NULL", "", "yes", "No", "on", "OFF", "y", "n", "true", "False", "2001-12-14",
                "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10", "12:30:00", "0.", "-", ".", "tx", "=",
                "<<", "x y", "1000", "3.25", "-7"]


def _outcome(parse):
    """('ok', value in a list, so that a NaN compares by identity) or ('error', SpecError text)."""
    try:
        return "ok", [parse()]
    except SpecError as exc:
        return "error", str(exc)


def _fast_outcome(text):
    """The fast path's own answer: 'fallback', or the same shape as _outcome."""
    try:
        return "ok", [documents._parse_yaml_fast(text)]
    except documents._Fallback:
        return "fallback", None


def _same_both_ways(text):
    """parse_yaml (fast path, else fallback) and the composed path agree; returns the fast path's answer."""
    public = _outcome(lambda: documents.parse_yaml(text, "f.yaml"))
    composed = _outcome(lambda: documents._parse_yaml_composed(text, "f.yaml"))
    assert public == composed, (text, public, composed)
    fast = _fast_outcome(text)
    if fast[0] != "fallback":
        assert fast == composed, (text, fast, composed)
    return fast


def test_fast_path_on_every_shipped_yaml_file():
    files = sorted([*ROOT.glob("hardware_specs/**/*.yaml"), *ROOT.glob("workloads/**/*.yaml"),
                    *ROOT.glob("tests/**/*.yaml")])
    assert len(files) >= 15
    for path in files:
        text = path.read_text(encoding="utf-8-sig")
        assert _same_both_ways(text)[0] == "ok", path  # taken by the fast path, no fallback


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                     st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(YAML11_PLAIN),
                     st.text(max_size=12), st.dates())
_keys = st.one_of(st.sampled_from(YAML11_PLAIN), st.text(max_size=8), st.integers(-1000, 1000), st.booleans())
_documents = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                            st.dictionaries(_keys, inner, max_size=5)),
                          max_leaves=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_documents, flow=st.sampled_from([False, None, True]))
def test_fast_path_property_on_dumped_documents(doc, flow):
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=flow, allow_unicode=True)
    fast = _same_both_ways(text)
    assert fast[0] == "ok"  # safe_dump writes no anchors for these (no shared lists or dicts)
    assert fast == ("ok", [yaml.safe_load(text)])  # a NaN is the safe constructor's one NaN object: same


_plain_tokens = st.sampled_from(YAML11_PLAIN + ["'quoted'", '"q"', "!!str 12", "!!int '7'", "!!float 1",
                                                "!!bool yes", "!!null x", "&a 1", "*a", "!foo x", "!!set {x}",
                                                "[1, yes]", "{k: ~}", "!!map {a: 1}", "!!seq [1]", "[", "a: b"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "b", "yes", "1", "0x1", "1.0", "~", "<<", "'a'"]),
                                _plain_tokens), max_size=6),
       flow=st.booleans())
def test_fast_path_property_on_raw_plain_scalars(pairs, flow):
    """Hand-written text: YAML 1.1 plain forms, tags, anchors, merge keys, duplicate keys, syntax errors."""
    if flow:
        text = "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}\n"
    else:
        text = "".join(f"{k}: {v}\n" for k, v in pairs)
    _same_both_ways(text)


@pytest.mark.parametrize("text", [
    "a: &x 1\nb: *x\n", "m: {<<: {a: 1}, b: 2}\n", "? [1]\n: 2\n", "a: 1\n---\nb: 2\n", "a: !foo x\n",
    "a: !!set {x}\n", "a: ! 12\n", "{a: 1, a: 2}\n", "{1: a, true: b}\n", "[1, 2\n", "a: " + "1" * 5000 + "\n",
])
def test_fast_path_falls_back_to_the_composed_path(text):
    assert _fast_outcome(text)[0] == "fallback"
    _same_both_ways(text)


@pytest.mark.parametrize("text", ["- " * 101 + "x", "a: " + "[" * 101 + "]" * 101,
                                  "".join(f"{' ' * i}k{i}:\n" for i in range(150)) + " " * 150 + "v",
                                  "a: " + "{b: " * 300000 + "}" * 300000])
def test_fast_path_refuses_depth_as_the_composed_path_does(text):
    with pytest.raises(SpecError, match="nested more than 100") as fast:
        documents.parse_yaml(text, "f.yaml")
    with pytest.raises(SpecError) as composed:
        documents._parse_yaml_composed(text, "f.yaml")
    assert str(fast.value) == str(composed.value)
    assert _same_both_ways("- " * 100 + "x")[0] == "ok"  # exactly MAX_DEPTH is fine


def test_fast_path_reads_a_big_workload():
    tables = [{"name": f"t{i}", "rows": 1000 + i, "dim": 16, "access": {"kind": "zipf", "alpha": 1.1}}
              for i in range(5000)]
    doc = {"schema_version": 1, "name": "big", "batch_size": 4096, "tables": tables}
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)
    assert documents._parse_yaml_fast(text) == doc == documents._parse_yaml_composed(text, "f.yaml")
