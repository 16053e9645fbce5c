"""Random constraint sets over the shipped pairs, solved by every method: no plan may break one (issue 52).

    python3 validation/constraints_random.py --sets 20 --work-limit 1000 --cli 20

For each shipped hardware x workload pair of PAIRS (those whose work-limited ILP solve takes seconds on the 2-core
machine), ``--sets`` random constraint sets (validation/constraints_draw.py: 1-4 entries over table names and globs,
shardings, memory, devices, min/max shards, precisions, co-location, HBM headroom; a few invalid on purpose) are
appended to the workload and solved through the Python API (``placer.planner.solve.solve``) by every method: the
ILP under ``--work-limit`` (the same plan on any machine), every baseline, and each forced form some table of the
workload allows. Each solve is one verdict (VERDICTS):

- ``plan``: a plan that ``Rules.of(wl, topo).plan_faults`` and ``placer.plan_check.check_plan`` both accept;
- ``plan_breaks``: a plan that breaks a constraint (or that the planner's own check refused): the target is 0;
- ``exit3_named`` / ``exit3_unnamed``: InfeasibleError (exit 3) whose message names a constraint
  ("constraints.tables[", "headroom") or says why nothing fits (a shortfall in GiB), or names none;
- ``exit2_named`` / ``exit2_unnamed``: SpecError (exit 2) naming the ``constraints.`` field, or not;
- ``missed_bad``: a plan or exit 3 for a set drawn invalid on purpose (a SpecError was due);
- ``error``: any other exception (a bug), its traceback's last line kept.

A set the ILP exits 3 on while another method planned it (a plan that holds every constraint) is counted too
(``ilp_exit3_where_another_planned``, the table's ``ilp<``): the ILP, warm-started by every baseline, missed a
feasible set. A baseline that exits 3 on a set the ILP planned is counted (``baseline_exit3_where_ilp_planned``)
but is no bug: a heuristic may fail where a plan exists, its message naming the constraints it could not meet.

``--from FILE`` re-tallies a results file (the table, totals and problems) without solving again.

Then ``--cli`` of the solves, drawn across verdicts, run again as ``python3 -m placer.cli solve`` in a subprocess:
the exit code must be the verdict's (0, 2, 3) and stderr must hold no traceback.

Prints a table per pair and writes ``validation/results/constraints-random-<date>.json`` (``--out``): the command,
commit, date, machine, versions, every case's constraints and verdict, and the CLI checks. Wall times are seconds.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placer.constraints import Rules  # noqa: E402
from placer.errors import InfeasibleError, SpecError  # noqa: E402
from placer.forms import storage  # noqa: E402
from placer.forms.storage import FORCED_FORMS  # noqa: E402
from placer.plan_check import check_plan  # noqa: E402
from placer.planner.baselines import BASELINES  # noqa: E402
from placer.planner.solve import SolveConfig, solve  # noqa: E402
from placer.specs import load_hardware, load_workload  # noqa: E402
from placer.topology import Topology  # noqa: E402
from validation.common import ROOT, environment, git, write_json  # noqa: E402
from validation.constraints_cli import cli_checks  # noqa: E402
from validation.constraints_draw import Draw, draw_set  # noqa: E402

#: (workload, hardware) pairs whose ILP solve at --work-limit 1000 took 2-9 s on the 2-core machine (2026-12-03,
#: beside other work); mlperf-dlrm-v2 @ dgx-h100 took 21-55 s and is left out, as are the 16-node and 32-node specs
PAIRS = [("tiny", "h100-pcie-host"), ("tiny", "cpu-server"), ("tiny", "pcie-4gpu-workstation"),
         ("tiny", "dgx-a100"), ("tiny", "dgx-h100-2node"),
         ("criteo-kaggle-dlrm", "h100-pcie-host"), ("criteo-kaggle-dlrm", "pcie-4gpu-workstation"),
         ("mlperf-dlrm-v1", "h100-pcie-host"), ("mlperf-dlrm-v1", "pcie-4gpu-workstation"),
         ("mlperf-dlrm-v1-qr", "pcie-4gpu-workstation"),
         ("mlperf-dlrm-v2", "h200-sxm-host"), ("mlperf-dlrm-v2", "pcie-4gpu-workstation")]
VERDICTS = ("plan", "plan_breaks", "exit3_named", "exit3_unnamed", "exit2_named", "exit2_unnamed", "missed_bad",
            "error")
#: the words an exit-3 message names its reason by: a constraint, the headroom, or a shortfall in memory
NAMED_CONSTRAINT = ("constraints.tables[", "headroom")
NAMED_CAPACITY = ("GiB",)


def methods_for(wl) -> list[str]:
    """The ILP, every baseline and each forced form some table of ``wl`` allows."""
    return ["ilp", *BASELINES, *(f for f in FORCED_FORMS if storage.allowing(wl, f))]


def workload_text(base: Path, constraints: dict) -> str:
    """The shipped workload's YAML with ``constraints`` appended (the shipped ones have none)."""
    return base.read_text() + "\n" + yaml.safe_dump({"constraints": constraints}, sort_keys=False)


