"""node.faces.api.answer_schemas.schema_of: the API's answer schemas are made from the answers' types
(node/core/result_types.py),
so a field added to a result is documented by the same change."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pytest

from node.core.result_types import QueryAnswer
from node.faces.api import answer_schemas as shapes


class Inner(TypedDict):
    n: int


class Sample(TypedDict):
    name: str
    maybe: Inner | None
    later: NotRequired[float]  # optional: listed after every required field, whatever its place
    cid: Annotated[str, "a CID"]
    state: Literal["up", "down"]
    kind: Annotated[str, {"enum": ["a", "b"]}]
    cells: list[list[Any]]
    timings: dict[str, float]
    anything: dict[str, Any]


def test_a_typed_dict_is_an_object_with_its_required_fields_first() -> None:
    assert shapes.schema_of(Sample) == {
        "type": "object",
        "required": ["name", "maybe", "cid", "state", "kind", "cells", "timings", "anything"],
        "properties": {
            "name": {"type": "string"},
            "maybe": {
                "anyOf": [
                    {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
                    {"type": "null"},
                ]
            },
            "cid": {"type": "string", "description": "a CID"},
            "state": {"type": "string", "enum": ["up", "down"]},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "cells": {"type": "array", "items": {"type": "array", "items": {}}},
            "timings": {"type": "object", "additionalProperties": {"type": "number"}},
            "anything": {"type": "object"},
            "later": {"type": "number"},
        },
    }
    assert list(shapes.schema_of(Sample)["properties"])[-1] == "later"


def test_a_type_with_no_json_form_is_refused() -> None:
    with pytest.raises(TypeError, match="no JSON Schema"):
        shapes.schema_of(bytes)


def test_the_route_schemas_are_those_of_the_core_results() -> None:
    assert shapes.schema_of(QueryAnswer) == shapes.QUERY_ANSWER
    assert shapes.QUERY_ANSWER["required"] == list(QueryAnswer.__annotations__)
    # a peer's part of an answer is an object (which peer, signer, mode, receipt), null for other answers
    assert shapes.QUERY_ANSWER["properties"]["peer"] == {"anyOf": [{"type": "object"}, {"type": "null"}]}
    job_result = shapes.JOB["properties"]["result"]["anyOf"]
    assert job_result[0] == shapes.QUERY_ANSWER and job_result[-1] == {"type": "null"}
