"""Every ``type: ignore`` in the shipped code names its error code and says why, on the same line.

The form is ``# type: ignore[code, ...]  # reason``: mypy (``ignore-without-code``) already refuses a bare
ignore; this test also refuses one without a reason, and scans comments only (tokenize), never strings.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("node", "config", "p2p", "spark_worker", "scripts")

# `type: ignore` anywhere in a comment (mypy reads it there too), and the one accepted shape of it.
_IGNORE = re.compile(r"type:\s*ignore")
_EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z][a-z0-9-]*(?:\s*,\s*[a-z][a-z0-9-]*)*\]\s+#\s*\S.{2,}")


def unexplained(source: str) -> list[tuple[int, str]]:
    """(line number, comment) of each ``type: ignore`` comment without an error code and a reason."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and _IGNORE.search(tok.string) and not _EXPLAINED.search(tok.string):
            found.append((tok.start[0], tok.string))
    return found


def _checked_files() -> list[Path]:
    return sorted(p for d in CHECKED for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize(
    "line",
    [
        "x = f()  # type: ignore\n",
        "x = f()  # type: ignore[attr-defined]\n",
        "x = f()  # type: ignore[attr-defined]  #\n",
        "x = f()  # type:ignore[union-attr] why\n",  # a reason must be its own comment
        "x = f()  # noqa: E501  # type: ignore[misc]\n",
        "x = f()  # type: ignore[]  # empty code list\n",
    ],
)
def test_unexplained_ignores_are_found(line: str) -> None:
    assert unexplained(line) == [(1, line.rstrip("\n")[line.index("#") :])]


@pytest.mark.parametrize(
    "line",
    [
        "x = f()  # type: ignore[attr-defined]  # pyspark types _jvm Optional\n",
        "x = f()  # type: ignore[arg-type, union-attr]  # libp2p's stubs are wrong here\n",
        's = "# type: ignore"  # a string, not a comment\n',
        "x = f()\n",
    ],
)
def test_explained_ignores_and_strings_pass(line: str) -> None:
    assert unexplained(line) == []


def _found() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in _checked_files():
        bad = [f"{n}: {c}" for n, c in unexplained(path.read_text())]
        if bad:
            out[path.relative_to(ROOT).as_posix()] = bad
    return out


def test_every_ignore_in_the_code_has_a_code_and_a_reason() -> None:
    found = _found()
    assert not found, f"type: ignore without `[code]  # reason`: {found}"
