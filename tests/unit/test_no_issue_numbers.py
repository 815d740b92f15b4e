"""Comments, docstrings and docs say why, not which issue: no issue numbers in the code or the docs.

An issue number means nothing to a reader of the repository, so no ``.py`` file under the packages, scripts and
tests, and no ``.md`` file of the docs, may cite one. Two shapes count as a citation:

- the word issue (or issues) followed by a number, with ``#``, spaces or a comment's line break between them,
  anywhere in the text;
- the word item (or items) followed by a number, in prose only: comments and docstrings of ``.py`` files, and the
  lines of ``.md`` files outside fenced blocks. A string in code (data, a message) may hold the word and a number.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY_DIRS = ("node", "p2p", "spark_worker", "config", "scripts", "tests")
MD_FILES = ("README.md",)
MD_DIRS = ("docs", "scripts")

# "issue" then a number: spaces, `#` and line breaks (with a comment's `#`) may sit between them.
ISSUE = re.compile(r"\bissues?\b[\s#]*\d", re.IGNORECASE)
# "item" then a number, looked for in prose only.
ITEM = re.compile(r"\bitems?\s+\d", re.IGNORECASE)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _py_prose(text: str) -> list[tuple[int, str]]:
    """(first line, text) of every comment and docstring (any string that is a statement of its own)."""
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append((node.lineno, node.value.value))
    return found


def _md_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of every line outside fenced blocks."""
    found: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            found.append((n, line))
    return found


def citations(text: str, markdown: bool = False) -> list[tuple[int, str]]:
    """(line, the line's text) of each issue or item number ``text`` cites, in line order."""
    lines = text.splitlines()
    hits = {_line_of(text, m.start()) for m in ISSUE.finditer(text)}
    if not ITEM.search(text):  # the prose is read only where it may matter: reading it costs ~30 ms a file
        return [(n, lines[min(n, len(lines)) - 1].strip()) for n in sorted(hits)]
    for first, prose in _md_prose(text) if markdown else _py_prose(text):
        hits.update(first + prose.count("\n", 0, m.start()) for m in ITEM.finditer(prose))
    return [(n, lines[min(n, len(lines)) - 1].strip()) for n in sorted(hits)]


def _checked_files() -> list[tuple[Path, bool]]:
    py = [p for d in PY_DIRS for p in (ROOT / d).rglob("*.py")]
    md = [ROOT / f for f in MD_FILES] + [p for d in MD_DIRS for p in (ROOT / d).rglob("*.md")]
    return sorted({(p, p.suffix == ".md") for p in py + md if ".venv" not in p.parts})


def _found() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path, markdown in _checked_files():
        rel = path.relative_to(ROOT).as_posix()
        cited = [f"{n}: {line}" for n, line in citations(path.read_text(encoding="utf-8"), markdown)]
        if cited:
            out[rel] = cited
    return out


def test_no_comment_docstring_or_doc_cites_an_issue() -> None:
    offending = [f"{rel}:{cite}" for rel, cited in _found().items() for cite in cited]
    assert not offending, "say why instead of citing an issue:\n" + "\n".join(offending)


def test_the_walk_finds_the_code_and_the_docs() -> None:
    files = {p.relative_to(ROOT).as_posix() for p, _ in _checked_files()}
    for expected in ("node/support/errors.py", "p2p/host.py", "config/settings.py", "README.md", "docs/queries.md"):
        assert expected in files
    assert "tests/unit/test_no_issue_numbers.py" in files  # this file too


# The samples are built from parts so that this file cites nothing itself.
ISS, ITM = "iss" + "ue", "it" + "em"


@pytest.mark.parametrize(
    ("text", "markdown", "lines"),
    [
        (f"x = 1  # bounded ({ISS} 15)\n", False, [1]),
        (f'"""Docs ({ISS.title()} 17 {ITM} 3)."""\n', False, [1]),
        (f"# the {ISS}s 21 and 22\n", False, [1]),
        (f"# as {ISS} #14 said\n", False, [1]),
        (f"# wrapped (see {ISS}\n# 16: the why)\ny = 2\n", False, [1]),
        (f'def f():\n    """Line one.\n\n    Before {ITM} 3 it failed."""\n', False, [4]),
        (f"x = 1  # ({ITM} 4)\n", False, [1]),
        (f"Some prose.\n\nA reason ({ISS} 12 {ITM} 1).\n", True, [3]),
        (f"Some prose ({ITM}s 1 and 2).\n", True, [1]),
        (f"## A heading ({ISS} 16)\n", True, [1]),
        (f"{ISS.title()}\n16 once said so.\n", True, [1]),
    ],
)
def test_citations_are_found(text: str, markdown: bool, lines: list[int]) -> None:
    assert [n for n, _ in citations(text, markdown)] == lines


@pytest.mark.parametrize(
    ("text", "markdown"),
    [
        (f'rows = ["{ITM} 1", "{ITM} 2"]\n', False),  # data, not prose
        (f'raise ValueError(f"{ITM} {{n}} is missing")\n', False),
        ("# checked as the CAR passes (ipfs/kubo#9333)\n", False),  # an upstream project's reference says why
        ("# an issue of ordering, not of timing\n", False),
        (f"# the {ITM}s of a list, {ISS}s of trust\n", False),
        (f"```console\n$ cairn ls\n{ITM} 3  bafy…\n```\n", True),  # shown output, not prose
        ("Blocks are named `datasets.md › Ingest #1`.\n", True),
    ],
)
def test_legitimate_text_passes(text: str, markdown: bool) -> None:
    assert citations(text, markdown) == []
