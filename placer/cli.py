"""The ``placer`` command. Each subcommand lives in ``placer/commands/<name>.py`` with two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Exit codes: 0 ok, 1 bug, 2 bad input (an unwritable stdout
too), 3 infeasible; 130 SIGINT, 143 SIGTERM, 129 SIGHUP (children stopped, temporary files removed); a reader of
stdout that went away (``placer show x | head -1``) ends it quietly by SIGPIPE, as git (a shell's ``$?``: 141).
Run as the command, the process is owned by placer/process.py (streams, signals, children, temporary files)
before anything heavy is imported; ``main(argv)`` from Python leaves the caller's process alone."""
from __future__ import annotations

import argparse
import importlib
import time

#: When the command started (perf_counter seconds), before its imports: ``solve --time-limit`` counts from here.
STARTED_S = time.perf_counter()

from placer.errors import PlacerError

#: subcommand -> one-line help; the module placer.commands.<name> implements it.
COMMANDS = {
    "check": "validate spec and plan files and print a one-line summary of each",
    "show": "describe a hardware spec or workload (tables per node, largest tables), optionally plot it",
    "solve": "choose where every table lives (ILP or a baseline) and write the plan",
    "simulate": "evaluate any plan with the cost model: step time, phases, devices, bottleneck",
    "compare": "run every method on the same cost model and print them side by side",
    "sweep": "what-if over GPU counts: throughput, scaling efficiency, GPUs needed for a target throughput",
    "run": "build a plan with PyTorch, train it on synthetic batches and measure it against the prediction",
    "calibrate": "measure this machine with micro-benchmarks and write a hardware spec for it",
    "profile": "measure each table's access skew and pooling from a sample of real ids and write them into a workload",
    "explain": "for each table of a plan: where it is, what binds it there, and the step time of its next-best option",
    "export": "write a plan as TorchRec's ParameterSharding plan and constraints (JSON + a ShardingPlan builder)",
    "import": "read a TorchRec sharding plan (placer's JSON export or a pickled ShardingPlan) as a placer plan, "
              "or its ParameterConstraints (--constraints) into a workload",
}
#: subcommands whose module name differs from the command (``import`` is a Python keyword)
MODULES = {"import": "import_plan"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="placer", description="Place DLRM embedding tables, with proof.")
    parser.add_argument("--version", action="version", version=f"placer {version()}",
                        help="print placer's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        module = importlib.import_module(f"placer.commands.{MODULES.get(name, name)}")
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _actions=tuple(p._actions))
    return parser


def version() -> str:
    """The installed package's version (its metadata), else the source tree's ``placer.__version__``."""
    from importlib import metadata

    try:
        return metadata.version("placer")
    except metadata.PackageNotFoundError:
        import placer

        return placer.__version__


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (and exits with it when run as a script: ``argv`` None)."""
    if argv is None:  # the command: own the process first (streams, signals, children, temporary files)
        from placer import process

        process.own()
    from placer.commands._output import refuse_inputs_as_outputs
    from placer.specs.plausible import print_spec_warnings_plainly

    try:
        print_spec_warnings_plainly()
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # argparse already printed usage (or --help, --version); bad arguments: bad input
            code = exc.code if isinstance(exc.code, int) else 2
            return _exit(code, argv)
        args._started_s = STARTED_S
        refuse_inputs_as_outputs(args, args._actions)
        if argv is None:  # the command: its heap kept out of the collector's way as it grows (placer/executor.py)
            from placer.executor import command_heap

            with command_heap():
                code = args._run(args)
        else:
            code = args._run(args)
    except PlacerError as exc:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(exc))}",
                                                                    markup=True)
        code = exc.exit_code
    except KeyboardInterrupt:  # a library caller's Ctrl-C (the command's own SIGINT ends in process.py)
        code = 130
    except (Exception, SystemExit) as exc:  # a bug: its traceback, exit 1, children and temporary files cleaned
        if argv is not None:
            raise
        if isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        else:
            import traceback

            traceback.print_exc()
            code = 1
    return _exit(code, argv)


def _exit(code: int, argv) -> int:
    """Run as the command (``argv`` None): exit with ``code`` at once, without tearing the interpreter down (its
    output flushed, its child processes stopped and temporary files removed first: process.finish): freeing a
    large solve's objects one by one took 1.8 s after ``solve`` had written its plan (production-856 @
    dgx-h100-16node), time its ``--time-limit`` counts. Called with ``argv`` (tests, Python callers): return
    ``code``."""
    if argv is not None:
        return code
    from placer import process

    process.finish(code)


if __name__ == "__main__":
    main()
