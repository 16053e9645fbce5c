"""What compressed and node-local tables cost in accuracy: a synthetic click task with a known ground truth.

A hidden teacher labels samples drawn from zipf-skewed categorical ids (one id per table per sample) and a few
dense features: logit = bias + sum_t w_t[id_t] + sum_{t<s} <e_t[id_t], e_s[id_s]> + <v, x>, label ~
Bernoulli(sigmoid(logit)). A small DLRM (bottom MLP, one 16-wide table per categorical feature, dot interaction,
top MLP) learns it with Adagrad, once per variant, from the same samples in the same order, for up to --epochs
epochs, keeping the epoch with the least log-loss on a validation set (early stopping); reported on a test set:

- full:          every table fp32, in full;
- qr-k{2,4,16}:  the largest tables (``--compress``) as quotient-remainder tables, k collisions (op mult);
- tt-r{8,32}:    the largest tables as tensor-train tables of ranks (r, r);
- int8-frozen:   the full model's tables quantized row-wise to 8 bits after training, frozen (evaluated as is);
- node-local:    two "nodes", each with its own replica of every table trained on its half of every batch, the
                 dense model's gradients averaged over both (what an all-reduce between two processes gives:
                 the same arithmetic, run in one process); evaluated per node, the mean reported.

Reported per variant: test log-loss, AUC, the embedding weights' bytes, and the differences to ``full``; the
teacher's own log-loss on the test set is the floor (Bayes). Limits: synthetic ids and labels, not Criteo;
one id per table per sample; the optimizer is Adagrad everywhere (TT-Rec and the QR paper tune theirs).

    python3 validation/accuracy_compression.py              # 3 seeds, about 10 minutes on 2 cores
    python3 validation/accuracy_compression.py --quick      # seconds: the same code paths at tiny sizes

Writes validation/results/accuracy-compression-<date>.json (command, commit, versions, rows) and prints a table.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from placer.runner.compressed import (FP32_BYTES, Int8EmbeddingBag, QREmbeddingBag, TTEmbeddingBag,  # noqa: E402
                                      uniform_bound)
from validation.common import ROOT, environment, write_json  # noqa: E402

#: rows and zipf exponent of each table (the full run); dim of every student table
TABLES = [(400_000, 1.05), (100_000, 1.05), (20_000, 1.1), (5_000, 1.1), (1_000, 1.2), (100, 1.2)]
QUICK_TABLES = [(2_000, 1.05), (500, 1.1), (50, 1.2)]
QUICK_SAMPLES = (20_000, 5_000)  # training samples; validation and test samples each
DIM = 16
DENSE = 4
TEACHER_DIM = 4


@dataclass
class Data:
    ids: torch.Tensor  # (samples, tables) int64
    dense: torch.Tensor  # (samples, DENSE) fp32
    labels: torch.Tensor  # (samples,) fp32
    teacher_p: torch.Tensor  # (samples,) the teacher's click probability


def zipf_ids(rng: np.random.Generator, rows: int, alpha: float, n: int) -> np.ndarray:
    """``n`` ids of a table of ``rows``: rank r drawn with probability ~ (r + 1)^-alpha, ranks shuffled to ids."""
    p = 1.0 / np.arange(1, rows + 1) ** alpha
    ranks = rng.choice(rows, size=n, p=p / p.sum())
    return rng.permutation(rows)[ranks]


def make_data(tables: list[tuple[int, float]], samples: int, seed: int) -> Data:
    """Samples of the teacher's task (module docstring); the teacher is fixed by ``seed``."""
    rng = np.random.default_rng(seed)
    T = len(tables)
    pairs = T * (T - 1) / 2
    w = [rng.normal(0, 0.6, rows) for rows, _ in tables]
    e = [rng.normal(0, (0.8 / math.sqrt(pairs)) ** 0.5, (rows, TEACHER_DIM)) for rows, _ in tables]
    v = rng.normal(0, 0.3, DENSE)
    ids = np.stack([zipf_ids(rng, rows, a, samples) for rows, a in tables], axis=1)
    x = rng.normal(0, 1, (samples, DENSE))
    logit = -1.2 + x @ v + sum(w[t][ids[:, t]] for t in range(T))
    for t in range(T):
        for s in range(t + 1, T):
            logit += np.einsum("ij,ij->i", e[t][ids[:, t]], e[s][ids[:, s]])
    p = 1 / (1 + np.exp(-logit))
    labels = (rng.random(samples) < p).astype(np.float32)
    return Data(torch.from_numpy(ids), torch.from_numpy(x).float(), torch.from_numpy(labels),
                torch.from_numpy(p).float())


