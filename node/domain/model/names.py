"""Local dataset names: what a user (or a pulled dataset's title) may call a dataset on this node.

Names are printed raw by ``cairn ls`` and in logs, so a name holding a line break, ESC, NUL or a bidi override
(U+202E turns ``txt.exe`` into ``exe.txt`` on screen) could forge output: such names are refused with one
line, not a 500.
"""

from __future__ import annotations

import unicodedata

from node.support.errors import InvalidInput, quote

__all__ = ["MAX_NAME_CHARS", "check_dataset_name", "name_problem"]

MAX_NAME_CHARS = 200  # a name is a label, not a payload
# Unicode categories refused: controls (Cc: NUL, ESC, line breaks), format characters (Cf: bidi overrides and
# isolates, zero-width marks), surrogates (Cs), private use (Co), unassigned (Cn), line and paragraph separators.
_REFUSED = {"Cc": "a control character", "Cf": "a format (bidi or invisible) character", "Cs": "a lone surrogate"}
_REFUSED |= {"Co": "a private-use character", "Zl": "a line separator", "Zp": "a paragraph separator"}
_REFUSED["Cn"] = "an unassigned code point"  # no glyph, and a later Unicode may make it anything


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a dataset here, or None when it can."""
    if not isinstance(name, str) or not name:
        return "a dataset name must be a non-empty string"
    if len(name) > MAX_NAME_CHARS:
        return f"a dataset name has at most {MAX_NAME_CHARS} characters, got {len(name)}"
    if "/" in name or name.startswith("did:"):
        return "a dataset name holds no '/' and does not start with 'did:' (those name datasets by id)"
    if name != name.strip():
        return "a dataset name does not start or end with whitespace"
    for i, ch in enumerate(name):
        category = unicodedata.category(ch)
        # Spaces other than U+0020 (no-break, ideographic, …) print as a space: "a b" could pass for another name.
        what = "a space other than U+0020" if category == "Zs" and ch != " " else _REFUSED.get(category)
        if what:
            return f"a dataset name holds no {what.split(' ', 1)[1]}: U+{ord(ch):04X} at position {i + 1}"
    return None


def check_dataset_name(name: str) -> str:
    """``name`` itself, or :class:`InvalidInput` (400) saying what is wrong with it (the name quoted, escaped)."""
    problem = name_problem(name)
    if problem:
        raise InvalidInput(f"invalid dataset name {quote(name)}: {problem}")
    return name
