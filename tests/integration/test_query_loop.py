"""One hostile statement no longer freezes the node, on a real in-process node over the
session's real Kubo: while a statement is being refused, ``/healthz`` keeps answering on the same event loop; the
same statement again is refused from the memo without reaching a child process; a statement the canonicalizer
works on too long is cut by ``query.canonicalize_timeout``; normal statements canonicalize as in-process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from node.domain.model import cid_str
from node.domain.sql import canonicalize
from node.domain.sql.token_limits import MAX_BOOLEAN_TERMS
from tests.fixtures.inprocess import InNode, add_csv, inprocess_node, query

pytestmark = pytest.mark.asyncio(loop_scope="module")

SALES = b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\n"
CHAIN_100KB = "SELECT amount FROM sales WHERE " + " OR ".join(["amount = 1"] * 7_000)
# Within every structural limit, and seconds of canonicalizer work: only the time budget stops it.
SLOW = "SELECT CASE " + " ".join(f"WHEN amount = {i} THEN {i}" for i in range(3000)) + " END FROM sales"
BUDGET = 1.0  # set on the node for the slow statement; the node starts with a generous SETTING
SETTING = 30.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[InNode]:
    home = tmp_path_factory.mktemp("loop") / "node"
    async with inprocess_node(home, kubo_session, **{"query.canonicalize_timeout": SETTING}) as pair:
        await add_csv(pair[1], "sales", SALES)
        yield pair


async def refused_while_polled(pair: InNode, sql: str) -> tuple[int, dict[str, Any], int]:
    """POST the statement and poll /healthz until its answer: (status, body, healthz answers while it was pending)."""
    client = pair[1]
    answered = 0
    pending = asyncio.ensure_future(query(client, {"sql": sql, "inputs": {"sales": "sales"}}))

    async def poll() -> None:
        nonlocal answered
        while not pending.done():
            resp = await asyncio.wait_for(client.get("/healthz"), 60)  # a deadline, not a measurement
            await resp.read()
            if resp.status == 200 and not pending.done():
                answered += 1

    await asyncio.gather(pending, poll())
    status, body = pending.result()
    return status, body, answered


async def test_healthz_answers_while_the_100kb_chain_is_refused(served: InNode) -> None:
    assert 95_000 < len(CHAIN_100KB) <= 100_000
    status, body, answered = await refused_while_polled(served, CHAIN_100KB)
    assert status == 400, body
    assert (
        f"query refused (too-complex): the statement has more than {MAX_BOOLEAN_TERMS} AND/OR"
        in body["error"]["message"]
    )
    # On the event loop (where the canonicalizer once ran) nothing else ran until the refusal: at most the poll in
    # flight.
    assert answered >= 3, answered


async def test_the_same_hostile_statement_is_refused_from_the_memo(served: InNode) -> None:
    node, client = served
    sandbox = node.resolver.canonicalizer
    first = await query(client, {"sql": CHAIN_100KB + " OR amount = 2", "inputs": {"sales": "sales"}})
    calls, hits = sandbox.child_calls, sandbox.memo_hits
    again = await query(client, {"sql": CHAIN_100KB + " OR amount = 2", "inputs": {"sales": "sales"}})
    assert first[0] == again[0] == 400 and first[1]["error"] == again[1]["error"]
    assert sandbox.child_calls == calls and sandbox.memo_hits == hits + 1  # it never reached a child


async def test_the_5000_term_statement_names_the_limit(served: InNode) -> None:
    sql = "SELECT amount FROM sales WHERE " + " OR ".join(["amount = 1"] * 5000)
    status, body = await query(served[1], {"sql": sql, "inputs": {"sales": "sales"}})
    assert status == 400
    assert (
        f"more than {MAX_BOOLEAN_TERMS} AND/OR operators (4999); use IN (…) for long lists" in body["error"]["message"]
    )
    assert "\n" not in body["error"]["message"]


async def test_a_statement_over_the_budget_is_cut_and_the_node_goes_on(served: InNode) -> None:
    node = served[0]
    sandbox = node.resolver.canonicalizer
    assert sandbox.timeout == SETTING  # the setting reaches the node's sandbox
    sandbox.timeout = BUDGET
    try:
        status, body, answered = await refused_while_polled(served, SLOW)
    finally:
        sandbox.timeout = SETTING
    assert status == 400, body
    assert f"longer than {BUDGET:g} s (query.canonicalize_timeout)" in body["error"]["message"]
    assert answered >= 3, answered
    cq = (await node.resolver.prepare("SELECT region FROM sales", {"sales": "sales"}))[0]
    assert cq == canonicalize("SELECT region FROM sales", {"sales": SALES_COLUMNS})


SALES_COLUMNS = [("region", "utf8"), ("product", "utf8"), ("amount", "int64")]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region",
        "SELECT product, amount FROM sales WHERE amount > 3 OR region = 'north'",
        "SELECT DISTINCT region FROM sales",
    ],
)
async def test_normal_statements_hash_as_in_process(served: InNode, sql: str) -> None:
    node, _ = served
    cq, blocks, iv, _ = await node.resolver.prepare(sql, {"sales": "sales"})
    assert cq == canonicalize(sql, {"sales": SALES_COLUMNS})  # the oracle: the canonicalizer in this process
    again = await node.resolver.prepare(sql, {"sales": "sales"})  # from the memo: the same qy_0 and iv_0
    assert cid_str(again[2].query) == cid_str(iv.query) == cid_str(blocks[-1].cid)
