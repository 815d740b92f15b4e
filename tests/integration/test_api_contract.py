"""API contract fuzzing: schemathesis against the node's own ``/api/v0/openapi.json``.

A real node (the session's real Kubo, a real Spark worker) serves its API on a real port from an event loop in a
thread of its own (schemathesis sends with ``requests``, synchronously). It is seeded with a dataset, a query
computed on Spark, a job and a DAG object, so the success answers of routes that take an id are checked too.

- ``test_contract_with_token`` / ``test_contract_without_token``: for every operation of the document, generated
  requests, valid and invalid (derandomized: the same requests every run, ``EXAMPLES`` per operation and phase):
  no 5xx, every status documented, every body matching its schema, every content type declared; with the token,
  schemathesis's ``ignored_auth`` also resends without it and with a wrong one where the document needs it.
- ``test_success_answers_match_the_document`` / ``test_write_answers_match_the_document``: each read route asked
  for a seeded object, and each write route sent a valid body, answers 2xx with a body matching its documented
  schema (random ids reach the 4xx answers only); the result rows are compared with pandas on the source CSV.
- ``test_values_outside_the_document_are_refused`` / ``test_nulls_the_cli_sends_are_documented``: what the
  fuzzing found (request values the node and its document disagreed on), each failing on the code before.
- ``test_every_documented_write_route_refuses_a_missing_or_wrong_token``: the write routes are those the DOCUMENT
  marks (a ``security`` requirement with no empty alternative), so a new route cannot skip the check; each refuses
  a missing, a wrong and a non-Bearer token with 401 whatever valid body is generated for it, storing nothing.
- ``test_the_committed_document_is_current``: ``docs/openapi.json`` is what the route table generates.

``scripts/fuzz_api.py --examples N`` runs this file with more examples (``CAIRN_CONTRACT_EXAMPLES``) and prints
the counts (``CAIRN_CONTRACT_REPORT``).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import jsonschema_rs
import pandas as pd
import pytest
import requests
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from schemathesis.config import SchemathesisConfig

from node import __version__
from node.adapters.identity import did_key, generate
from node.adapters.ipfs import ManagedKubo
from node.core import Node
from node.faces.api import create_app
from node.faces.api.openapi import COMMITTED, default_document, render
from node.faces.api.server import _FORMATS, ROUTES
from tests.fixtures.inprocess import node_settings

T = TypeVar("T")
EXAMPLES = int(os.environ.get("CAIRN_CONTRACT_EXAMPLES", "6"))  # per operation and phase: bounded in `make test`
REPORT = os.environ.get("CAIRN_CONTRACT_REPORT")  # where scripts/fuzz_api.py reads the counts
CSV = b"city,pop,founded\nParis,2100000,-250\nLyon,520000,-43\nNice,340000,-350\n"
SEED_SQL = {"sql": "SELECT city, pop FROM c WHERE pop > 400000", "inputs": {"c": "cities"}}
SEED_PIPELINE = {"pipeline": {"name": "big", "steps": [{"name": "big", **SEED_SQL}]}}  # the seeded query: a hit
COUNTS: Counter[str] = Counter()  # requests sent, by test and status class


class ServedNode:
    """A real ``Node`` served by aiohttp on 127.0.0.1:<free port> from an event loop in its own thread."""

    def __init__(self, home: Path, kubo_api: ManagedKubo) -> None:
        self.home, self.kubo_api = home, kubo_api
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="contract-node", daemon=True)
        self.url = ""
        self.token = ""
        self.seeded: dict[str, str] = {}

    def __enter__(self) -> ServedNode:
        self._thread.start()
        if not self._ready.wait(180) or self._error is not None:
            raise RuntimeError(f"the node did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(120)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            # /ipfs/ relays the Kubo's gateway (docs/gateway.md), as on a node that manages its Kubo
            gateway = {"ipfs.gateway": self.kubo_api.gateway_url or ""}
            settings_ = node_settings(self.home, self.kubo_api, **gateway)
            async with Node.running(settings_) as node:
                self.node, self.token = node, node.home.token()
                runner = web.AppRunner(create_app(node, self.token, settings_.api.max_upload_bytes))
                await runner.setup()
                await web.TCPSite(runner, "127.0.0.1", 0).start()
                self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
                node.listening(api=self.url)
                self._ready.set()
                await self._stop.wait()
                node.stopped_listening()
                await runner.cleanup()
        except BaseException as e:  # reported to the test thread, which fails with it
            self._error = e
            self._ready.set()
            raise

    def on_loop(self, fn: Callable[[], T]) -> T:
        """``fn()`` run on the node's loop (the index is the loop thread's), its value returned here."""
        done: Future[T] = Future()
        self._loop.call_soon_threadsafe(lambda: done.set_result(fn()))
        return done.result(60)

    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token if token is None else token}"}

    def stored(self) -> tuple[int, int, int, int]:
        """What a refused write must not change: datasets, executions, trusted keys, computed queries."""
        node = self.node
        return self.on_loop(
            lambda: (
                node.index.count("datasets"),
                node.index.count("executions"),
                len(node.index.trust.trusted()),
                node.resolver.computed,
            )
        )


def _seed(node: ServedNode) -> None:
    """A dataset, a query computed on the real Spark worker, a finished job and a DAG object."""
    post = requests.Session()
    post.headers.update(node.auth())
    r = post.post(f"{node.url}/api/v0/datasets", params={"name": "cities", "filename": "c.csv"}, data=CSV)
    assert r.status_code == 201, r.text
    ds = r.json()
    r = post.post(f"{node.url}/api/v0/query", json=SEED_SQL, timeout=600)
    assert r.status_code == 200 and r.json()["source"] == "computed", r.text
    answer = r.json()
    r = post.post(f"{node.url}/api/v0/query", json={**SEED_SQL, "wait": False})
    assert r.status_code == 202, r.text
    r2 = post.post(f"{node.url}/api/v0/dag", json={"a": [1, "x", {"b": None}]})
    assert r2.status_code == 200, r2.text
    r3 = post.post(f"{node.url}/api/v0/pipelines", json=SEED_PIPELINE)
    assert r3.status_code == 200 and r3.json()["computed"] == 0, r3.text
    types = _seed_types(post, node.url, r2.json()["cid"])
    linked = post.post(f"{node.url}/api/v0/dag", json={"s": {"/": ds["slices"][0]["cid"]}})  # a path: /ipfs/CID/s
    assert linked.status_code == 200, linked.text
    node.seeded = {
        "ref": "cities",
        "dataset": "cities",
        "head": ds["head"],
        "slice": ds["slices"][0]["cid"],
        "execution": answer["execution"],
        "job": r.json()["job"],
        "dag": r2.json()["cid"],
        "linked": linked.json()["cid"],
        **types,
    }


def _ts(**fields: Any) -> dict[str, Any]:
    """A Transform.Storage object's common fields (docs/provenance.md "Types")."""
    return {"creator": None, "protocol_name": "transform.storage", "protocol_version": "2.0.0", **fields}


