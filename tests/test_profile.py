"""placer profile (measured access curves and pooling from real ids) and placer run --ids, on small generated
files: every format round-trips, bad input is exit 2 naming the file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from placer.cli import main
from placer.specs import load_workload
from placer.specs.access import ZipfAccess

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "workloads" / "tiny.yaml"
CRITEO = ROOT / "workloads" / "criteo-kaggle-dlrm.yaml"
HW1 = ROOT / "hardware_specs" / "h100-pcie-host.yaml"
ALPHA = 1.1


@pytest.fixture(scope="module")
def tiny():
    return load_workload(TINY)


def zipf_ids(rows: int, n: int, seed: int) -> np.ndarray:
    return ZipfAccess(rows, ALPHA).sample(n, np.random.default_rng(seed))


def tiny_npz(path: Path, wl, n: int = 40000) -> dict:
    rows = {t.name: t.rows for t in wl.tables}
    data = {}
    for i, f in enumerate(wl.resolved_features):
        k = 2 if f.name == "f_hist" else 1
        ids = zipf_ids(rows[f.table], n * k, i)
        data[f.name] = ids.reshape(n, k) if k > 1 else ids
    np.savez(path, **data)
    return data


def profile(args, capsys) -> tuple[int, str]:
    code = main(["profile", *map(str, args)])
    return code, capsys.readouterr().err


def check_coverage(out: Path, tables: list[str], tol: float = 0.05) -> None:
    wl = load_workload(out)
    for t in wl.tables:
        if t.name not in tables:
            continue
        assert t.access.kind == "cdf" and len(t.access.points) <= 64
        want = ZipfAccess(t.rows, ALPHA)
        got = wl.access_models[t.name]
        for frac in (0.01, 0.1):
            assert abs(float(got.coverage(frac)) - float(want.coverage(frac))) < tol, (t.name, frac)


def test_npz_round_trip_coverage_and_pooling(tmp_path, tiny, capsys):
    tiny_npz(tmp_path / "ids.npz", tiny)
    out = tmp_path / "out.yaml"
    code, err = profile([TINY, tmp_path / "ids.npz", "-o", out], capsys)
    assert code == 0, err
    # tables small enough for 40k samples to see their skew (t_users: 20k rows leaves its tail untouched)
    check_coverage(out, ["t_items", "t_geo", "t_hist", "t_shared"])
    wl = load_workload(out)
    pooling = {f.name: f.pooling_factor for f in wl.resolved_features}
    assert pooling["f_hist"] == 2.0 and pooling["f_user"] == 1.0
    text = out.read_text()
    assert "# t_shared: profiled: 80,000 lookups touched" in text  # rows touched, per table
    assert wl.total_bytes() == load_workload(TINY).total_bytes()


def test_npy_single_feature_and_padding(tmp_path, tiny, capsys):
    ids = zipf_ids(5000, 60000, 3).reshape(20000, 3)
    ids[::2, 2] = -1  # every other sample has 2 ids, the rest 3: pooling 2.5
    np.save(tmp_path / "f_item.npy", ids)
    out = tmp_path / "out.yaml"
    code, err = profile([TINY, tmp_path / "f_item.npy", "-o", out], capsys)
    assert code == 0, err
    wl = load_workload(out)
    pooling = {f.name: f.pooling_factor for f in wl.resolved_features}
    assert pooling["f_item"] == pytest.approx(2.5)
    assert pooling["f_user"] == 1.0  # not in the data: as before
    assert "t_users: not profiled" in out.read_text()
    check_coverage(out, ["t_items"])


def test_dlrm_torch_round_trip(tmp_path, tiny, capsys):
    rows = {t.name: t.rows for t in tiny.tables}
    feats = tiny.resolved_features
    B, rng = 30000, np.random.default_rng(5)
    lengths = rng.integers(0, 4, (len(feats), B))  # pooling 1.5 on average
    parts = [zipf_ids(rows[f.table], int(lengths[i].sum()), 10 + i) for i, f in enumerate(feats)]
    indices = torch.from_numpy(np.concatenate(parts))
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths.ravel())]))
    torch.save((indices, offsets, torch.from_numpy(lengths)), tmp_path / "ids.pt")
    out = tmp_path / "out.yaml"
    code, err = profile([TINY, tmp_path / "ids.pt", "-o", out], capsys)
    assert code == 0, err
    wl = load_workload(out)
    for i, f in enumerate(wl.resolved_features):
        assert f.pooling_factor == pytest.approx(lengths[i].mean(), rel=1e-5)
    check_coverage(out, ["t_items", "t_hist", "t_shared"])


def write_tsv(path: Path, columns: list[np.ndarray], n_dense: int = 13, missing: float = 0.0) -> None:
    rng = np.random.default_rng(7)
    n = columns[0].size
    with open(path, "w") as f:
        for j in range(n):
            cats = ["" if rng.random() < missing else f"{int(c[j]):08x}" for c in columns]
            f.write("\t".join(["1"] + [str(j % 50)] * n_dense + cats) + "\n")


def test_criteo_tsv_round_trip_with_modulo_and_missing(tmp_path, capsys):
    wl = load_workload(CRITEO)
    n = 20000
    # small tables: ids in range map to themselves under the modulo; big ones: a hash far above rows
    cols = [zipf_ids(t.rows, n, i) if t.rows <= 1500 else zipf_ids(1000, n, i) * 7919 + 2**31
            for i, t in enumerate(wl.tables)]
    write_tsv(tmp_path / "day.tsv", cols, missing=0.1)
    out = tmp_path / "out.yaml"
    code, err = profile([CRITEO, tmp_path / "day.tsv", "-o", out], capsys)
    assert code == 0, err
    got = load_workload(out)
    for t in got.tables:
        assert t.access.kind == "cdf"
        assert t.pooling_factor == pytest.approx(0.9, abs=0.02)  # 10% missing: 0.9 lookups per sample
    check_coverage(out, ["C1", "C2", "C8"], tol=0.06)
    assert "C3: profiled:" in out.read_text()


def test_max_ids_stops_early(tmp_path, tiny, capsys):
    tiny_npz(tmp_path / "ids.npz", tiny, n=10000)
    out = tmp_path / "out.yaml"
    code, err = profile([TINY, tmp_path / "ids.npz", "-o", out, "--max-ids", "7000"], capsys)
    assert code == 0, err
    assert "profiled 7,000 ids" in " ".join(err.split())  # 1,000 per feature of 7


@pytest.mark.parametrize("case", ["columns", "range_npz", "range_torch", "float_npy", "unknown_key", "not_hex",
                                  "not_torch", "directory"])
def test_bad_input_is_exit_2_naming_the_file(case, tmp_path, tiny, capsys):
    out = tmp_path / "out.yaml"
    wl_path = TINY
    if case == "columns":
        data = tmp_path / "day.tsv"
        write_tsv(data, [np.arange(10)] * 26)  # 26 categorical columns, tiny has 7 features
        needle = ["has 40 tab-separated columns", "expected 21", str(data)]
    elif case == "range_npz":
        data = tmp_path / "ids.npz"
        np.savez(data, f_geo=np.array([1, 2, 300]))
        needle = ["f_geo", "id 300", str(data)]
    elif case == "range_torch":
        data = tmp_path / "ids.pt"
        T = len(tiny.resolved_features)
        torch.save((torch.full((T * 2,), 999999), torch.arange(T * 2 + 1), torch.ones(T, 2, dtype=torch.int64)),
                   data)
        needle = ["id 999999", "f_user", str(data)]
    elif case == "float_npy":
        data = tmp_path / "f_geo.npy"
        np.save(data, np.array([1.5, 2.0]))
        needle = ["float64", "integer ids", str(data)]
    elif case == "unknown_key":
        data = tmp_path / "ids.npz"
        np.savez(data, nope=np.array([1]))
        needle = ["'nope'", "not a feature", str(data)]
    elif case == "not_hex":
        data = tmp_path / "day.tsv"
        data.write_text("\t".join(["1"] + ["0"] * 13 + ["zz"] * 7) + "\n")
        needle = ["line 1", "not a hex value", str(data)]
    elif case == "not_torch":
        data = tmp_path / "ids.pt"
        data.write_bytes(b"not a torch file at all")
        needle = ["torch", str(data)]
    else:
        data = tmp_path
        needle = ["directory"]
    code, err = profile([wl_path, data, "-o", out], capsys)
    assert code == 2, err
    flat = " ".join(err.split())
    for n in needle:
        assert n in flat, (n, err)
    assert "Traceback" not in err and not out.exists()


def test_output_path_checked_first(tmp_path, capsys):
    code, err = profile([TINY, tmp_path / "missing.npz", "-o", tmp_path / "no" / "such" / "out.yaml"], capsys)
    assert code == 2 and "-o" in err


def test_run_with_real_ids_trains_two_steps(tmp_path, tiny, capsys):
    tiny_npz(tmp_path / "ids.npz", tiny, n=3000)
    assert main(["solve", str(HW1), str(TINY), "--method", "greedy_size", "-o", str(tmp_path / "plan.json"),
                 "-q"]) == 0
    capsys.readouterr()
    code = main(["run", str(HW1), str(TINY), str(tmp_path / "plan.json"), "--device", "cpu", "--steps", "2",
                 "--warmup", "0", "--phase-steps", "1", "--threads", "1", "--json", "--ids", str(tmp_path / "ids.npz")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert out["steps"] == 2 and out["measured"]["loss_first"] is not None


def test_batches_follow_the_samples(tmp_path, tiny):
    from placer.data.samples import load_samples
    from placer.runner.batches import BatchGenerator

    data = tiny_npz(tmp_path / "ids.npz", tiny, n=600)
    samples = load_samples([str(tmp_path / "ids.npz")], None, tiny, 512)
    assert samples.samples == 512
    gen = BatchGenerator(tiny, plan=None, seed=0, samples=samples)
    B = tiny.batch_size
    first = gen.make_numpy()["tables"]
    ids, bags = first["t_hist"]
    assert np.array_equal(ids, data["f_hist"][:B].ravel())  # 2 ids per sample, in sample order
    assert np.array_equal(bags, np.repeat(np.arange(B), 2))
    ids, bags = first["t_shared"]  # two features: f_cat_a's bags 0..B-1, then f_cat_b's B..2B-1
    assert np.array_equal(ids, np.concatenate([data["f_cat_a"][:B], data["f_cat_b"][:B]]))
    second = gen.make_numpy()["tables"]
    assert np.array_equal(second["t_users"][0], data["f_user"][B:2 * B])
    third = gen.make_numpy()["tables"]  # wraps around after 512 samples
    assert np.array_equal(third["t_users"][0], data["f_user"][:B])
    hot = np.bincount(data["f_user"][:512], minlength=20000).argmax()
    assert gen.perms["t_users"][0] == hot
