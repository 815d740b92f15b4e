"""Once-per-version work is done after an ingest, not by the first query.

A version's logical hash (the invocation binds it) took a first miss hundreds of milliseconds on a large input.
The node now computes it in the background as soon as a version is added; a query asking at the same time shares
that computation; the figure is the one an independent hasher gives over the version's rows.
"""

from __future__ import annotations

import asyncio
import io
import time

import pyarrow.csv as pacsv

from node.domain.model import parse_cid
from node.services.datasets import LogicalHasher
from tests.fixtures.inprocess import InNode, add_csv

DATA = b"k,v\n" + b"".join(f"{i % 7},{i}\n".encode() for i in range(5000))


async def _facts_recorded(node: object, head: str, deadline: float = 30.0) -> tuple[str, int]:
    index = node.index  # type: ignore[attr-defined]  # a Node: the index is where the facts land
    end = time.monotonic() + deadline
    while (facts := index.catalog.version_facts(head)) is None:
        assert time.monotonic() < end, "the version's logical hash was not recorded after the ingest"
        await asyncio.sleep(0.05)
    return facts  # type: ignore[no-any-return]  # the index's tuple


async def test_an_ingest_records_the_versions_logical_hash_without_a_query(inode: InNode) -> None:
    node, client = inode
    added = await add_csv(client, "numbers", DATA)
    logical, rows = await _facts_recorded(node, added["head"])
    # An independent hasher over the version's rows, and the row count of the CSV itself.
    version = await node.datasets.version(parse_cid(added["head"]))
    own: LogicalHasher | None = None
    async for t in node.datasets.tables(version):
        own = own or LogicalHasher(t.schema)
        own.update(t)
    assert own is not None
    assert (logical, rows) == (str(own.finish()), pacsv.read_csv(io.BytesIO(DATA)).num_rows)


async def test_askers_at_once_share_one_computation(inode: InNode) -> None:
    node, client = inode
    added = await add_csv(client, "shared", DATA)
    await _facts_recorded(node, added["head"])
    version = await node.datasets.version(parse_cid(added["head"]))
    node.index._db.execute("DELETE FROM version_facts WHERE head = ?", (added["head"],))
    calls = 0
    real = node.datasets.hashes._version_hash

    async def counted(v: object) -> tuple[str, int]:
        nonlocal calls
        calls += 1
        return await real(v)  # type: ignore[arg-type]  # a Version

    node.datasets.hashes._version_hash = counted  # type: ignore[method-assign]  # count the computations
    first, second = await asyncio.gather(node.datasets.version_hash(version), node.datasets.version_hash(version))
    assert first == second and calls == 1


async def test_a_remembered_question_follows_a_new_version(inode: InNode) -> None:
    """The hit path remembers each question (statement + versions → qy_0, iv_0): after an ingest moves a dataset's
    head, the same SQL, read by name or by --input, is a new invocation over the new rows, never the old answer."""
    _, client = inode
    await add_csv(client, "growing", b"k,v\n1,10\n2,20\n")
    sql = "SELECT SUM(v) AS total FROM growing"
    asks = [({"sql": sql}, "implicit"), ({"sql": sql, "inputs": {"growing": "growing"}}, "explicit")]
    before = {}
    for body, how in asks:
        for _ in range(2):  # the second is a hit, through the remembered question
            resp = await client.post("/api/v0/query", json=body)
            answer = await resp.json()
            assert resp.status == 200 and answer["rows"] == [[30]], (how, answer)
        before[how] = answer["invocation"]
    resp = await client.post("/api/v0/datasets", params={"to": "growing", "filename": "more.csv"}, data=b"k,v\n3,5\n")
    assert resp.status in (200, 201), await resp.text()
    for body, how in asks:
        resp = await client.post("/api/v0/query", json=body)
        answer = await resp.json()
        assert resp.status == 200 and answer["rows"] == [[35]], (how, answer)
        assert answer["invocation"] != before[how] and answer["source"] in ("computed", "local")