def _seed_types(post: requests.Session, url: str, dag: str) -> dict[str, str]:
    """A JSON Schema type the seeded DAG object is a term of, and an asset saying so."""
    schema = post.post(f"{url}/api/v0/dag", json={"type": "object", "required": ["a"]}).json()["cid"]
    r = post.post(f"{url}/api/v0/types", json=_ts(cid={"/": schema}, type_checking="json-schema"))
    assert r.status_code == 200, r.text
    type_cid = r.json()["cid"]
    r = post.post(f"{url}/api/v0/types", json=_ts(payload={"/": dag}, template={"/": type_cid}))
    assert r.status_code == 200, r.text
    return {"type": type_cid, "asset": r.json()["cid"]}


@pytest.fixture(scope="module")
def served(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedNode]:
    with ServedNode(tmp_path_factory.mktemp("contract") / "node", kubo_session) as node:
        _seed(node)
        yield node
    if REPORT:
        Path(REPORT).write_text(json.dumps(dict(COUNTS), sort_keys=True))


def _config() -> SchemathesisConfig:
    """Derandomized and bounded; every check but ``positive_data_acceptance`` (a generated CID, SQL or DID that
    fits its schema is still not one the node holds: a 4xx is right) and the stateful phase (no links declared)."""
    return SchemathesisConfig.from_dict(
        {
            "seed": 15,
            "generation": {
                "max-examples": EXAMPLES,
                "deterministic": True,
                "mode": "all",
                # The token is the test's to send or not (below), not a generated header.
                "with-security-parameters": False,
                # Undeclared query parameters are ignored, as by most HTTP APIs: not a contract violation.
                "allow-extra-parameters": False,
            },
            "phases": {"stateful": {"enabled": False}},
            "checks": {"positive_data_acceptance": {"enabled": False}},
        }
    )


