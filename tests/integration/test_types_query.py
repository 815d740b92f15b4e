"""A query that declares its output type: an in-process node on the session's real Kubo with its
real Spark worker (one for the module). The result's structure, with the column names the query gives, is checked
with Algorithm 3: a term answers as usual (and says so in ``type``), a mismatch is a 422 ``TypeMismatch`` naming
the spec's code (the execution stays recorded), and a type that is no type is a 400 before anything is computed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from node.domain.model import Structure, cid_str, dagjson
from node.domain.model.types import Type
from tests.fixtures.inprocess import add_csv, cli, inprocess_node, query, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")
CITIES = b"city,pop\nParis,2100000\nLyon,520000\nNice,340000\n"
SQL = "SELECT city, pop FROM c WHERE pop > 400000"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def typed(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    """The node, its client, and three stored types: the result's structure by name, another schema, and the
    result's shape by position."""
    async with inprocess_node(tmp_path_factory.mktemp("typed") / "n", kubo_session) as (node, client):
        await node.spark.ensure()
        await add_csv(client, "cities", CITIES)
        types = {}
        for label, checking, schema in (
            ("named", "arrow-schema", (("city", "utf8"), ("pop", "int64"))),
            ("other", "arrow-schema", (("town", "utf8"), ("pop", "int64"))),
            ("positional", "arrow-schema-positional", (("col_0", "utf8"), ("col_1", "int64"))),
        ):
            structure = await node.dag_put(Structure("parquet", schema).to_ipld())
            body = dagjson.dumps(Type(type_checking=checking, schema=structure).to_ipld())
            resp = await client.post("/api/v0/types", data=body, headers={"Content-Type": "application/json"})
            types[label] = (await resp.json())["cid"]
        yield {"node": node, "client": client, **types}


async def test_a_result_of_the_declared_type_answers(typed: dict[str, Any]) -> None:
    for label in ("named", "positional"):
        status, out = await query(typed["client"], {"sql": SQL, "inputs": {"c": "cities"}, "type": typed[label]})
        assert status == 200, out
        assert out["type"] == {
            "result": True,
            "code": None,
            "protocol": "transform.storage",
            "protocol_version": "2.0.0",
            "type": typed[label],
        }
        assert sorted(r[0] for r in out["rows"]) == ["Lyon", "Paris"]


async def test_a_mismatch_is_a_422_and_the_execution_is_kept(typed: dict[str, Any]) -> None:
    client = typed["client"]
    status, out = await query(client, {"sql": SQL, "inputs": {"c": "cities"}, "type": typed["other"]})
    assert status == 422 and out["error"]["type"] == "TypeMismatch", out
    message = out["error"]["message"]
    assert message.startswith(
        f"the result is not a term of the declared type {typed['other']}: "
        "structure mismatch at column 0: D has city utf8, T has town utf8 (execution "
    ), message
    execution = message.rsplit("GET /api/v0/executions/", 1)[1].rstrip(")")
    assert (await client.get(f"/api/v0/executions/{execution}")).status == 200
    status, job = await query(client, {"sql": SQL, "inputs": {"c": "cities"}, "type": typed["other"], "wait": False})
    assert status == 202

    async def failed() -> dict[str, Any] | None:
        view = await (await client.get(f"/api/v0/jobs/{job['job']}")).json()
        return view if view["state"] != "running" else None

    view = await wait_for(failed, 120, "the job to end")
    assert view["state"] == "failed" and view["error"]["type"] == "TypeMismatch" and view["error"]["status"] == 422


async def test_a_bad_type_is_refused_before_computing(typed: dict[str, Any]) -> None:
    node, client = typed["node"], typed["client"]
    computed = node.resolver.computed
    fresh = "SELECT city FROM c WHERE pop < 400000"  # never asked: it would compute
    structure = cid_str(await node.dag_put(Structure("parquet", (("city", "utf8"),)).to_ipld()))
    for type_ref, message in (
        ("nope", "invalid CID"),
        (structure, f"{structure} is not a Transform.Storage type"),
        (7, '"type" must be the CID of a Transform.Storage type, as a string'),
    ):
        status, out = await query(client, {"sql": fresh, "inputs": {"c": "cities"}, "type": type_ref})
        assert (status, message in out["error"]["message"]) == (400, True), out
    assert node.resolver.computed == computed


async def test_cli_query_type(typed: dict[str, Any]) -> None:
    node = typed["node"]
    rc, _, err = await cli(node, "query", SQL, "--input", "c=cities", "--type", typed["named"])
    assert rc == 0, err.decode()
    rc, out, err = await cli(node, "query", SQL, "--input", "c=cities", "--type", typed["other"])
    assert (rc, out) == (1, b"")
    assert err.decode().startswith("error: the result is not a term of the declared type"), err.decode()
