"""The Arrow Flight SQL face (node/faces/api/flight.py) with a real client: ADBC's Flight SQL driver from PyPI.

A real node (the session's Kubo, a real Spark worker) answers over Flight SQL what it answers over HTTP: the same
query twice is computed once, then a hit (the worker gets no job); the rows equal the HTTP API's; the token rules
are HTTP's; a bad statement is a clear error and the server goes on serving. ADBC calls block, so the test runs
them in a thread: the node's loop (this test's) must stay free to answer them.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
import threading
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import grpc
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pyarrow.parquet as pq
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from node.faces.api import flight
from node.faces.api import flight_proto as proto
from node.faces.api.flight_rpc import Limits
from tests.fixtures.inprocess import InNode, add_csv, ask, inprocess_node, wait_for
from tests.fixtures.nodes import NodeProcess, poll, run_cli

# The async tests share the module's loop (and so its node); the two daemon tests are plain functions.
aio = pytest.mark.asyncio(loop_scope="module")

SALES = b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\n"
SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"
T = TypeVar("T")
# The served node also computes for a peer (test_a_peers_answer_over_flight); its slices are of 256 Ki rows, so
# that a result of a few tens of MB has several (a stream reads one slice while its client holds the one before).
PEERS = {"peers.enabled": True, "datasets.rows_per_slice": 1 << 18}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(
    kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[InNode, str]]:
    """An in-process node with its Flight SQL face on a free port, started as `cairn node start` starts it."""
    async with inprocess_node(tmp_path_factory.mktemp("flight") / "n", kubo_session, **PEERS) as pair:
        node, client = pair
        await node.spark.ensure()
        await add_csv(client, "sales", SALES)
        face = flight.start(node, "127.0.0.1", 0, node.home.token())
        try:
            assert node.flight_url == f"grpc://127.0.0.1:{face.port}"
            yield pair, node.flight_url
        finally:
            await flight.stop(face)


def connect(url: str, token: str | None) -> Any:
    kwargs = {"adbc.flight.sql.authorization_header": f"Bearer {token}"} if token is not None else {}
    return flightsql.connect(url, db_kwargs=kwargs)


def fetch(url: str, token: str | None, sql: str) -> pa.Table:
    with connect(url, token) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(fn, *args)


def meta(table: pa.Table) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items() if k.startswith(b"cairn.")}


@aio
async def test_same_query_twice_second_is_a_hit(served: Any) -> None:
    (node, client), url = served
    token = node.home.token()
    first = await off_loop(fetch, url, token, SQL)
    assert meta(first)["cairn.source"] == "computed"
    jobs = node.worker.jobs_sent
    second = await off_loop(fetch, url, token, SQL)
    assert meta(second)["cairn.source"] == "local" and node.worker.jobs_sent == jobs  # Spark got no job
    assert second.replace_schema_metadata(None).equals(first.replace_schema_metadata(None))
    for key in ("cairn.execution", "cairn.receipt", "cairn.query", "cairn.invocation"):
        assert meta(second)[key] == meta(first)[key]
    http = await ask(client, SQL)  # the HTTP API's answer to the same SQL: the same execution, the same rows
    assert http["execution"] == meta(first)["cairn.execution"] and http["receipt"] == meta(first)["cairn.receipt"]
    assert first.column_names == http["columns"] == ["region", "total"]
    assert [list(r.values()) for r in first.to_pylist()] == http["rows"]


def statement(url: str, token: str, sql: str) -> tuple[fl.FlightInfo, pa.Table]:
    """A plain Flight SQL statement (CommandStatementQuery; ADBC prepares its statements) with pyarrow's client."""
    client = fl.FlightClient(url)
    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])
    try:
        descriptor = fl.FlightDescriptor.for_command(proto.pack("CommandStatementQuery", query=sql))
        info = client.get_flight_info(descriptor, options)
        return info, client.do_get(info.endpoints[0].ticket, options).read_all()
    finally:
        client.close()