# The document generated from the route table, as a node with the default settings serves it (the served one is
# compared with it below): loaded at collection, so each operation is a test of its own.
DOCUMENT = default_document(ROUTES, __version__)
schema = schemathesis.openapi.from_dict(DOCUMENT, config=_config())
_SETTINGS = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)


def _count(test: str, status: int) -> None:
    COUNTS[f"{test}.requests"] += 1
    COUNTS[f"{test}.{status // 100}xx"] += 1


@schema.parametrize()
@_SETTINGS
def test_contract_with_token(case: Any, served: ServedNode) -> None:
    response = case.call_and_validate(base_url=served.url, headers=served.auth(), timeout=120)
    _count("with_token", response.status_code)


@schema.parametrize()
@_SETTINGS
def test_contract_without_token(case: Any, served: ServedNode) -> None:
    response = case.call_and_validate(base_url=served.url, timeout=120)
    _count("without_token", response.status_code)
    if case.operation.definition.raw.get("x-cairn-access") == "token":
        assert response.status_code in (401, 404, 405), (case.method, case.path, response.status_code)


# -- success answers on seeded objects -------------------------------------------------------------------------


def _documented(method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> bool:
    """Whether the document allows this JSON body and these query values for the operation."""
    op = DOCUMENT["paths"][path][method.lower()]
    checks = [(p["schema"], v) for p in op["parameters"] for k, v in (query or {}).items() if p["name"] == k]
    content = op.get("requestBody", {}).get("content", {})
    if body is not None and "application/json" in content:
        checks.append((content["application/json"]["schema"], body))
    return all(jsonschema_rs.validator_for(sch).is_valid(value) for sch, value in checks)


def _call(served: ServedNode, method: str, path: str, *, token: str | None = None, **parts: Any) -> Any:
    """One explicit request through schemathesis, valid per the document: sent, then its answer checked against
    the document like generated ones."""
    assert _documented(method, path, parts.get("body"), parts.get("query")), (method, path, parts)
    case = schema[path][method].Case(**parts)
    headers = served.auth(token) if token != "" else {}
    response = case.call_and_validate(base_url=served.url, headers=headers, timeout=300)
    _count("explicit", response.status_code)
    return response


def _reads(s: dict[str, str]) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """Every open GET, with the seeded objects as its path parameters and each output format."""
    formats = [{"format": f} for f in _FORMATS]
    return [
        ("/healthz", {}, {}),
        ("/metrics", {}, {}),
        ("/api/v0/openapi.json", {}, {}),
        ("/api/v0/node", {}, {}),
        ("/api/v0/dag/{cid}", {"cid": s["dag"]}, {}),
        ("/api/v0/dag/{cid}", {"cid": s["slice"]}, {}),  # not DAG-CBOR: its bytes, application/octet-stream
        ("/api/v0/datasets", {}, {}),
        ("/api/v0/datasets/{ref}", {"ref": s["ref"]}, {}),
        ("/api/v0/datasets/{ref}/log", {"ref": s["ref"]}, {}),
        *(("/api/v0/datasets/{ref}/data", {"ref": s["ref"]}, f) for f in formats),
        ("/api/v0/trust", {}, {}),
        ("/api/v0/announcements", {}, {}),
        ("/api/v0/jobs/{id}", {"id": s["job"]}, {}),
        ("/api/v0/jobs/{id}/events", {"id": s["job"]}, {}),
        ("/api/v0/executions/{cid}", {"cid": s["execution"]}, {}),
        *(("/api/v0/executions/{cid}/data", {"cid": s["execution"]}, f) for f in formats),
        ("/odf/{dataset}/refs/head", {"dataset": s["dataset"]}, {}),
        ("/odf/{dataset}/blocks/{cid}", {"dataset": s["dataset"], "cid": s["head"]}, {}),
        ("/odf/{dataset}/data/{cid}", {"dataset": s["dataset"], "cid": s["slice"]}, {}),
        ("/ipfs/{cid}", {"cid": s["dag"]}, {}),
        ("/ipfs/{cid}", {"cid": s["slice"]}, {}),
        ("/ipfs/{cid}/{path}", {"cid": s["linked"], "path": "s"}, {}),
        ("/ipfs/{cid}", {"cid": s["slice"]}, {"format": "raw"}),
        ("/ipfs/{cid}", {"cid": s["head"]}, {"format": "car"}),
        ("/api/v0/types/check", {}, {"ref": s["dag"], "type": s["type"]}),
        ("/api/v0/types/asset", {}, {"cid": s["asset"]}),
        ("/api/v0/lineage/{cid}", {"cid": s["execution"]}, {}),
        ("/api/v0/lineage/{cid}", {"cid": s["ref"]}, {}),
        ("/api/v0/proof/{cid}", {"cid": s["execution"]}, {}),
        ("/api/v0/pipelines/{name}", {"name": "big"}, {}),
        ("/", {}, {}),  # the web page (docs/web.md) and its files
        *(("/ui/{file}", {"file": f}, {}) for f in ("index.html", "app.js", "app.css", "icon.svg")),
    ]


def test_success_answers_match_the_document(served: ServedNode) -> None:
    seen = set()
    for path, params, query in _reads(served.seeded):
        response = _call(served, "GET", path, token="", path_parameters=params, query=query)
        assert response.status_code == 200, (path, params, query, response.status_code, response.text[:300])
        seen.add(path)
    documented_gets = {p for p, ops in DOCUMENT["paths"].items() if "get" in ops}
    assert documented_gets - seen == {"/api/v0/peers"}  # peers are off on this node: its 409 is documented
    response = _call(served, "GET", "/api/v0/peers", token="")
    assert response.status_code == 409 and response.json()["error"]["type"] == "PeersDisabled"
    # The oracle for the rows: pandas on the CSV the dataset was made of.
    frame = pd.read_csv(io.BytesIO(CSV))
    got = _call(
        served, "GET", "/api/v0/executions/{cid}/data", token="", path_parameters={"cid": served.seeded["execution"]}
    )
    expected = frame[frame["pop"] > 400000][["city", "pop"]]
    assert sorted(map(tuple, pd.read_csv(io.StringIO(got.text)).values.tolist())) == sorted(
        map(tuple, expected.values.tolist())
    )


def test_write_answers_match_the_document(served: ServedNode) -> None:
    """Each write route's success answer, on real Kubo and Spark, matches its documented schema."""
    s = served.seeded
    key = did_key(generate().public_bytes)
    writes: list[tuple[str, str, dict[str, Any], int]] = [
        ("POST", "/api/v0/query", {"body": SEED_SQL, "media_type": "application/json"}, 200),
        ("POST", "/api/v0/query", {"body": {**SEED_SQL, "wait": False}, "media_type": "application/json"}, 202),
        ("POST", "/api/v0/dag", {"body": [1, "two", None], "media_type": "application/json"}, 200),
        ("POST", "/api/v0/pipelines", {"body": SEED_PIPELINE, "media_type": "application/json"}, 200),
        (
            "POST",
            "/api/v0/pipelines",
            {"body": {**SEED_PIPELINE, "wait": False}, "media_type": "application/json"},
            202,
        ),
        ("POST", "/api/v0/trust", {"body": {"key": key}, "media_type": "application/json"}, 200),
        ("DELETE", "/api/v0/trust", {"body": {"key": key}, "media_type": "application/json"}, 200),
        (
            "POST",
            "/api/v0/holium/import",
            {"query": {"format": "json"}, "body": b'{"a": [1, 2]}', "media_type": "application/octet-stream"},
            200,
        ),
        (
            "POST",
            "/api/v0/datasets",
            {"query": {"name": "towns", "filename": "t.csv"}, "body": CSV, "media_type": "application/octet-stream"},
            201,
        ),
        (
            "POST",
            "/api/v0/datasets",
            {"query": {"to": "towns", "filename": "t.csv"}, "body": CSV, "media_type": "application/octet-stream"},
            200,
        ),
        ("DELETE", "/api/v0/jobs/{id}", {"path_parameters": {"id": s["job"]}}, 200),
        (
            "POST",
            "/api/v0/types",
            {"body": _ts(cid=None, type_checking="json-schema"), "media_type": "application/json"},
            200,
        ),
        (
            "POST",
            "/api/v0/verify",
            {"body": {"cid": s["execution"], "offline": True, "recursive": True}, "media_type": "application/json"},
            200,
        ),
        # recomputed (docs/provenance.md "Verify (recompute)"): the report, and as a job
        (
            "POST",
            "/api/v0/verify",
            {"body": {"cid": s["execution"], "wait": True}, "media_type": "application/json"},
            200,
        ),
        ("POST", "/api/v0/verify", {"body": {"cid": s["execution"]}, "media_type": "application/json"}, 202),
    ]
    for method, path, parts, status in writes:
        response = _call(served, method, path, **parts)
        assert response.status_code == status, (method, path, response.status_code, response.text[:300])


# -- fixes found by the fuzzing: each failed on the code before them ---------------------------------------------


@pytest.mark.parametrize(
    "method, path, parts",
    [
        ("POST", "/api/v0/dag", {"params": {"pin": "maybe"}, "json": {"a": 1}}),  # was pinned (200)
        ("POST", "/api/v0/query", {"json": {**SEED_SQL, "trust": "AAA", "wait": False}}),  # was a job (202)
        ("POST", "/api/v0/query", {"json": {**SEED_SQL, "wait": "no"}}),  # was answered (200)
        ("POST", "/api/v0/query", {"json": {**SEED_SQL, "wait": 0}}),  # was answered (200)
        ("POST", "/api/v0/query", {"json": {**SEED_SQL, "format": "csv"}}),  # was answered, as JSON (200)
    ],
)
def test_values_outside_the_document_are_refused(served: ServedNode, method: str, path: str, parts: Any) -> None:
    assert not _documented(method, path, parts.get("json"), parts.get("params"))
    response = requests.request(method, served.url + path, headers=served.auth(), timeout=300, **parts)
    assert response.status_code == 400 and response.json()["error"]["type"] == "InvalidInput", response.text


@pytest.mark.parametrize(
    "parts", [{"json": {**SEED_SQL, "format": "csv"}}, {"json": SEED_SQL, "params": {"format": "csv"}}]
)
def test_a_query_asked_for_csv_is_told_where_csv_is(served: ServedNode, parts: Any) -> None:
    """The query route answers JSON only: a "format" it was sent is refused, naming the route that gives CSV."""
    response = requests.post(served.url + "/api/v0/query", headers=served.auth(), timeout=300, **parts)
    error = response.json()["error"]
    assert response.status_code == 400 and error["type"] == "InvalidInput", response.text
    assert "format" in error["message"] and "/data?format=csv" in error["message"], error


def test_nulls_the_cli_sends_are_documented(served: ServedNode) -> None:
    """`cairn query` sends ``"trust": null`` and ``"limit": null``: the document allows them (it did not)."""
    body = {**SEED_SQL, "trust": None, "limit": None}
    response = _call(served, "POST", "/api/v0/query", body=body, media_type="application/json")
    assert response.status_code == 200 and response.json()["source"] == "local"


# -- the token, for every write route the document declares -----------------------------------------------------


def _write_operations() -> list[Any]:
    """Operations whose ``security`` needs the token (no empty alternative), read from the DOCUMENT."""
    ops = [op.ok() for op in schema.get_all_operations()]
    return [op for op in ops if op.definition.raw.get("security") and {} not in op.definition.raw["security"]]


def test_the_document_marks_every_non_get_route_as_a_write() -> None:
    writes = {(op.method.upper(), op.path) for op in _write_operations()}
    for path, ops in DOCUMENT["paths"].items():
        for method, op in ops.items():
            if method not in ("get", "head") and op["x-cairn-access"] != "token-to-compute":
                assert (method.upper(), path) in writes, (method, path)
    assert ("POST", "/api/v0/datasets") in writes and ("DELETE", "/api/v0/jobs/{id}") in writes


@pytest.mark.parametrize("token", ["", "wrong", "x"], ids=["missing", "wrong", "not-bearer"])
def test_every_documented_write_route_refuses_a_missing_or_wrong_token(served: ServedNode, token: str) -> None:
    before = served.stored()
    for op in _write_operations():

        @given(case=op.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def refused(case: Any) -> None:
            headers = {} if token == "" else {"Authorization": token if token == "x" else f"Bearer {token}"}
            response = case.call(base_url=served.url, headers=headers, timeout=60)
            _count("token", response.status_code)
            assert response.status_code == 401, (case.method, case.path, response.status_code, response.text[:200])
            assert response.json()["error"]["type"] == "Unauthorized"

        refused()
    assert served.stored() == before  # nothing stored, nothing computed


# -- the committed document -------------------------------------------------------------------------------------


def test_the_committed_document_is_current(served: ServedNode) -> None:
    """docs/openapi.json is the table's document (rewrite it with scripts/openapi_doc.py); the node serves it."""
    assert COMMITTED.read_text() == render(DOCUMENT), "docs/openapi.json is stale: run scripts/openapi_doc.py"
    assert requests.get(f"{served.url}/api/v0/openapi.json", timeout=30).json() == DOCUMENT
