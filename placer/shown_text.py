"""User text (names, descriptions) as human reports show it: bounded, one line, printed as written.

A spec's description may be megabytes and a name may hold brackets; a report prints at most ``limit``
characters of either, says how many it left out, and replaces control characters (line breaks included) so
that one field is one line. Reports print through consoles without markup (report.make_console), so brackets
in a name are printed, never read as styles; the styled parts of a report are ``rich.text.Text``.
"""
from __future__ import annotations

#: characters of a description a report prints (the file keeps it whole)
DESCRIPTION_CHARS = 400
#: characters of a name a report prints (table, feature, template, spec names)
NAME_CHARS = 120


def clipped(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """``text`` with control characters as spaces, cut to ``limit`` characters with the count of the rest.
    Work is proportional to ``limit``, not to the text's length."""
    head = text[:limit]
    head = "".join(c if c.isprintable() else " " for c in head)
    rest = len(text) - limit
    return head if rest <= 0 else f"{head}... ({rest:,} more characters)"


def name(text: str) -> str:
    """A name as a report prints it (``clipped`` to NAME_CHARS)."""
    return clipped(text, NAME_CHARS)
