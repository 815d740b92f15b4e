"""``GET /api/v0/openapi.json``: the OpenAPI 3.1 document, generated from the route table (the one source).

The document lists exactly the routes ``create_app`` serves, with who may call
each (``security`` and ``x-cairn-access``), its parameters, its body (content type and cap) and its answers,
errors included ({"error": {"type", "message"}}).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from config import ApiSettings
from node.faces.api.access import FILE_UPLOAD, JSON, OPEN, TOKEN, TOKEN_TO_COMPUTE, UPLOAD, Limits, Route, limits_from

# The document of a node with the default settings, committed for readers and tools that have no node running;
# tests/integration/test_api_contract.py fails when it is stale, scripts/openapi_doc.py rewrites it.
COMMITTED = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}
_ERROR_TEXT = {
    400: "bad input",
    401: "the API token is missing or wrong (or, for a query, needed to compute)",
    403: "a request from a web page that is not the node's",
    404: "not found",
    409: "conflicts with the node's state or settings",
    413: "body over the route's cap",
    415: "not Content-Type: application/json",
    421: "Host is not one of the node's names",
    422: "a value the node cannot render",
    429: "too many query jobs",
}


def _doc_path(path: str) -> str:
    """An aiohttp path as OpenAPI writes it: ``{path:.*}`` (a parameter spanning slashes) is ``{path}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


def _operation_id(route: Route) -> str:
    return route.method.lower() + "_" + "_".join(re.findall(r"[A-Za-z0-9]+", _doc_path(route.path)))


def _parameters(route: Route) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"\{(\w+)\}", _doc_path(route.path))
    ]
    for p in route.params:
        schema: dict[str, Any] = {"type": p.type, **({"enum": list(p.enum)} if p.enum else {})}
        if p.repeated:
            schema = {"type": "array", "items": schema}
        out.append({"name": p.name, "in": "query", "required": False, "description": p.doc, "schema": schema})
    return out


def _body(route: Route, limits: Limits) -> dict[str, Any] | None:
    if route.body == JSON:
        schema = {**(route.body_schema or {"type": "object"})}
        return {
            "required": True,
            "description": f"JSON, at most {limits.max_json_bytes} bytes (api.max_json_bytes)",
            "content": {"application/json": {"schema": schema}},
        }
    binary = {"type": "string", "format": "binary"}
    if route.body == UPLOAD:
        return {
            "required": True,
            "description": f"the bytes, at most {limits.max_upload_bytes} bytes (api.max_upload_bytes)",
            "content": {"application/octet-stream": {"schema": binary}},
        }
    if route.body == FILE_UPLOAD:
        form = {"type": "object", "required": ["file"], "properties": {"file": binary}}
        return {
            "required": True,
            "description": f"the bytes, or a multipart/form-data body whose (first) file part is taken (curl -F "
            f"file=@x.csv; its file name tells the format), at most {limits.max_upload_bytes} bytes "
            "(api.max_upload_bytes)",
            "content": {"application/octet-stream": {"schema": binary}, "multipart/form-data": {"schema": form}},
        }
    return None


# Bodies that are not JSON: text is a string, anything else bytes.
_TEXT_TYPES = (
    "text/plain",
    "text/csv",
    "text/event-stream",
    "application/x-ndjson",
    "text/html",
    "text/css",
    "text/javascript",
)


# A server-sent event as clients parse it: its name and its data, one JSON value (node/faces/api/handlers.py
# job_events).
_SSE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {"event": {"type": "string"}, "data": {"type": "string", "contentMediaType": "application/json"}},
}


def _content(route: Route, schema: dict[str, Any]) -> dict[str, Any]:
    def one(ct: str) -> dict[str, Any]:
        if ct == "application/json":
            return schema
        if ct == "text/event-stream":
            return _SSE_EVENT
        return {"type": "string"} if ct in _TEXT_TYPES else {"type": "string", "format": "binary"}

    return {ct: {"schema": one(ct)} for ct in route.produces}


def _responses(route: Route) -> dict[str, Any]:
    codes = set(route.errors) | {421}
    if route.access != OPEN:
        codes |= {401}
    if route.access != OPEN or route.method not in ("GET", "HEAD"):
        codes |= {403}
    if route.body is not None:
        codes |= {413}
    if route.body == JSON:
        codes |= {415}
    ref = "#/components/responses/Error"
    returns = route.returns or {route.ok: {}}
    out: dict[str, Any] = {
        str(status): {"description": "success" if status < 300 else "answered", "content": _content(route, schema)}
        for status, schema in sorted(returns.items())
    }
    for code in sorted(codes - set(returns)):
        out[str(code)] = {"$ref": ref, "description": _ERROR_TEXT.get(code, "error")}
    # The node's own fault, or Kubo / Spark / a peer failing: the same one-line error.
    out["5XX"] = {"$ref": ref, "description": "the node, its Kubo, its Spark worker or a peer failed"}
    return out


def _operation(route: Route, limits: Limits) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": _operation_id(route),
        "summary": route.summary,
        "x-cairn-access": route.access,
        "parameters": _parameters(route),
        "responses": _responses(route),
    }
    if route.access == TOKEN:
        op["security"] = [{"token": []}]
    elif route.access == TOKEN_TO_COMPUTE:  # the token is optional: without it, only answers the node has
        op["security"] = [{"token": []}, {}]
    else:
        op["security"] = []
    body = _body(route, limits)
    if body is not None:
        op["requestBody"] = body
    return op


def document(routes: Iterable[Route], limits: Limits, version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(_doc_path(route.path), {})[route.method.lower()] = _operation(route, limits)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Cairn node API",
            "version": version,
            "description": "Generated from the node's route table (node/faces/api/server.py ROUTES); see docs/api.md.",
        },
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "responses": {
                "Error": {
                    "description": "an error: its type and a one-line message",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
            },
            "securitySchemes": {
                "token": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the node's API token, the content of $CAIRN_HOME/api.token",
                }
            },
        },
    }


def default_document(routes: Iterable[Route], version: str) -> dict[str, Any]:
    """The document a node with the default ``api.*`` settings serves (its caps are in the descriptions)."""
    return document(routes, limits_from(ApiSettings(), token=""), version)


def render(doc: dict[str, Any]) -> str:
    """The committed file's text: stable key order as generated, two-space indents, UTF-8."""
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
