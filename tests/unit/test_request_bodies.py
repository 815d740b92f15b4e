"""node.faces.api.bodies: a JSON request body is checked against its route's schema (the document's), and a body that
fails is told in the route's words, one line: the messages clients and the CLI have always seen."""

from __future__ import annotations

from typing import Any

import pytest

from node.domain.model import INT64_MAX
from node.faces.api import bodies
from node.support.errors import InvalidCID, InvalidInput

SQL = {"sql": "SELECT 1 AS one"}
TRUST = '"trust" must be one of self, community, verify, any, or quorum:K[:communities]'


@pytest.mark.parametrize(
    "body, says",
    [
        ({**SQL, "retry": "yes"}, '"retry" must be true or false'),
        ({**SQL, "type": 7}, '"type" must be the CID of a Transform.Storage type, as a string'),
        ({**SQL, "trust": "AAA"}, TRUST),
        ({**SQL, "trust": 3}, TRUST),
        ({**SQL, "trust": "quorum:0"}, "trust mode 'quorum:0': K must be from 1 to"),  # the resolver's words
        ({**SQL, "wait": "no"}, '"wait" must be true or false'),
        ({**SQL, "wait": 0}, '"wait" must be true or false'),
        ({**SQL, "wait": None}, '"wait" must be true or false'),
        ({"inputs": {}}, '"sql" must be a non-empty string'),
        ({"sql": " \n"}, '"sql" must be a non-empty string'),
        ({"sql": "\x1c"}, '"sql" must be a non-empty string'),  # blank to str.strip, not to the schema's \S
        ({**SQL, "inputs": {"a": 1}}, '"inputs" must map input names to dataset references'),
        ({**SQL, "inputs": None}, '"inputs" must map input names to dataset references'),
        ({**SQL, "limit": -1}, f'"limit" must be an integer from 0 to {INT64_MAX}'),
        ({**SQL, "limit": 5.0}, f'"limit" must be an integer from 0 to {INT64_MAX}'),  # an integer to JSON Schema
        ({**SQL, "limit": True}, f'"limit" must be an integer from 0 to {INT64_MAX}'),
        ({**SQL, "limit": 10**30}, f'"limit" must be an integer from 0 to {INT64_MAX}'),
        # several wrong: the first in the order the route checks them
        ({"sql": "", "wait": 1, "retry": 1}, '"retry" must be true or false'),
    ],
)
def test_a_query_body_is_refused_in_the_routes_words(body: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput) as e:
        bodies.QUERY.check(body)
    assert e.value.message.startswith(says), e.value.message


def test_a_query_body_the_document_allows_is_taken_as_it_is() -> None:
    body = {**SQL, "inputs": {"a": "d"}, "limit": None, "trust": None, "type": None, "wait": False, "retry": True}
    assert bodies.QUERY.check(dict(body)) == body
    assert bodies.QUERY.check({"sql": "\ufeffSELECT 1"})  # not blank to str.strip, whatever the regex says
    assert bodies.QUERY.check({**SQL, "trust": "quorum:2:communities"})


def test_a_type_that_is_no_cid_is_told_by_the_cid_parser() -> None:
    with pytest.raises(InvalidCID):
        bodies.QUERY.check({**SQL, "type": "not-a-cid"})


@pytest.mark.parametrize(
    "check, body, says",
    [
        (bodies.PULL, {"name": "x"}, 'body must be JSON {"source": URL or CID, "name": optional local name}'),
        (bodies.PULL, {"source": 1}, 'body must be JSON {"source": URL or CID'),
        (bodies.CONNECT, {"addr": None}, "body must be a JSON object with string fields addr"),
        (bodies.TRUST_ADD, {"community": "x"}, "body must be a JSON object with string fields key"),
        (bodies.TRUST_RM, {"key": "k", "community": 5}, '"community" must be a string'),
        (bodies.VERIFY, {"offline": True}, "body must be a JSON object with string fields cid"),
        (bodies.VERIFY, {"cid": "x", "wait": "yes"}, "cid must be a string; offline, recursive and wait true or false"),
        (bodies.PIPELINE, {}, 'give the pipeline as "text" (the file, YAML or JSON) or as "pipeline" (a map)'),
        (bodies.PIPELINE, {"text": "x", "pipeline": {}}, 'give the pipeline as "text"'),
        (bodies.PIPELINE, {"text": "x", "trust": "nope"}, TRUST),
        (bodies.PIPELINE, {"text": "x", "wait": 1}, '"wait" must be true or false'),
    ],
)
def test_the_other_bodies_are_refused_in_their_routes_words(check: Any, body: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput) as e:
        check.check(body)
    assert e.value.message.startswith(says), e.value.message


def test_the_nulls_clients_send_for_absent_fields_are_taken() -> None:
    """`cairn pull` without --name, `cairn trust add` without --community send null: taken as absent."""
    assert bodies.PULL.check({"source": "http://x/odf/d", "name": None})
    assert bodies.TRUST_ADD.check({"key": "did:key:z", "community": None})
    assert bodies.PIPELINE.check({"text": None, "pipeline": {"name": "p"}, "trust": None})
