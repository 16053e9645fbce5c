"""matplotlib's pyplot as placer's figures use it, set up in one place."""
from __future__ import annotations


def pyplot():
    """pyplot on the Agg backend (files, no display), drawing text as written: names and descriptions come from
    the user's files and may hold '$', which matplotlib would otherwise parse as math (and fail on)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt
