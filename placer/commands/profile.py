"""``placer profile``: under construction (issue 17)."""
from __future__ import annotations

import argparse

from placer.errors import PlacerError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs="*")


def run(args) -> int:
    raise PlacerError("placer profile is not built yet")
