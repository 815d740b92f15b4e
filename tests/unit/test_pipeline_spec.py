"""Pipeline files (node/services/pipelines/spec.py): YAML and JSON read alike, steps put in dependency order, and every
error one line naming the step (docs/provenance.md "Pipelines")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from node.services.pipelines import parse_spec
from node.support.errors import InvalidInput

YAML = """
name: sales
steps:
  - name: top
    sql: SELECT city, total FROM b WHERE total > 10
    inputs: {b: by_city}
  - name: clean
    sql: SELECT * FROM o WHERE status = 'paid'
    inputs:
      o: orders
  - name: by_city
    sql: SELECT p.city, SUM(c.amount) AS total FROM c JOIN p ON c.person = p.person GROUP BY p.city
    inputs: {c: clean, p: people@-1}
"""


def test_yaml_and_json_give_the_same_pipeline_in_dependency_order() -> None:
    from_yaml = parse_spec(YAML)
    import yaml  # type: ignore[import-untyped]

    from_json = parse_spec(json.dumps(yaml.safe_load(YAML)))
    assert from_yaml == from_json == parse_spec(yaml.safe_load(YAML))
    assert from_yaml.name == "sales"
    assert [s.name for s in from_yaml.steps] == ["clean", "by_city", "top"]
    assert from_yaml.datasets() == ["orders", "people@-1"]  # each once, in first-use order
    assert from_yaml.steps[1].inputs == {"c": "clean", "p": "people@-1"}


def test_independent_steps_keep_the_files_order() -> None:
    steps = [{"name": n, "sql": "SELECT 1 AS x FROM t", "inputs": {"t": "d"}} for n in ("b", "a", "c")]
    assert [s.name for s in parse_spec({"name": "p", "steps": steps}).steps] == ["b", "a", "c"]


def _one(**step: Any) -> dict[str, Any]:
    return {"name": "p", "steps": [{"name": "s", "sql": "SELECT 1 AS x FROM t", "inputs": {"t": "d"}, **step}]}


def _cycle() -> dict[str, Any]:
    steps = [
        {"name": "first", "sql": "SELECT 1 AS x FROM t", "inputs": {"t": "orders"}},
        {"name": "a", "sql": "SELECT * FROM t", "inputs": {"t": "c"}},
        {"name": "b", "sql": "SELECT * FROM t", "inputs": {"t": "a"}},
        {"name": "c", "sql": "SELECT * FROM t", "inputs": {"t": "b"}},
        {"name": "after", "sql": "SELECT * FROM t", "inputs": {"t": "c"}},
    ]
    return {"name": "p", "steps": steps}


BAD: list[tuple[Any, str]] = [
    ("name: [", "the pipeline file is not YAML or JSON at line 1"),
    ("- a\n- b\n", "a pipeline is a map"),
    ({"steps": []}, 'the pipeline needs a "name"'),
    ({"name": "p", "steps": []}, 'pipeline "p": "steps" must be a non-empty list'),
    ({"name": "p", "steps": [], "extra": 1}, 'the pipeline: unknown key "extra"'),
    ({"name": "p", "steps": ["SELECT 1"]}, "step 1: a step is a map"),
    ({"name": "p", "steps": [{"sql": "SELECT 1"}]}, 'step 1: "name" must be'),
    (_one(sql=" "), 'step "s": "sql" must be a non-empty string'),
    (_one(inputs=["d"]), 'step "s": "inputs" must map aliases'),
    (_one(inputs={"t": 3}), 'step "s": input "t" must name a dataset or a step'),
    (_one(inputs={"a b": "d"}), 'step "s": input alias "a b" is not a SQL table name'),
    (_one(inputs={"t": "s"}), 'step "s": input "t" reads the step itself'),
    (_one(output="x"), 'step "s": unknown key "output"'),
    ({"name": "p", "steps": _one()["steps"] * 2}, 'step "s": two steps have this name'),
    (_cycle(), 'step "a": the steps "a" → "c" → "b" → "a" form a cycle'),
]


@pytest.mark.parametrize(("source", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_errors_are_one_line_naming_the_step(source: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_spec(source)
    assert message in e.value.message and "\n" not in e.value.message
    assert e.value.status == 400