def judge_plan(plan, wl, topo) -> tuple[str, str]:
    """(verdict, detail) of a plan against the workload's constraints and the plan check."""
    faults = Rules.of(wl, topo).plan_faults(plan.placements)
    if faults:
        return "plan_breaks", "; ".join(m for _, m in faults[:3])
    try:
        check_plan(plan, topo, wl, check_hashes=False)
    except SpecError as exc:
        return "plan_breaks", f"check_plan: {exc}"
    return "plan", f"step {plan.predicted['step_time_s'] * 1e3:.3f} ms"


def judge_error(exc: BaseException, expect: str | None) -> tuple[str, str]:
    """(verdict, detail) of an exception from loading or solving; ``expect``: the field a SpecError must name."""
    text = str(exc)
    if isinstance(exc, InfeasibleError):
        if expect is not None:
            return "missed_bad", f"exit 3 where {expect} is invalid: {text}"
        if any(w in text for w in NAMED_CONSTRAINT):
            return "exit3_named", "constraint"
        return ("exit3_named", "capacity") if any(w in text for w in NAMED_CAPACITY) else ("exit3_unnamed", "")
    if isinstance(exc, SpecError):
        if "breaks the workload's constraints" in text or (exc.field or "").startswith("placements"):
            return "plan_breaks", f"refused by the planner's own check: {text}"
        named = (expect in text) if expect is not None else "constraints." in text
        return ("exit2_named" if named else "exit2_unnamed"), ("expected" if expect else "unexpected")
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/placer/" in f.filename]
    where = f" at {frames[-1].filename.split('/placer/')[-1]}:{frames[-1].lineno}" if frames else ""
    return "error", last[:300] + where


def run_case(hw: Path, wl_file: Path, method: str, work_limit: float, expect: str | None, seed: int = 0) -> dict:
    """One solve of the workload file ``wl_file`` on ``hw`` by ``method``: its verdict, detail, message and wall
    seconds (never raises but for KeyboardInterrupt)."""
    t0 = time.perf_counter()
    message = ""
    try:
        wl = load_workload(wl_file)
        topo = Topology(load_hardware(hw), wl.dense.dtype)
        plan = solve(topo, wl, SolveConfig(method=method, work_limit=work_limit, seed=seed))
        verdict, detail = judge_plan(plan, wl, topo)
        if expect is not None and verdict == "plan":
            verdict, detail = "missed_bad", f"a plan where {expect} is invalid"
    except Exception as exc:  # noqa: BLE001 - every exception is a verdict
        verdict, detail = judge_error(exc, expect)
        message = str(exc)[:600]
    return {"method": method, "verdict": verdict, "detail": detail[:600], "message": message,
            "wall_s": round(time.perf_counter() - t0, 3)}


