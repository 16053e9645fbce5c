"""``placer show FILE [--plot PNG]``: a readable description of a hardware spec or workload."""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="hardware spec or workload (YAML or JSON)")
    p.add_argument("--plot", metavar="PNG", help="draw the topology graph or the workload's size/skew chart")


def run(args) -> int:
    raise NotImplementedError("placer show: not written yet")
