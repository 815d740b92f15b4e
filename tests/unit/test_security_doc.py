"""docs/security.md names the test that shows each claim: every one named must exist, and each section names one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"
REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_test_the_security_doc_names_exists() -> None:
    refs = REF.findall(DOC.read_text())
    assert len(refs) >= 40, "the security doc should name the tests behind its claims"
    missing = [f"{f}::{t}" for f, t in refs if not (ROOT / f).is_file() or t not in _tests_in(ROOT / f)]
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"


def test_every_claim_section_names_a_test() -> None:
    claims = DOC.read_text().split("## Claims", 1)[1].split("## What is not defended", 1)[0]
    for section in re.split(r"^### ", claims, flags=re.M)[1:]:
        title = section.splitlines()[0]
        assert REF.search(section), f"section {title!r} of docs/security.md names no test"


#: Settings that look like limits but bound no input from others (a work size the node chooses for itself).
NOT_A_LIMIT = {"spark.warmup_rows": "the size of the worker's own JIT warm-up"}
LIMIT_NAME = re.compile(
    r"max|timeout|budget|bytes|rate|burst|deadline|per_|keep|seconds|window|strikes|ignore|marks|rows|ratio|columns"
)


def test_every_limit_setting_is_in_the_limits_tables() -> None:
    from config import iter_fields

    limits = DOC.read_text().split("## Limits: every one", 1)[1]
    keys = [key for key, *_ in iter_fields() if LIMIT_NAME.search(key.split(".")[1])]
    missing = [k for k in keys if f"`{k}`" not in limits and k not in NOT_A_LIMIT]
    assert not missing, f"limits missing from docs/security.md's Limits tables: {missing}"