def run_pair(wl_name: str, hw_name: str, sets: int, work_limit: float, rng: random.Random, folder: Path,
             methods: list[str] | None = None, log=print) -> list[dict]:
    """``sets`` random constraint sets on one pair, each solved by every method (or ``methods``): one dict per
    set with its constraints, the workload file written under ``folder`` and one result per method."""
    base, hw = ROOT / "workloads" / f"{wl_name}.yaml", ROOT / "hardware_specs" / f"{hw_name}.yaml"
    wl = load_workload(base)
    topo = Topology(load_hardware(hw), wl.dense.dtype)
    out = []
    for k in range(sets):
        draw: Draw = draw_set(rng, wl, topo)
        path = folder / f"{wl_name}@{hw_name}-{k}.yaml"
        path.write_text(workload_text(base, draw.constraints))
        results = [run_case(hw, path, m, work_limit, draw.expect, seed=k) for m in (methods or methods_for(wl))]
        out.append({"workload": wl_name, "hardware": hw_name, "set": k, "constraints": draw.constraints,
                    "expect_spec_error": draw.expect, "workload_file": str(path), "results": results})
        log(f"  {wl_name} @ {hw_name} set {k}: " + ", ".join(f"{r['method']} {r['verdict']}" for r in results))
    return out


def ilp_missed(case: dict) -> bool:
    """Whether the ILP exited 3 on a set some other method planned (a plan that holds every constraint: the set
    is feasible, and the ILP, warm-started by every baseline, said it was not)."""
    by = {r["method"]: r["verdict"] for r in case["results"]}
    return by.get("ilp", "").startswith("exit3") and "plan" in by.values()


def baseline_missed(case: dict) -> list[str]:
    """The methods other than the ILP that exited 3 on a set the ILP planned."""
    by = {r["method"]: r["verdict"] for r in case["results"]}
    return [m for m, v in by.items() if m != "ilp" and v.startswith("exit3")] if by.get("ilp") == "plan" else []


def tally(cases: list[dict]) -> dict:
    """Counts per verdict over every solve of ``cases``, with the sets, solves and sets the ILP missed."""
    counts = Counter(r["verdict"] for c in cases for r in c["results"])
    return {"sets": len(cases), "solves": sum(counts.values()), **{v: counts.get(v, 0) for v in VERDICTS},
            "ilp_exit3_where_another_planned": sum(ilp_missed(c) for c in cases),
            "baseline_exit3_where_ilp_planned": dict(Counter(m for c in cases for m in baseline_missed(c))),
            "wall_s": round(sum(r["wall_s"] for c in cases for r in c["results"]), 1)}


def table(cases: list[dict]) -> str:
    """The per-pair table (sets, solves, plans, plans breaking a constraint, exit 3 named / not, exit 2 named /
    not, invalid sets let through, errors, sets the ILP exited 3 on where another method planned, wall seconds)
    and the totals."""
    pairs = sorted({(c["workload"], c["hardware"]) for c in cases}, key=lambda p: (p[0], p[1]))
    head = (f"{'pair':<46} {'sets':>4} {'solves':>6} {'plans':>5} {'broken':>6} {'exit3 named/not':>15} "
            f"{'exit2 named/not':>15} {'missed':>6} {'errors':>6} {'ilp<':>4} {'wall s':>7}")
    rows = [head]
    for label, group in [(f"{w} @ {h}", [c for c in cases if (c["workload"], c["hardware"]) == (w, h)])
                         for w, h in pairs] + [("total", cases)]:
        t = tally(group)
        rows.append(f"{label:<46} {t['sets']:>4} {t['solves']:>6} {t['plan']:>5} {t['plan_breaks']:>6} "
                    f"{t['exit3_named']:>7} / {t['exit3_unnamed']:<5} {t['exit2_named']:>7} / "
                    f"{t['exit2_unnamed']:<5} {t['missed_bad']:>6} {t['error']:>6} "
                    f"{t['ilp_exit3_where_another_planned']:>4} {t['wall_s']:>7.1f}")
    return "\n".join(rows)


