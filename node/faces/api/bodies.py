"""The JSON bodies the API's write routes take: each one's schema, declared in the route table (node/faces/api/server.py
``ROUTES``) and so in the OpenAPI document, is the one a body is checked against (jsonschema-rs), and a body that
fails is a 400 in the route's own words, one line.

A route's fields are checked in the order given, each told with its own message; a test the schema cannot state
(a CID that parses, a limit that is an integer and not 5.0) runs when the field's schema holds. A field whose
test is ``alone`` is judged by its test only: the schema says the same in the document, but a handler's rule is
finer than a JSON Schema's (a trust mode the resolver parses, naming what is wrong with a ``quorum:``; "blank"
as Python's ``str.strip`` means it). A body that is not a JSON object, or fails where no field applies, gets the
route's ``invalid`` message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
from aiohttp import web

from node.domain.model import INT64_MAX, parse_cid
from node.services.resolve.resolver import TRUST_MODES, valid_mode
from node.support.errors import InvalidInput

Schema = dict[str, Any]
Body = dict[str, Any]

STR: Schema = {"type": "string"}
BOOL: Schema = {"type": "boolean"}
QUORUM = r"^quorum:[0-9]+(:communities)?$"  # docs/peers.md "Quorum"
TRUST: Schema = {"anyOf": [{"enum": [*TRUST_MODES, None]}, {"type": "string", "pattern": QUORUM}]}
TRUST_SAYS = f'"trust" must be one of {", ".join(TRUST_MODES)}, or quorum:K[:communities]'


@dataclass(frozen=True)
class Field:
    says: str  # the 400's message when this field breaks the schema (or is missing, when required)
    test: Callable[[Body], bool] | None = None  # a further test of the body (False: ``says``; it may raise its own)
    alone: bool = False  # the test alone judges this field


class JsonBody:
    def __init__(self, schema: Schema, invalid: str, fields: Mapping[str, Field] | None = None) -> None:
        self.schema, self.invalid, self.fields = schema, invalid, dict(fields or {})
        self._validator = jsonschema_rs.validator_for(schema)

    async def read(self, request: web.Request) -> Body:
        """The request's body, checked."""
        return self.check(await self.parse(request))

    async def parse(self, request: web.Request) -> Body:
        """The request's body as a JSON object, not yet checked against the schema."""
        try:
            body = await request.json()
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deep
            raise InvalidInput(self.invalid) from None
        if not isinstance(body, dict):
            raise InvalidInput(self.invalid)
        return body

    def check(self, body: Body) -> Body:
        broken = _broken_fields(self._validator, body)
        for name, f in self.fields.items():
            if not f.alone and name in broken:
                raise InvalidInput(f.says)
            if f.test is not None and not f.test(body):
                raise InvalidInput(f.says)
        if broken - set(self.fields):
            raise InvalidInput(self.invalid)
        return body


def _broken_fields(validator: Any, body: Body) -> set[str]:
    """The top-level fields the schema's errors are about ("" for the body as a whole)."""
    out = set()
    for e in validator.iter_errors(body):
        path = list(e.instance_path)
        if path:
            out.add(str(path[0]))
        elif isinstance(e.kind, jsonschema_rs.ValidationErrorKind.Required):
            out.add(e.kind.property)
        else:
            out.add("")
    return out


def strings(*required: str, optional: tuple[str, ...] = ()) -> Schema:
    """An object of string fields (an optional one may be null: absent, as clients send it)."""
    props = dict.fromkeys(required, STR) | {k: {"type": ["string", "null"]} for k in optional}
    return {"type": "object", "required": list(required), "properties": props}


def _cid_or_null(body: Body) -> bool:
    if body.get("type") is not None:
        parse_cid(body["type"])  # InvalidCID, in its own words
    return True


def _mode_or_null(body: Body) -> bool:
    """A trust mode the resolver knows (a malformed ``quorum:`` is told in the resolver's words), or none."""
    trust = body.get("trust")
    return trust is None or (isinstance(trust, str) and valid_mode(trust))


def _not_blank(body: Body) -> bool:
    sql = body.get("sql")
    return isinstance(sql, str) and bool(sql.strip())


