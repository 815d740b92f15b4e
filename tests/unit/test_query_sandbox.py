"""The canonicalizer in bounded child processes (node/domain/sql/sandbox.py), on real child
processes: the same answers as the in-process canonicalizer (the oracle), a budget that kills the child, refusals
remembered so a repeated statement never reaches a child, single-flight, and children that end with the sandbox."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.domain.sql import canonicalize
from node.domain.sql.sandbox import Sandbox
from node.support.errors import QueryRefused

ONE = {"t": [("id", "int64"), ("name", "utf8"), ("x", "float64")]}
TWO = {**ONE, "u": [("id", "int64"), ("v", "utf8")]}
# Slow and within every structural limit: about 3 s of CPU in the canonicalizer.
SLOW = "SELECT CASE " + " ".join(f"WHEN id = {i} THEN {i}" for i in range(3000)) + " END FROM t"

SAMPLES = [
    ("SELECT id, name FROM t WHERE x > 1.5 ORDER BY name", ONE),
    ("SELECT name, count(*) AS n FROM t GROUP BY name", ONE),
    ("SELECT t.id, u.v FROM t JOIN u ON t.id = u.id", TWO),
    ("WITH c AS (SELECT id FROM t) SELECT id FROM c UNION SELECT id FROM u", TWO),
    ("SELECT id, row_number() OVER (PARTITION BY name ORDER BY x) FROM t", ONE),
    ("SELECT rand() FROM t", ONE),
    ("SELECT nope FROM t", ONE),
    ("DROP TABLE t", ONE),
    ("SELECT id FROM t WHERE " + " OR ".join(["id = 1"] * 600), ONE),
]


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def shared(loop: asyncio.AbstractEventLoop) -> Iterator[Sandbox]:
    sandbox = Sandbox(timeout=60)
    yield sandbox
    loop.run_until_complete(sandbox.close())


def outcome(run: Any) -> Any:
    """What a canonicalization gives: the query, or the refusal's rule and message."""
    try:
        return run()
    except QueryRefused as e:
        return ("refused", e.rule, str(e))


def pids(sandbox: Sandbox) -> set[int]:
    return {c.proc.pid for c in [*sandbox._idle, *sandbox._busy]}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("sql,inputs", SAMPLES, ids=[s[:30] for s, _ in SAMPLES])
def test_same_outcome_as_in_process(loop: asyncio.AbstractEventLoop, shared: Sandbox, sql: str, inputs: Any) -> None:
    here = outcome(lambda: canonicalize(sql, inputs))
    there = outcome(lambda: loop.run_until_complete(shared.canonicalize(sql, inputs)))
    assert there == here


@settings(max_examples=40, deadline=None)
@given(
    columns=st.lists(st.sampled_from(["id", "name", "x", "id + 1", "upper(name)"]), min_size=1, max_size=4),
    where=st.sampled_from(["", " WHERE id > 3", " WHERE name LIKE 'a%' OR x < 0", " WHERE nope = 1"]),
    order=st.sampled_from(["", " ORDER BY 1", " ORDER BY name DESC", " LIMIT 5"]),
)
def test_generated_statements_match_in_process(
    loop: asyncio.AbstractEventLoop, shared: Sandbox, columns: list[str], where: str, order: str
) -> None:
    sql = f"SELECT {', '.join(columns)} FROM t{where}{order}"
    there = outcome(lambda: loop.run_until_complete(shared.canonicalize(sql, ONE)))
    assert there == outcome(lambda: canonicalize(sql, ONE))


def test_budget_kills_the_child_and_the_refusal_is_remembered(loop: asyncio.AbstractEventLoop) -> None:
    sandbox = Sandbox(timeout=60)
    run = loop.run_until_complete
    try:
        run(sandbox.canonicalize("SELECT id FROM t", ONE))  # a child is up (its start is not under the budget)
        (pid,) = pids(sandbox)
        sandbox.timeout = 0.5
        with pytest.raises(QueryRefused, match=r"too-complex.*longer than 0.5 s \(query.canonicalize_timeout\)"):
            run(sandbox.canonicalize(SLOW, ONE))
        assert not alive(pid) and pid not in pids(sandbox)
        calls = sandbox.child_calls
        with pytest.raises(QueryRefused, match=r"longer than 0\.5 s"):  # again: from the memo, no child asked
            run(sandbox.canonicalize(SLOW, ONE))
        assert sandbox.child_calls == calls and sandbox.memo_hits == 1
        assert run(sandbox.canonicalize("SELECT name FROM t", ONE)) == canonicalize("SELECT name FROM t", ONE)
        assert sandbox.child_calls == calls + 1  # a new child answered
    finally:
        run(sandbox.close())