def problems(cases: list[dict]) -> list[dict]:
    """Every solve whose verdict is a bug (a broken plan, an unnamed exit, an invalid set let through, an
    error), with its pair, set and method."""
    bad = {"plan_breaks", "exit3_unnamed", "exit2_unnamed", "missed_bad", "error"}
    return [{"pair": f"{c['workload']} @ {c['hardware']}", "set": c["set"], "method": r["method"],
             "verdict": r["verdict"], "detail": r["detail"], "workload_file": c["workload_file"]}
            for c in cases for r in c["results"] if r["verdict"] in bad] + \
        [{"pair": f"{c['workload']} @ {c['hardware']}", "set": c["set"], "method": "ilp", "verdict": "ilp_missed",
          "detail": "the ILP exited 3 where " + ", ".join(r["method"] for r in c["results"] if r["verdict"] == "plan")
          + " planned", "workload_file": c["workload_file"]} for c in cases if ilp_missed(c)]


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=20, help="constraint sets per pair (default 20)")
    ap.add_argument("--work-limit", type=float, default=1000.0, help="the ILP's work units (default 1000)")
    ap.add_argument("--seed", type=int, default=52, help="seed of the draws (default 52)")
    ap.add_argument("--cli", type=int, default=20, help="solves re-run through the CLI (default 20)")
    ap.add_argument("--pairs", nargs="*", metavar="WORKLOAD@HARDWARE", help="only these pairs (default PAIRS)")
    ap.add_argument("--keep", type=Path, help="write the workload files here (default: a temporary folder)")
    ap.add_argument("--date", default=dt.date.today().isoformat())
    ap.add_argument("--out", type=Path, help="JSON results (default validation/results/constraints-random-DATE.json)")
    ap.add_argument("--from", dest="from_file", type=Path, metavar="FILE",
                    help="re-tally this results file (table, totals, problems) without solving")
    return ap.parse_args(argv)


def summarise(data: dict) -> int:
    """Add the totals, per-pair counts and problems of ``data['cases']`` to ``data``, print the table, the CLI line
    and every problem; 1 where a problem or a CLI mismatch was found, else 0."""
    cases, cli = data["cases"], data["cli"]
    pairs = list(dict.fromkeys((c["workload"], c["hardware"]) for c in cases))
    data.update(totals=tally(cases), per_pair={f"{w}@{h}": tally([c for c in cases if (c["workload"], c["hardware"])
                                                                  == (w, h)]) for w, h in pairs},
                problems=problems(cases))
    print(table(cases))
    cli_bad = [c for c in cli if not c["ok"]]
    print(f"CLI: {len(cli)} solves, {len(cli) - len(cli_bad)} with the expected exit code and no traceback")
    print(f"baselines exiting 3 on a set the ILP planned: {data['totals']['baseline_exit3_where_ilp_planned']}")
    for p in data["problems"]:
        print(f"PROBLEM {p['pair']} set {p['set']} {p['method']}: {p['verdict']}: {p['detail'][:200]}")
    return 1 if data["problems"] or cli_bad else 0


def main(argv=None) -> int:
    args = _args(argv)
    if args.from_file:
        data = json.loads(args.from_file.read_text())
        code = summarise(data)
        data["retallied"] = {"command": "python3 validation/constraints_random.py --from FILE", "date": args.date,
                             "git_commit": git("rev-parse", "HEAD")}
        write_json(args.from_file, data)
        return code
    pairs = [tuple(p.split("@")) for p in args.pairs] if args.pairs else PAIRS
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="constraints-random-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        cases = []
        for wl_name, hw_name in pairs:
            print(f"{wl_name} @ {hw_name}: {args.sets} sets", flush=True)
            cases += run_pair(wl_name, hw_name, args.sets, args.work_limit, rng, folder,
                              log=lambda s: print(s, flush=True))
        cli = cli_checks(cases, args.cli, args.work_limit, random.Random(args.seed + 1))
        for c in cases:  # the files are gone with the folder; the constraints stay in the results
            c["workload_file"] = Path(c["workload_file"]).name
    data = {"command": "python3 validation/constraints_random.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "date": args.date, **environment(), "seed": args.seed, "work_limit": args.work_limit,
            "sets_per_pair": args.sets, "pairs": [f"{w}@{h}" for w, h in pairs],
            "wall_s": round(time.perf_counter() - t0, 1), "cli": cli, "cases": cases}
    code = summarise(data)
    out = args.out or ROOT / "validation" / "results" / f"constraints-random-{args.date}.json"
    write_json(out, data)
    print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)")
    return code


if __name__ == "__main__":
    sys.exit(main())