def _integer_or_null(body: Body) -> bool:
    """JSON Schema's integers include 5.0; a limit is an int."""
    return body.get("limit") is None or type(body["limit"]) is int


# -- the routes' bodies -------------------------------------------------------------------------------------------

_QUERY_PROPERTIES: Schema = {
    "sql": {"type": "string", "pattern": r"\S"},  # not blank
    "inputs": {"type": "object", "additionalProperties": STR},
    "limit": {"type": ["integer", "null"], "minimum": 0, "maximum": INT64_MAX},  # null: query.answer_rows
    "wait": BOOL,
    "trust": TRUST,  # null: the node's own mode (peers.trust), as when absent
    "type": {"type": ["string", "null"]},  # the CID of the type the result must be a term of
    "retry": BOOL,  # compute again a recorded failure (docs/queries.md "Recorded failures")
}
QUERY_FIELDS = tuple(_QUERY_PROPERTIES)
QUERY = JsonBody(
    {
        "type": "object",
        "required": ["sql"],  # "inputs" defaults to {}: tables not declared are datasets of their names
        "additionalProperties": False,  # refused with a 400 (the handler names the field), not ignored
        "properties": _QUERY_PROPERTIES,
    },
    'body must be JSON {"sql": …, "inputs": {"alias": "dataset"}, "limit": n, "wait": bool}',
    {
        "retry": Field('"retry" must be true or false'),
        "type": Field('"type" must be the CID of a Transform.Storage type, as a string', _cid_or_null),
        # a bad mode or a non-boolean "wait" is a 400 now, not a job that fails
        "trust": Field(TRUST_SAYS, _mode_or_null, alone=True),
        "wait": Field('"wait" must be true or false'),
        "sql": Field('"sql" must be a non-empty string', _not_blank, alone=True),
        "inputs": Field('"inputs" must map input names to dataset references (name, id or block CID)'),
        "limit": Field(f'"limit" must be an integer from 0 to {INT64_MAX}', _integer_or_null),
    },
)

_PIPELINE_SAYS = 'give the pipeline as "text" (the file, YAML or JSON) or as "pipeline" (a map), not both'
PIPELINE = JsonBody(
    {
        "type": "object",
        "properties": {
            "text": {"type": ["string", "null"]},  # the pipeline file as written (YAML or JSON)
            "pipeline": {"type": ["object", "null"]},  # or its map
            "trust": TRUST,
            "wait": BOOL,
        },
    },
    'body must be JSON {"text": the YAML or JSON file, or "pipeline": {…}, "trust": mode, "wait": bool}',
    {
        "text": Field(_PIPELINE_SAYS),
        "pipeline": Field(_PIPELINE_SAYS, lambda b: (b.get("text") is None) != (b.get("pipeline") is None)),
        "trust": Field(TRUST_SAYS, _mode_or_null, alone=True),
        "wait": Field('"wait" must be true or false'),
    },
)

_PULL_SAYS = 'body must be JSON {"source": URL or CID, "name": optional local name}'
PULL = JsonBody(strings("source", optional=("name",)), _PULL_SAYS)


def _strings_body(*required: str, optional: tuple[str, ...] = ()) -> JsonBody:
    says = f"body must be a JSON object with string fields {', '.join(required)}"
    fields = {k: Field(says) for k in required} | {k: Field(f'"{k}" must be a string') for k in optional}
    return JsonBody(strings(*required, optional=optional), says, fields)


CONNECT = _strings_body("addr")
TRUST_ADD = _strings_body("key", optional=("community",))
TRUST_RM = _strings_body("key", optional=("community",))

_VERIFY_SAYS = "cid must be a string; offline, recursive and wait true or false"
VERIFY = JsonBody(
    {
        "type": "object",
        "required": ["cid"],
        "properties": {"cid": STR, "offline": BOOL, "recursive": BOOL, "wait": BOOL},
    },
    "body must be a JSON object with string fields cid",
    {
        "cid": Field("body must be a JSON object with string fields cid"),
        "offline": Field(_VERIFY_SAYS),
        "recursive": Field(_VERIFY_SAYS),
        "wait": Field(_VERIFY_SAYS),
    },
)