@aio
async def test_a_plain_statement_answers_the_same_with_its_provenance(served: Any) -> None:
    (node, client), url = served
    sql = "SELECT product, SUM(amount) AS amount FROM sales WHERE amount > 4 GROUP BY product ORDER BY product"
    info, table = await off_loop(statement, url, node.home.token(), sql)
    http = await ask(client, sql)
    said = json.loads(info.app_metadata)  # what the FlightInfo says of the answer, before any row is read
    assert said["execution"] == http["execution"] and said["source"] == "computed" and http["source"] == "local"
    assert info.total_records == http["row_count"] == table.num_rows == 3
    assert [list(r.values()) for r in table.to_pylist()] == http["rows"]
    assert info.schema.names == table.column_names == ["product", "amount"]
    info, empty = await off_loop(statement, url, node.home.token(), "SELECT region FROM sales WHERE amount > 1000")
    assert info.total_records == empty.num_rows == 0 and empty.column_names == ["region"]  # a stream of no batch


@aio
async def test_without_the_token_a_miss_is_unauthenticated_a_hit_is_open(served: Any) -> None:
    (node, client), url = served
    miss = "SELECT product, COUNT(*) AS n FROM sales GROUP BY product ORDER BY product"
    jobs = node.worker.jobs_sent
    with pytest.raises(adbc_driver_manager.Error) as e:
        await off_loop(fetch, url, None, miss)
    assert "UNAUTHENTICATED" in str(e.value) and "token" in str(e.value)
    with pytest.raises(adbc_driver_manager.Error, match="UNAUTHENTICATED"):
        await off_loop(fetch, url, "not-the-token", miss)  # a wrong token is no token
    assert node.worker.jobs_sent == jobs  # refused before anything ran
    await ask(client, SQL)  # as over HTTP: an answer the node has is open to a client without the token
    hit = await off_loop(fetch, url, None, SQL)
    assert meta(hit)["cairn.source"] == "local" and hit.num_rows == 3


@aio
async def test_a_peers_answer_over_flight(served: Any, kubo_session: ManagedKubo, tmp_path: Any) -> None:
    """Node B, asked over Flight SQL, answers from the claim of a peer whose key it trusts: B's Spark never runs."""
    (a, a_client), _ = served
    sql = "SELECT region, MIN(amount) AS low FROM sales GROUP BY region ORDER BY region"
    computed = await ask(a_client, sql)
    async with inprocess_node(tmp_path / "b", kubo_session, **PEERS) as (b, b_client):
        await add_csv(b_client, "sales", SALES)
        b.peers.trust_add(a.identity.node_key, b.settings.peers.community)
        assert a.network is not None
        await b.peers.connect(a.network.host.addrs()[0])
        face = flight.start(b, "127.0.0.1", 0, b.home.token())
        try:
            table = await off_loop(fetch, b.flight_url, b.home.token(), sql)
        finally:
            await flight.stop(face)
        said = meta(table)
        assert said["cairn.source"] == "peer" and said["cairn.trust"] == "trusted-signer", said
        assert said["cairn.execution"] == computed["execution"] and b.worker.jobs_sent == 0
        assert [list(r.values()) for r in table.to_pylist()] == computed["rows"]


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("SELEC region FROM sales", "query refused"),
        ("SELECT x FROM no_such_dataset", "no_such_dataset"),
    ],
)
@aio
async def test_bad_sql_is_a_clear_error_and_the_server_still_serves(served: Any, sql: str, says: str) -> None:
    (node, _), url = served
    token = node.home.token()
    with pytest.raises(adbc_driver_manager.ProgrammingError) as e:
        await off_loop(fetch, url, token, sql)
    assert "INVALID_ARGUMENT" in str(e.value) and says in str(e.value)
    after = await off_loop(fetch, url, token, "SELECT COUNT(*) AS n FROM sales")
    assert after.column("n").to_pylist() == [5]


