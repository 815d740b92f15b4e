"""QueryRefused: why the canonicalizer would not accept a statement (docs/queries.md)."""

from __future__ import annotations

import re

from node.errors import InvalidInput

FRAGMENT_MAX = 80
_SPACES = re.compile(r"\s+")


def shorten(text: str, limit: int = FRAGMENT_MAX) -> str:
    """One line, whitespace collapsed, at most ``limit`` characters (``…`` marks a cut)."""
    one_line = _SPACES.sub(" ", text).strip()
    if len(one_line) <= limit:
        return one_line
    return one_line[: limit - 1].rstrip() + "…"


class QueryRefused(InvalidInput):
    """A statement the canonicalizer refuses.

    ``rule`` is a short, stable id (``nondeterministic-function``, ``unknown-table``, …; the full list is
    in docs/queries.md), ``why`` says what is wrong, ``fragment`` is the offending piece of SQL, shortened.
    The message is one line: ``query refused (<rule>): <why>: <fragment>``.
    """

    def __init__(self, rule: str, why: str, fragment: str = "") -> None:
        self.rule = rule
        self.why = shorten(why, 300)
        self.fragment = shorten(fragment)
        message = f"query refused ({rule}): {self.why}"
        if self.fragment:
            message += f": {self.fragment}"
        super().__init__(message)