def full_table(rows: int, seed: int) -> nn.Module:
    bound = uniform_bound(rows)
    g = torch.Generator().manual_seed(seed)
    bag = nn.EmbeddingBag(rows, DIM, mode="sum", sparse=True)  # Adagrad updates the rows a batch touched
    with torch.no_grad():
        bag.weight.copy_((torch.rand(rows, DIM, generator=g) * 2 - 1) * bound)
    return bag


def table_bytes(m: nn.Module) -> int:
    return m.weight_bytes() if hasattr(m, "weight_bytes") else m.weight.numel() * FP32_BYTES


class Student(nn.Module):
    """A small DLRM: bottom MLP, one table per categorical feature, pairwise dots, top MLP."""

    def __init__(self, tables: list[nn.Module], seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.tables = nn.ModuleList(tables)
        self.bottom = nn.Sequential(nn.Linear(DENSE, 32), nn.ReLU(), nn.Linear(32, DIM), nn.ReLU())
        n = len(tables) + 1
        self.top = nn.Sequential(nn.Linear(DIM + n * (n - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 1))
        self.pairs = torch.triu_indices(n, n, offset=1)

    def forward(self, ids: torch.Tensor, dense: torch.Tensor, tables=None) -> torch.Tensor:
        tables = self.tables if tables is None else tables
        B = ids.shape[0]
        offsets = torch.arange(B)
        z = self.bottom(dense)
        vecs = torch.stack([z] + [t(ids[:, i].contiguous(), offsets) for i, t in enumerate(tables)], dim=1)
        dots = torch.bmm(vecs, vecs.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([z, dots], dim=1)).squeeze(1)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The area under the ROC curve (Mann-Whitney: the ranks of the positives, ties averaged)."""
    from scipy.stats import rankdata

    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return float("nan")
    r = rankdata(scores)
    return float((r[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def evaluate(model: Student, data: Data, tables=None, batch: int = 8192) -> tuple[float, float]:
    """(log-loss, AUC) of ``model`` on ``data``."""
    model.eval()
    logits = []
    with torch.no_grad():
        for a in range(0, data.labels.numel(), batch):
            logits.append(model(data.ids[a:a + batch], data.dense[a:a + batch], tables))
    model.train()
    z = torch.cat(logits)
    loss = float(F.binary_cross_entropy_with_logits(z, data.labels))
    return loss, auc(data.labels.numpy(), z.numpy())


def train(model: Student, data: Data, valid: Data, epochs: int, batch: int, lr: float,
          replicas: list[nn.ModuleList] | None = None) -> int:
    """Adagrad over up to ``epochs`` of ``data`` in order, keeping the state of the epoch with the least
    validation log-loss (early stopping: a model that memorizes rare ids gets worse after its best epoch);
    returns that epoch (1-based). With ``replicas`` (node-local): each replica's tables see their half of every
    batch, the dense model's gradient is the mean of both halves' (an all-reduce); validated per replica, mean."""
    import copy

    every = list(model.parameters()) + [p for r in (replicas or []) for p in r.parameters()]
    params = list({id(p): p for p in every}.values())  # replica 0 is the model's own tables
    opt = torch.optim.Adagrad(params, lr=lr)
    n = data.labels.numel()
    holder = nn.ModuleList([model] + list(replicas or []))
    best, best_epoch, best_state = float("inf"), 0, None
    for epoch in range(1, epochs + 1):
        for a in range(0, n - batch + 1, batch):
            ids, dense, y = data.ids[a:a + batch], data.dense[a:a + batch], data.labels[a:a + batch]
            opt.zero_grad(set_to_none=True)
            if replicas is None:
                loss = F.binary_cross_entropy_with_logits(model(ids, dense), y)
            else:
                h = batch // len(replicas)
                loss = sum(F.binary_cross_entropy_with_logits(model(ids[i * h:(i + 1) * h], dense[i * h:(i + 1) * h],
                                                                      rep), y[i * h:(i + 1) * h])
                           for i, rep in enumerate(replicas)) / len(replicas)
            loss.backward()
            opt.step()
        got = (evaluate(model, valid)[0] if replicas is None else
               float(np.mean([evaluate(model, valid, rep)[0] for rep in replicas])))
        if got < best:
            best, best_epoch, best_state = got, epoch, copy.deepcopy(holder.state_dict())
    holder.load_state_dict(best_state)
    return best_epoch


def tables_for(variant: str, sizes: list[int], compress: int, seed: int) -> list[nn.Module]:
    """The student's tables of ``variant``: the ``compress`` largest compressed where the variant says."""
    largest = set(sorted(range(len(sizes)), key=lambda i: -sizes[i])[:compress])
    out = []
    for i, rows in enumerate(sizes):
        if i in largest and variant.startswith("qr-k"):
            out.append(QREmbeddingBag(rows, DIM, int(variant[4:]), seed=seed + i))
        elif i in largest and variant.startswith("tt-r"):
            r = int(variant[4:])
            out.append(TTEmbeddingBag(rows, DIM, (r, r), seed=seed + i))
        else:
            out.append(full_table(rows, seed + i))
    return out


def run(args) -> dict:
    tables = QUICK_TABLES if args.quick else TABLES
    sizes = [r for r, _ in tables]
    train_n, test_n = QUICK_SAMPLES if args.quick else (args.samples, args.samples // 8)
    data = make_data(tables, train_n + 2 * test_n, args.seed)
    cut = lambda a, b: Data(data.ids[a:b], data.dense[a:b], data.labels[a:b], data.teacher_p[a:b])
    tr, va, te = cut(0, train_n), cut(train_n, train_n + test_n), cut(train_n + test_n, train_n + 2 * test_n)
    bayes = float(F.binary_cross_entropy(te.teacher_p.clamp(1e-7, 1 - 1e-7), te.labels))
    rows = []
    full_model, full_epochs = None, 0
    for variant in args.variants:
        t0 = time.perf_counter()
        if variant == "int8-frozen":
            if full_model is None:
                raise SystemExit("int8-frozen needs the full variant first (it quantizes the full model's tables)")
            frozen = nn.ModuleList(Int8EmbeddingBag(t.weight) for t in full_model.tables)
            loss, a = evaluate(full_model, te, frozen)
            epochs = full_epochs
            emb = sum(table_bytes(t) for t in frozen)
        elif variant == "node-local":
            model = Student(tables_for("full", sizes, 0, args.seed), args.seed)
            replicas = [model.tables, nn.ModuleList(tables_for("full", sizes, 0, args.seed))]
            epochs = train(model, tr, va, args.epochs, args.batch, args.lr, replicas)
            per_node = [evaluate(model, te, rep) for rep in replicas]
            loss, a = float(np.mean([x[0] for x in per_node])), float(np.mean([x[1] for x in per_node]))
            emb = sum(table_bytes(t) for rep in replicas for t in rep) // len(replicas)
        else:
            model = Student(tables_for(variant, sizes, args.compress, args.seed), args.seed)
            epochs = train(model, tr, va, args.epochs, args.batch, args.lr)
            loss, a = evaluate(model, te)
            emb = sum(table_bytes(t) for t in model.tables)
            if variant == "full":
                full_model, full_epochs = model, epochs
        rows.append({"variant": variant, "logloss": loss, "auc": a, "embedding_bytes": emb, "best_epoch": epochs,
                     "train_s": time.perf_counter() - t0})
        print(f"  {variant:12s} log-loss {loss:.5f}  AUC {a:.4f}  tables {emb / 2**20:8.2f} MiB  "
              f"(epoch {epochs}, {rows[-1]['train_s']:.0f} s)", flush=True)
    base = next((r for r in rows if r["variant"] == "full"), None)
    for r in rows:
        if base:
            r["logloss_vs_full"] = r["logloss"] - base["logloss"]
            r["auc_vs_full"] = r["auc"] - base["auc"]
            r["memory_vs_full"] = r["embedding_bytes"] / base["embedding_bytes"]
    return {"tables": [{"rows": r, "zipf_alpha": a} for r, a in tables], "dim": DIM,
            "compressed_tables": args.compress, "train_samples": train_n, "valid_samples": test_n,
            "test_samples": test_n, "epochs": args.epochs, "batch": args.batch, "lr": args.lr, "seed": args.seed,
            "teacher_logloss": bayes, "rows": rows}


def summarize(runs: list[dict]) -> list[dict]:
    """Per variant over the seeds: mean log-loss and AUC, and mean / min / max of the differences to the full
    model of the same seed, the memory ratio."""
    out = []
    for variant in [r["variant"] for r in runs[0]["rows"]]:
        rows = [next(r for r in run["rows"] if r["variant"] == variant) for run in runs]
        v = {"variant": variant, "logloss": float(np.mean([r["logloss"] for r in rows])),
             "auc": float(np.mean([r["auc"] for r in rows]))}
        for k in ("logloss_vs_full", "auc_vs_full"):
            if k in rows[0]:
                xs = [r[k] for r in rows]
                v[k] = {"mean": float(np.mean(xs)), "min": float(min(xs)), "max": float(max(xs))}
        if "memory_vs_full" in rows[0]:
            v["memory_vs_full"] = rows[0]["memory_vs_full"]
        out.append(v)
    return out


VARIANTS = ["full", "qr-k2", "qr-k4", "qr-k16", "tt-r8", "tt-r32", "int8-frozen", "node-local"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny tables and samples: the code paths in seconds")
    ap.add_argument("--samples", type=int, default=1_000_000, help="training samples (default 1M)")
    ap.add_argument("--epochs", type=int, default=3, help="at most this many; the best on validation is kept")
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=0.05, help="Adagrad's learning rate (default 0.05)")
    ap.add_argument("--compress", type=int, default=3, help="how many of the largest tables are compressed")
    ap.add_argument("--seed", type=int, default=0, help="the first seed")
    ap.add_argument("--seeds", type=int, default=3, help="how many seeds (teacher, data, initialization)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {','.join(VARIANTS)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "validation" / "results"))
    ap.add_argument("--date", default=_dt.date.today().isoformat())
    args = ap.parse_args(argv)
    args.variants = args.variants.split(",")
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {unknown}; choose from {VARIANTS}")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    runs = []
    for seed in range(args.seed, args.seed + args.seeds):  # a new teacher, data and initialization per seed
        print(f"seed {seed}:", flush=True)
        runs.append(run(argparse.Namespace(**{**vars(args), "seed": seed})))
    summary = summarize(runs)
    print(f"\nover {len(runs)} seeds (mean, and min..max of the differences to full within a seed); teacher "
          f"(Bayes) log-loss {np.mean([r['teacher_logloss'] for r in runs]):.5f}")
    print(f"{'variant':12s} {'log-loss':>9s} {'vs full':>22s} {'AUC':>7s} {'vs full':>22s} {'memory':>8s}")
    for v in summary:
        span = lambda k: f"{v[k]['mean']:+.4f} ({v[k]['min']:+.4f}..{v[k]['max']:+.4f})" if k in v else ""
        mem = f"{v['memory_vs_full']:7.3f}x" if "memory_vs_full" in v else ""
        print(f"{v['variant']:12s} {v['logloss']:9.5f} {span('logloss_vs_full'):>22s} {v['auc']:7.4f} "
              f"{span('auc_vs_full'):>22s} {mem:>8s}")
    result = {"seeds": len(runs), "summary": summary, "runs": runs}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"accuracy-compression-{args.date}{'-quick' if args.quick else ''}.json"
    write_json(out / name, {"command": "python3 validation/accuracy_compression.py " + " ".join(argv or sys.argv[1:]),
                            "date": args.date, "torch": torch.__version__, "threads": args.threads,
                            "wall_s": time.perf_counter() - t0, **environment(), **result})
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
