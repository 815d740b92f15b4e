"""The TPC-H bench's statements (scripts/bench/tpch.py): the specification's defaults first, each later one a
different invocation, and every one a substitution of the same query (only the parameters differ)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import sqlglot

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    spec = importlib.util.spec_from_file_location("cairn_bench_tpch", ROOT / "scripts" / "bench" / "tpch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name,default", [("q1", "q01.sql"), ("q6", "q06.sql")])
def test_statements_start_with_the_spec_default_and_never_repeat(name: str, default: str) -> None:
    sqls = _bench().statements(name, 12)
    assert sqls[0] == (ROOT / "tests" / "data" / "tpch" / default).read_text()
    assert len(set(sqls)) == 12
    shape = {re.sub(r"'[^']*'|\b\d+(\.\d+)?\b", "?", s) for s in sqls}
    assert len(shape) == 1, shape  # only literals change
    for sql in sqls:
        sqlglot.parse_one(sql, read="spark")
