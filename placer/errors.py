"""The PlacerError hierarchy: every user-facing failure is one of these, with an exit code.

Exit codes (the CLI's contract): 0 ok, 1 a bug, 2 bad input, 3 infeasible.
"""
from __future__ import annotations


class PlacerError(Exception):
    """Base of every error placer raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class SpecError(PlacerError):
    """Bad input: a spec, plan or argument that is malformed. Names the file and the field path."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.file = file
        self.field = field
        self.detail = message
        where = ""
        if file:
            where += f"{file}"
        if field:
            where += f"{': ' if where else ''}{field}"
        super().__init__(f"{where}: {message}" if where else message)


class InfeasibleError(PlacerError):
    """The workload does not fit the machine (or the runner's memory check failed)."""

    exit_code = 3


class SolverError(PlacerError):
    """The solver failed for a reason other than infeasibility (crash, missing backend)."""

    exit_code = 1