@aio
async def test_a_stopping_node_refuses_new_statements(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """After the first Ctrl-C (node/faces/daemon.py: ``Node.begin_stopping``) a statement is UNAVAILABLE, as over HTTP
    (503). A node of its own: a stopping node does not start again."""
    async with inprocess_node(tmp_path / "n", kubo_session) as (node, _):
        face = flight.start(node, "127.0.0.1", 0, node.home.token())
        try:
            node.begin_stopping()
            with pytest.raises(adbc_driver_manager.Error) as e:
                await off_loop(fetch, f"grpc://127.0.0.1:{face.port}", node.home.token(), SQL)
        finally:
            await flight.stop(face)
    assert "Unavailable" in str(e.value) and "the node is stopping" in str(e.value)


@aio
async def test_catalog_lists_datasets(served: Any) -> None:
    (node, _), url = served

    def objects() -> Any:
        with connect(url, node.home.token()) as conn:
            return conn.adbc_get_objects(depth="tables").read_all().to_pylist(), conn.adbc_get_info()

    def columns() -> Any:  # GetTables with include_schema: what JDBC's getColumns (DBeaver's navigator) asks
        with connect(url, None) as conn:
            return conn.adbc_get_table_schema("sales")

    catalogs, info = await off_loop(objects)
    tables = [t["table_name"] for c in catalogs for s in c["catalog_db_schemas"] or [] for t in s["db_schema_tables"]]
    assert "sales" in tables, catalogs
    assert info["vendor_name"] == "cairn"
    schema = await off_loop(columns)
    assert schema.names == ["region", "product", "amount"] and schema.field("amount").type == pa.int64()


def test_daemon_serves_flight_sql_and_stops_it(tmp_path: Any) -> None:
    """`cairn node start` listens for Flight SQL beside the HTTP API, says where (status, node.json), and stops it."""
    n = NodeProcess(tmp_path / "node").start()
    try:
        status, info = n.get("/api/v0/node")
        assert status == 200 and info["flight"].startswith("grpc://127.0.0.1:")
        assert json.loads((n.home / "node.json").read_text())["flight"] == info["flight"]
        assert "flight sql " + info["flight"] in n.cli("status").stdout.decode()
        with connect(info["flight"], (n.home / "api.token").read_text().strip()) as conn:
            assert conn.adbc_get_info()["vendor_name"] == "cairn"
    finally:
        assert n.stop() == 0

    def refused() -> bool:
        try:
            with connect(info["flight"], None) as conn:
                conn.adbc_get_info()
        except adbc_driver_manager.Error:
            return True
        return False

    poll(refused, 10, what="the Flight SQL port to close with the node")


def test_a_flight_port_in_use_stops_node_start_with_one_line(tmp_path: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"CAIRN_SPARK_AUTOSTART": "false", "CAIRN_API_FLIGHT_PORT": str(port)}
        r = run_cli(tmp_path / "h", "node", "start", "--api-port", "0", timeout=120, env=env)
    err = r.stderr.decode().strip().splitlines()
    assert r.returncode != 0 and err[-1] == (
        f"error: Arrow Flight SQL cannot listen on 127.0.0.1:{port} (in use?): set api.flight_port "
        "(CAIRN_API_FLIGHT_PORT; 0 picks a free port) or turn it off with api.flight = false"
    )
    assert not (tmp_path / "h" / "node.json").exists()


# -- what a client cannot do to the node: freeze it, exhaust it, read its internals ----------------------------

SERVICE = "/arrow.flight.protocol.FlightService/"


def raw_call(url: str, method: str, request: bytes, stream: bool = True, headers: Any = None) -> list[bytes]:
    """A Flight RPC with grpcio, bytes both ways (no token unless ``headers`` carry one): what the server sent,
    status and details included (pyarrow's client adds its own context to an error's text)."""
    with grpc.insecure_channel(url.removeprefix("grpc://")) as channel:
        kw: dict[str, Any] = {"timeout": 120, "metadata": headers}
        if method in ("Handshake", "DoPut", "DoExchange"):
            return list(channel.stream_stream(SERVICE + method)(iter([request]), **kw))
        if stream:
            return list(channel.unary_stream(SERVICE + method)(request, **kw))
        return [channel.unary_unary(SERVICE + method)(request, **kw)]


def refused(url: str, method: str, request: bytes, stream: bool = True, headers: Any = None) -> tuple[Any, str]:
    with pytest.raises(grpc.RpcError) as e:
        raw_call(url, method, request, stream, headers)
    return e.value.code(), e.value.details()


def descriptor(command: bytes) -> bytes:
    return fl.FlightDescriptor.for_command(command).serialize()


def tables(url: str, fields: dict[str, Any]) -> list[str]:
    """DoGet(CommandGetTables(fields)) without the token: the table names answered."""
    ticket = fl.Ticket(proto.pack("CommandGetTables", **fields))
    client = fl.FlightClient(url)
    try:
        reader = client.do_get(ticket, fl.FlightCallOptions(timeout=60))
        return list(reader.read_all().column("table_name").to_pylist())
    finally:
        client.close()


def test_a_backtracking_filter_pattern_is_answered_at_once(tmp_path: Any) -> None:
    """A LIKE pattern that a regex translation backtracks on (``%`` × 200 then ``#``: hours per name, on the
    node's loop, where the old face ran it) is matched in linear time on the call's thread, from a client without
    the token; a pattern over ``api.flight_max_pattern`` is INVALID_ARGUMENT; the matches are SQL LIKE's; and
    ``/healthz`` answers. A daemon, so that a frozen node is a failure of this test, not of its process."""
    n = NodeProcess(tmp_path / "node").start()
    try:
        assert n.cli("add", "-", "--name", "sales", "--format", "csv", input=SALES).returncode == 0
        url = n.get("/api/v0/node")[1]["flight"]
        assert tables(url, {"table_name_filter_pattern": "%" * 200 + "#"}) == []
        assert tables(url, {"table_name_filter_pattern": "%" * 200 + "s"}) == ["sales"]
        assert tables(url, {"table_name_filter_pattern": "_a%e_"}) == ["sales"]
        assert tables(url, {"db_schema_filter_pattern": "%" * 200 + "#"}) == []
        assert tables(url, {"db_schema_filter_pattern": "%"}) == ["sales"]
        too_long = proto.pack("CommandGetTables", table_name_filter_pattern="%" * 257)
        code, details = refused(url, "DoGet", fl.Ticket(too_long).serialize())
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details == (
            "a filter pattern has at most 256 characters (api.flight_max_pattern), this one 257"
        )
        assert n.get("/healthz")[0] == 200
    finally:
        n.stop()


def _handle(**fields: Any) -> bytes:
    return fl.Ticket(proto.pack("TicketStatementQuery", statement_handle=json.dumps(fields).encode())).serialize()


NO_EXECUTION = "bafyreigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"  # a CID, of no execution here
BAD_INPUT = [  # (RPC, request bytes, the status, what the one line says)
    ("GetFlightInfo", b"\xff\xff\xff", "INVALID_ARGUMENT", "not a Flight FlightDescriptor"),
    ("GetFlightInfo", fl.FlightDescriptor.for_path("x").serialize(), "INVALID_ARGUMENT", "not a path"),
    ("GetFlightInfo", descriptor(b"\xff\xff"), "INVALID_ARGUMENT", "not a Flight SQL command"),
    ("GetFlightInfo", descriptor(b"\x0a\x0dexample.org/X"), "UNIMPLEMENTED", "not served"),
    ("GetFlightInfo", descriptor(proto.pack("CommandStatementQuery", query=" ")), "INVALID_ARGUMENT", "empty"),
    ("GetFlightInfo", descriptor(proto.pack("CommandStatementQuery", query="SELEC 1")), "INVALID_ARGUMENT", "refused"),
    ("GetFlightInfo", descriptor(proto.pack("CommandStatementQuery", query=SQL + " LIMIT 1")), "UNAUTHENTICATED", ""),
    (
        "GetFlightInfo",
        descriptor(proto.pack("CommandPreparedStatementQuery", prepared_statement_handle=b"\xff")),
        "INVALID_ARGUMENT",
        "handle",
    ),
    (
        "GetFlightInfo",
        descriptor(proto.pack("CommandStatementQuery", query="SELECT 1 -- " + "x" * (2 << 20))),
        "RESOURCE_EXHAUSTED",  # over api.flight_max_message_bytes: refused by gRPC before it is read
        "larger than max",
    ),
    ("DoGet", b"\xff\xff\xff", "INVALID_ARGUMENT", "not a Flight Ticket"),
    ("DoGet", fl.Ticket(b"\xff\xff").serialize(), "INVALID_ARGUMENT", "not a Flight SQL command"),
    ("DoGet", fl.Ticket(proto.pack("CommandGetCatalogs")[:-3]).serialize(), "INVALID_ARGUMENT", "command"),
    ("DoGet", fl.Ticket(proto.pack("CommandStatementQuery", query="x")).serialize(), "INVALID_ARGUMENT", "ticket"),
    ("DoGet", _handle(), "INVALID_ARGUMENT", "statement handle"),
    ("DoGet", _handle(execution={"/": 1}, columns=[]), "INVALID_ARGUMENT", "statement handle"),
    ("DoGet", _handle(execution="bafy", columns=[]), "INVALID_ARGUMENT", "statement handle"),
    ("DoGet", _handle(execution=NO_EXECUTION, columns=[1, None]), "NOT_FOUND", "no execution"),
    ("DoAction", fl.Action("Nope\n", b"").serialize(), "UNIMPLEMENTED", 'action "Nope\\n"'),
    ("DoAction", fl.Action("CreatePreparedStatement", b"\xff").serialize(), "INVALID_ARGUMENT", "command"),
    (
        "DoAction",
        fl.Action("CreatePreparedStatement", proto.pack("CommandGetCatalogs")).serialize(),
        "INVALID_ARGUMENT",
        "ActionCreatePreparedStatementRequest",
    ),
    ("GetSchema", descriptor(b""), "UNIMPLEMENTED", "GetSchema is not served"),
    ("ListFlights", b"", "UNIMPLEMENTED", "ListFlights is not served"),
    ("PollFlightInfo", descriptor(b""), "UNIMPLEMENTED", "PollFlightInfo is not served"),
    ("DoPut", b"", "UNIMPLEMENTED", "DoPut is not served"),
    ("DoExchange", b"", "UNIMPLEMENTED", "DoExchange is not served"),
]


@aio
async def test_every_error_is_one_line_with_its_true_status(served: Any) -> None:
    """Bad input on every RPC, from a client without the token: its true gRPC status (INVALID_ARGUMENT, NOT_FOUND,
    UNIMPLEMENTED, …, never INTERNAL or UNKNOWN) and one line that names no file, path or traceback."""
    (node, _), url = served
    unary = {"GetFlightInfo", "GetSchema", "PollFlightInfo"}
    wrong = []
    for method, request, code, says in BAD_INPUT:
        got, details = await off_loop(refused, url, method, request, method not in unary)
        leaks = "\n" in details or "Traceback" in details or ".py" in details
        leaks = leaks or bool(re.search(r"(^|[\s:(\"'])/\w", details))  # an absolute path
        if got.name != code or says not in details or leaks:
            wrong.append(f"{method} {request[:40]!r}: {got.name} {details[:300]!r}")
    assert not wrong, "\n".join(wrong)
    after = await off_loop(fetch, url, node.home.token(), "SELECT COUNT(*) AS n FROM sales")
    assert after.column("n").to_pylist() == [5]  # and the server still serves


def handshake(url: str, authorization: str) -> list[tuple[str, str]]:
    """Flight's Handshake with one (empty) request and an ``authorization`` header: the headers answered."""
    with grpc.insecure_channel(url.removeprefix("grpc://")) as channel:
        call = channel.stream_stream(SERVICE + "Handshake")(
            iter([b""]), timeout=120, metadata=(("authorization", authorization),)
        )
        assert list(call) == []
        return [(k, v) for k, v in call.initial_metadata() if k == "authorization"]


@aio
async def test_a_handshake_with_the_token_is_answered_with_it(served: Any) -> None:
    """What JDBC's driver does with ``token=`` before any call: a Handshake with ``authorization: Bearer <token>``,
    then that header on every call. The right token is answered with it; a wrong one, or a user and password, is
    UNAUTHENTICATED in one line (the old face answered every Handshake UNIMPLEMENTED: JDBC could not connect)."""
    (node, _), url = served
    bearer = f"Bearer {node.home.token()}"
    assert await off_loop(handshake, url, bearer) == [("authorization", bearer)]
    for wrong in ("Bearer not-the-token", "Basic dXNlcjpwYXNz"):
        code, details = await off_loop(refused, url, "Handshake", b"", True, (("authorization", wrong),))
        assert code == grpc.StatusCode.UNAUTHENTICATED and details == (
            "this node takes its API token as a bearer header (authorization: Bearer <token>), and this is not it"
        )


BIG_ROWS = 1 << 19  # two result slices of about 54 MB each as Arrow holds them
BIG_SQL = "SELECT i, s FROM big"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def big(served: Any) -> str:
    """A dataset of BIG_ROWS rows (an integer, a 200-character string) and its whole-table result, computed once
    with the token: a hit any client may then read, and large enough that a reader that stops leaves most of it
    unsent."""
    (_, client), _ = served
    i = pa.array(range(BIG_ROWS), pa.int64())
    table = pa.table({"i": i, "s": pc.utf8_lpad(pc.cast(i, pa.string()), 200, "x")})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    await add_csv(client, "big", sink.getvalue().to_pybytes(), filename="big.parquet")
    out = await ask(client, BIG_SQL, big="big")
    assert out["row_count"] == BIG_ROWS
    return BIG_SQL


# A client that opens N streams of a result, takes one batch of each and stops reading (each stream on its own
# connection, as N clients would); on a line from stdin it reads on, and says how each stream ended. It sends no
# token: the result is a hit, open to anyone.
STALLER = """
import json, sys
import pyarrow.flight as fl
url, command, n = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3])
def say(**kw):
    print(json.dumps(kw), flush=True)
client = fl.FlightClient(url)
ticket = client.get_flight_info(fl.FlightDescriptor.for_command(command)).endpoints[0].ticket
say(ready=True)
sys.stdin.readline()
readers = []
for _ in range(n):
    c = fl.FlightClient(url)
    r = c.do_get(ticket)
    r.read_chunk()
    readers.append((c, r))
say(stalled=len(readers))
sys.stdin.readline()
ended = []
for c, r in readers:
    try:
        while True:
            r.read_chunk()
    except StopIteration:
        ended.append("complete")
    except fl.FlightCancelledError:
        ended.append("cancelled")
    except Exception as e:
        ended.append(type(e).__name__ + ": " + str(e)[:200])
say(ended=ended)
"""


def rss_mb() -> float:
    """This process's resident memory: the in-process node's (the stalled clients are another process)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Staller:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, url: str, sql: str, n: int) -> Staller:
        command = proto.pack("CommandStatementQuery", query=sql).hex()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", STALLER, url, command, str(n), stdin=PIPE, stdout=PIPE
        )
        return cls(proc)

    async def said(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        assert line, "the stalling client ended early"
        return dict(json.loads(line))

    async def go(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()
        return await self.said()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


def counted(sql: str) -> Callable[[str, str], int]:
    def ask_count(url: str, token: str) -> int:
        return int(statement(url, token, sql)[1].column(0)[0].as_py())

    return ask_count


# Readers that stop. The old face held a whole slice decoded for each, and the message made of it: 8 grew the
# node by 743 MB. Here each reserves about 9 MiB of api.flight_stream_bytes (a batch, a page and a dictionary of
# each column); with the allocators' per-thread caches, 6 add about 50 to 110 MB.
STALLED = 6
GROWTH_MB = 200  # what they may add to the node, in all


@aio
async def test_stalled_readers_hold_bounded_memory_while_honest_queries_are_answered(served: Any, big: str) -> None:
    """STALLED clients without the token read one batch of a 512 Ki-row result and stop. The node streams a result a
    batch of ``api.flight_batch_bytes`` at a time, so they add less than GROWTH_MB to it in all (on the old face each
    held its slice decoded: hundreds of MB); an honest client's new query is computed and answered meanwhile; after
    ``api.flight_idle_timeout`` the stalled streams are cancelled (their clients see CANCELLED) and a query is
    answered again."""
    (node, _), _ = served
    token = node.home.token()
    face = flight.start(node, "127.0.0.1", 0, token, Limits(idle_timeout=3.0))
    url = f"grpc://127.0.0.1:{face.port}"
    staller = await Staller.start(url, big, STALLED)
    try:
        assert (await staller.said())["ready"]
        assert await off_loop(counted("SELECT COUNT(*) FROM big WHERE i < 10"), url, token) == 10
        base = rss_mb()
        assert (await staller.go())["stalled"] == STALLED
        # an honest client's new query (a miss: Spark computes it) is answered while they hold their streams
        assert await off_loop(counted("SELECT COUNT(*) FROM big WHERE i % 2 = 0"), url, token) == BIG_ROWS // 2
        peak = rss_mb()
        assert peak - base < GROWTH_MB, f"{STALLED} stalled readers grew the node by {peak - base:.0f} MB"

        async def all_cancelled() -> bool:
            nonlocal peak
            peak = max(peak, rss_mb())
            return face.calls.count() == (0, 0, 0)

        await wait_for(all_cancelled, 120, "the stalled streams to be cancelled")
        assert peak - base < GROWTH_MB, f"{STALLED} stalled readers grew the node by {peak - base:.0f} MB"
        assert (await staller.go())["ended"] == ["cancelled"] * STALLED
        assert await off_loop(counted("SELECT COUNT(*) FROM big WHERE i < 7"), url, token) == 7
    finally:
        await staller.kill()
        await flight.stop(face)
    print(f"node RSS: {base:.0f} MB before, {peak - base:.0f} MB more at most with {STALLED} stalled readers")


def silent_call(url: str, hold: threading.Event) -> tuple[grpc.StatusCode, str]:
    """A GetFlightInfo whose request never comes: the call is opened, its one message withheld."""

    def withheld() -> Iterator[bytes]:
        hold.wait()
        yield descriptor(proto.pack("CommandGetCatalogs"))

    with grpc.insecure_channel(url.removeprefix("grpc://")) as channel:
        try:
            channel.stream_unary(SERVICE + "GetFlightInfo")(withheld(), timeout=120)
        except grpc.RpcError as e:
            return e.code(), e.details()
    raise AssertionError("the silent call was answered")


@aio
async def test_streams_beyond_their_budgets_are_refused_and_a_silent_client_is_cut_off(served: Any, big: str) -> None:
    """Result streams are bounded in number (``api.flight_max_streams``: one more is RESOURCE_EXHAUSTED while two
    stalled readers hold theirs) and in memory (``api.flight_stream_bytes``: a result that needs more than the
    budget to stream is refused, a small one is served); a client that opens a call and never sends its request is
    cancelled after ``api.flight_idle_timeout``, as is a stalled stream."""
    (node, _), _ = served
    token = node.home.token()
    face = flight.start(node, "127.0.0.1", 0, token, Limits(max_streams=2, idle_timeout=5.0))
    url = f"grpc://127.0.0.1:{face.port}"
    staller = await Staller.start(url, big, 2)
    hold = threading.Event()
    try:
        await staller.said()
        assert (await staller.go())["stalled"] == 2
        ticket = fl.Ticket(proto.pack("CommandGetTableTypes")).serialize()
        code, details = await off_loop(refused, url, "DoGet", ticket)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and details == (
            "this node has 2 result streams open, its most (api.flight_max_streams): try again when one ends"
        )
        code, details = await off_loop(silent_call, url, hold)
        assert code == grpc.StatusCode.CANCELLED, details
        assert (await staller.go())["ended"] == ["cancelled", "cancelled"]
        assert await off_loop(counted("SELECT COUNT(*) FROM big WHERE i < 3"), url, token) == 3
    finally:
        hold.set()
        await staller.kill()
        await flight.stop(face)
    face = flight.start(node, "127.0.0.1", 0, token, Limits(stream_bytes=5 << 20))
    url = f"grpc://127.0.0.1:{face.port}"
    try:
        with pytest.raises(pa.ArrowException, match="resource exhausted") as e:  # pyarrow's words for it
            await off_loop(statement, url, token, big)
        assert "MiB to stream, more than all streams may hold (5 MiB, api.flight_stream_bytes)" in str(e.value)
        assert (await off_loop(statement, url, token, SQL))[1].num_rows == 3
    finally:
        await flight.stop(face)