def test_memo_is_keyed_by_the_inputs_structures_too(loop: asyncio.AbstractEventLoop) -> None:
    sandbox = Sandbox(timeout=60)
    run = loop.run_until_complete
    try:
        for _ in range(2):
            with pytest.raises(QueryRefused, match="unknown-column"):
                run(sandbox.canonicalize("SELECT w FROM t", ONE))
        assert (sandbox.child_calls, sandbox.memo_hits) == (1, 1)
        # Other input columns: another question, asked again (here it is answered).
        cq = run(sandbox.canonicalize("SELECT w FROM t", {"t": [("w", "int64")]}))
        assert cq == canonicalize("SELECT w FROM t", {"t": [("w", "int64")]})
        assert sandbox.child_calls == 2
    finally:
        run(sandbox.close())


def test_identical_statements_in_flight_share_one_child(loop: asyncio.AbstractEventLoop) -> None:
    sandbox = Sandbox(timeout=60)
    sql = "SELECT id, x FROM t WHERE name = 'shared'"

    async def five() -> list[Any]:
        return await asyncio.gather(*(sandbox.canonicalize(sql, ONE) for _ in range(5)))

    try:
        answers = loop.run_until_complete(five())
        assert answers == [canonicalize(sql, ONE)] * 5
        assert sandbox.child_calls == 1
    finally:
        loop.run_until_complete(sandbox.close())


def test_a_child_killed_while_idle_is_replaced(loop: asyncio.AbstractEventLoop) -> None:
    sandbox = Sandbox(timeout=60)
    run = loop.run_until_complete
    try:
        run(sandbox.canonicalize("SELECT id FROM t", ONE))
        (pid,) = pids(sandbox)
        os.kill(pid, signal.SIGKILL)  # from outside, between two statements
        assert run(sandbox.canonicalize("SELECT x FROM t", ONE)) == canonicalize("SELECT x FROM t", ONE)
        assert pid not in pids(sandbox) and len(pids(sandbox)) == 1
    finally:
        run(sandbox.close())


def test_close_ends_every_child(loop: asyncio.AbstractEventLoop) -> None:
    sandbox = Sandbox(timeout=60)

    async def two_at_once() -> None:
        await asyncio.gather(
            sandbox.canonicalize("SELECT id FROM t", ONE), sandbox.canonicalize("SELECT name FROM t", ONE)
        )

    loop.run_until_complete(two_at_once())
    started = pids(sandbox)
    assert started
    loop.run_until_complete(sandbox.close())
    assert not any(alive(p) for p in started)


ORPHAN = """
import asyncio, os, sys
from node.domain.sql.sandbox import Sandbox
async def main():
    sandbox = Sandbox()
    await sandbox.canonicalize("SELECT id FROM t", {"t": [("id", "int64")]})
    print([c.proc.pid for c in sandbox._idle][0], flush=True)
    os.kill(os.getpid(), 9)
asyncio.run(main())
"""


def test_a_child_ends_when_its_node_is_killed() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", ORPHAN], check=False, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 60  # a deadline to poll against, not a measurement
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the canonicalizer child outlived its node"


def test_warm_starts_one_child_that_the_first_statement_uses(loop: asyncio.AbstractEventLoop) -> None:
    """A node warms its canonicalizer at start: the first query finds a child ready (no start, no first-use cost),
    and a second warm-up does nothing."""
    sandbox = Sandbox()
    try:
        loop.run_until_complete(sandbox.warm())
        assert sandbox.child_calls == 1 and sandbox.memo_hits == 0
        loop.run_until_complete(sandbox.warm())
        assert sandbox.child_calls == 1
        started = loop.run_until_complete(_children(sandbox))
        got = loop.run_until_complete(sandbox.canonicalize(*SAMPLES[0]))
        assert got == canonicalize(*SAMPLES[0])
        assert sandbox.child_calls == 2 and loop.run_until_complete(_children(sandbox)) == started == 1
    finally:
        loop.run_until_complete(sandbox.close())


async def _children(sandbox: Sandbox) -> int:
    return len(sandbox._idle) + len(sandbox._busy)
