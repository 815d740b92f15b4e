"""No function over ~60 lines without a reason.

Walks the source packages with `ast`; a function may be longer than MAX_LINES only when the line before its `def`
(or before its first decorator), or a comment line between its signature and its first statement, holds a comment
containing `long:` followed by the reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MAX_LINES = 60
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("node", "config", "p2p", "spark_worker", "scripts")

Func = ast.FunctionDef | ast.AsyncFunctionDef


def _has_reason(lines: list[str], func: Func) -> bool:
    """`long:` in a comment just above the def (or its decorators), or between the signature and the body."""
    first = min([func.lineno, *(d.lineno for d in func.decorator_list)])
    above = lines[first - 2] if first >= 2 else ""
    inside = lines[func.lineno - 1 : func.body[0].lineno - 1]
    return any("#" in line and "long:" in line.split("#", 1)[1] for line in [above, *inside])


def _length(func: Func) -> int:
    end = func.end_lineno if func.end_lineno is not None else func.lineno
    return end - func.lineno + 1


def long_functions(path: Path) -> list[tuple[str, int]]:
    """(name, length) of each function in `path` over MAX_LINES with no `long:` reason."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if _length(node) > MAX_LINES and not _has_reason(lines, node):
            found.append((node.name, _length(node)))
    return found


def _source_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if ".venv" not in p.parts)


def test_no_function_over_max_lines_without_reason() -> None:
    offenders = []
    for path in _source_files():
        rel = path.relative_to(ROOT).as_posix()
        for name, length in long_functions(path):
            offenders.append(f"{rel}:{name} ({length} lines)")
    assert not offenders, "functions over 60 lines without a `# long: reason` comment:\n" + "\n".join(offenders)


def test_walk_finds_the_packages() -> None:
    # guards against a path mistake making the main test vacuous
    files = {p.relative_to(ROOT).parts[0] for p in _source_files()}
    assert set(PACKAGES) <= files


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n" + "    x = 1\n" * 60 + "", [("f", 61)]),
        ("def f():\n" + "    x = 1\n" * 59, []),
        ("# long: one linear scenario\ndef f():\n" + "    x = 1\n" * 70, []),
        ("@dec\ndef f():\n    # long: a table\n" + "    x = 1\n" * 70, []),
        ("# long: a table\n@dec\ndef f():\n" + "    x = 1\n" * 70, []),
        ("# not long enough reason\ndef f():\n" + "    x = 1\n" * 70, [("f", 71)]),
        ("class C:\n    async def m(self):\n" + "        x = 1\n" * 61, [("m", 62)]),
        ("x = 'long:'\ndef f():\n" + "    x = 1\n" * 70, [("f", 71)]),
    ],
)
def test_detector(tmp_path: Path, source: str, expected: list[tuple[str, int]]) -> None:
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    assert long_functions(path) == expected
