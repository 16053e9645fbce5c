"""``placer profile WORKLOAD DATA... -o OUT``: measure each table's access skew and each feature's pooling
factor from a sample of real ids, and write a copy of the workload with them (see docs/specs.md, "Profiling
real ids")."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from placer.commands import _output

FORMAT_HELP = ("criteo-tsv: label, dense ints, one hex value per feature per line (ids = int(hex,16) %% rows); "
               "dlrm-torch: torch.load gives (indices 1-D, offsets T*B+1, lengths (T, B)), table t = feature t; "
               "npy: a .npy of one feature (named by the file stem; 1-D one id per sample, 2-D padded with "
               "negatives) or a .npz keyed by feature name. Default: from the file name (.npy/.npz, .pt, else TSV)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from placer.data.readers import FORMATS

    p.add_argument("workload", metavar="WORKLOAD", help="workload spec whose tables the ids index (YAML/JSON)")
    p.add_argument("data", metavar="DATA", nargs="+", help="files of real ids, read in order")
    p.add_argument("-o", "--output", required=True, metavar="WORKLOAD_OUT",
                   help="the profiled workload (YAML) to write")
    p.add_argument("--format", choices=FORMATS, default=None, help=FORMAT_HELP)
    p.add_argument("--max-ids", type=_positive_int, default=None, metavar="N",
                   help="stop after about N ids in all (columnar formats: N/features per feature); default: all")


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be >= 1")
    return n


def run(args) -> int:
    from rich.console import Console

    from placer.data.counting import Profile
    from placer.data.readers import FeatureMap, iter_chunks
    from placer.errors import SpecError
    from placer.specs import load_workload
    from placer.specs.loading import read_document

    out = _output.check_output_path(args.output, "-o")
    if out.suffix.lower() == ".json":
        raise SpecError(f"-o {out}: placer profile writes YAML (with a comment per table); name it .yaml")
    wl = load_workload(args.workload)
    raw = read_document(args.workload)
    fmap = FeatureMap(wl)
    profile = Profile.for_workload(wl)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    t0 = time.perf_counter()
    with _progress(err, args.data) as report:
        for chunk in iter_chunks(list(args.data), args.format, fmap, limit_ids=args.max_ids, progress=report):
            profile.add(chunk)
    if profile.total_ids == 0:
        raise SpecError(f"no ids in {', '.join(args.data)}: nothing to profile", field="DATA")
    text = render(raw, wl, profile, out, args.data)
    _output.write_text(out, text, "-o")
    try:
        load_workload(out)
    except SpecError as exc:  # pragma: no cover - what we write must load; say so plainly if not
        raise SpecError(f"the profiled workload does not load again ({exc}); please report this") from None
    seconds = time.perf_counter() - t0
    err.print(f"profiled {profile.total_ids:,} ids of {len(profile.feature_ids)} features in {seconds:.1f} s; "
              f"wrote {out}")
    return 0


class _progress:
    """A rich progress bar on stderr over the data files (silent when stderr is not a terminal)."""

    def __init__(self, console, paths):
        self.console, self.paths = console, list(paths)

    def __enter__(self):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("profiling {task.description}"), BarColumn(),
                            TextColumn("{task.percentage:>3.0f}%"),
                            TimeElapsedColumn(), console=self.console, transient=True,
                            disable=not self.console.is_terminal)
        self.bar.__enter__()
        self.task = self.bar.add_task(os.path.basename(self.paths[0]), total=len(self.paths))

        def report(path: str, frac: float) -> None:
            i = self.paths.index(path) if path in self.paths else 0
            self.bar.update(self.task, completed=i + min(max(frac, 0.0), 1.0), description=os.path.basename(path))

        return report

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)


# ---- the profiled workload ----------------------------------------------------------------------------------------

def render(raw: dict, wl, profile, out: Path, data: list[str]) -> str:
    """The workload document ``raw`` with measured access and pooling, as YAML with a comment per table."""
    import yaml

    from placer.data.counting import coverage_points

    raw = dict(raw)
    tables = [dict(t) for t in raw.get("tables", [])]
    features = [dict(f) for f in raw["features"]] if isinstance(raw.get("features"), list) else None
    src_dir, out_dir = Path(wl.source_path).parent, out.parent
    comments = []
    for i, t in enumerate(wl.tables):
        counter = profile.tables[t.name]
        entry = tables[i]
        if counter.lookups == 0:
            comments.append(f"{t.name}: not profiled (no ids of its features in the data); access as before")
            access = entry.get("access")
            if isinstance(access, dict) and isinstance(access.get("file"), str):  # keep a relative file reachable
                access = dict(access)
                access["file"] = os.path.relpath(src_dir / access["file"], out_dir)
                entry["access"] = access
            continue
        touched = counter.touched_counts()
        entry["access"] = {"kind": "cdf", "points": coverage_points(touched, t.rows)}
        cov = _coverage_at(entry["access"]["points"], 0.01)
        comments.append(f"{t.name}: profiled: {counter.lookups:,} lookups touched {touched.size:,} of {t.rows:,} "
                        f"rows ({touched.size / t.rows:.3g}); hottest 1% of rows: {cov:.1%} of lookups")
        if features is None:
            pooling = profile.pooling(t.name)
            if pooling is not None:
                entry["pooling_factor"] = _pooling(pooling)
    if features is not None:
        for f in features:
            pooling = profile.pooling(f.get("name"))
            if pooling is not None:
                f["pooling_factor"] = _pooling(pooling)
        raw["features"] = features
    raw["tables"] = tables
    names = ", ".join(os.path.basename(d) for d in data[:3]) + (f" and {len(data) - 3} more" if len(data) > 3 else "")
    head = [f"# Profiled by `placer profile` from {names}: {profile.total_ids:,} ids.",
            "# access: measured coverage curves (kind: cdf, points: [row fraction, lookup fraction], hottest rows",
            "# first); pooling_factor: measured mean lookups per sample. Rows never touched by the sample get no",
            f"# lookups in the curve. Source workload: {wl.source_path}"]
    parts = ["\n".join(head) + "\n"]
    for key, value in raw.items():
        if key == "tables":
            parts.append("tables:\n")
            for comment, entry in zip(comments, tables):
                body = yaml.safe_dump([entry], sort_keys=False, default_flow_style=None, width=120)
                parts.append(f"  # {comment}\n" + "".join("  " + line + "\n" for line in body.splitlines()))
        else:
            flow = None if isinstance(value, (dict, list)) else False  # a scalar at the top level stays block style
            parts.append(yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=flow, width=120))
    return "".join(parts)


def _pooling(value: float) -> float:
    from placer.specs.limits import MIN_POOLING

    return max(float(f"{value:.6g}"), MIN_POOLING)


def _coverage_at(points, fraction: float) -> float:
    import numpy as np

    x = [0.0] + [p[0] for p in points] + [1.0]
    y = [0.0] + [p[1] for p in points] + [1.0]
    return float(np.interp(fraction, x, y))
