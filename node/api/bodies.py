"""The JSON bodies the API's write routes take, as JSON Schema: declared in the route table
(node/api/server.py ``ROUTES``), and so in the OpenAPI document."""

from __future__ import annotations

from node.model import INT64_MAX
from node.resolve.resolver import TRUST_MODES

STR = {"type": "string"}
QUORUM = r"^quorum:[0-9]+(:communities)?$"  # docs/peers.md "Quorum"
_QUERY_PROPERTIES: dict[str, object] = {
    "sql": {"type": "string", "pattern": r"\S"},  # not blank
    "inputs": {"type": "object", "additionalProperties": STR},
    "limit": {"type": ["integer", "null"], "minimum": 0, "maximum": INT64_MAX},  # null: query.answer_rows
    "wait": {"type": "boolean"},
    "trust": {
        "anyOf": [{"enum": [*TRUST_MODES, None]}, {"type": "string", "pattern": QUORUM}]
    },  # null: the node's own mode (peers.trust), as when absent
    "type": {"type": ["string", "null"]},  # the CID of the type the result must be a term of
    "retry": {"type": "boolean"},  # compute again a recorded failure (docs/queries.md "Recorded failures")
}
QUERY_FIELDS = tuple(_QUERY_PROPERTIES)
QUERY_BODY = {
    "type": "object",
    "required": ["sql"],  # "inputs" defaults to {}: tables not declared are datasets of their names
    "additionalProperties": False,  # refused with a 400 (``_known_fields``), not ignored
    "properties": _QUERY_PROPERTIES,
}

PIPELINE_BODY = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},  # the pipeline file as written (YAML or JSON)
        "pipeline": {"type": "object"},  # or its map
        "trust": {"anyOf": [{"enum": [*TRUST_MODES, None]}, {"type": "string", "pattern": QUORUM}]},
        "wait": {"type": "boolean"},
    },
}


def strings(*required: str, optional: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "type": "object",
        "required": list(required),
        "properties": dict.fromkeys((*required, *optional), STR),
    }


VERIFY_BODY = {
    "type": "object",
    "required": ["cid"],
    "properties": {
        "cid": STR,
        "offline": {"type": "boolean"},
        "recursive": {"type": "boolean"},
        "wait": {"type": "boolean"},
    },
}
