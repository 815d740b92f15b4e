"""The Arrow Flight SQL face: what ADBC, JDBC and BI tools speak, answered by the same ``Node.query`` as HTTP.

Issue 20 item 6. Like the HTTP face it parses, calls ``Node``, renders: a SQL statement is answered by
``Node.query`` (index, peers' claims, Spark: hits, single-flight and trust all as ``POST /api/v0/query``), its rows
are the execution's slices (``Node.execution_data``, as ``GET /api/v0/executions/{cid}/data``). The subset served
(docs/flight-sql.md): GetFlightInfo on ``CommandStatementQuery`` and ``CommandPreparedStatementQuery`` (the
prepared statement's handle is its SQL: nothing is held between calls), DoGet on the ticket that answers, the
``CreatePreparedStatement``/``ClosePreparedStatement`` actions, and the catalog commands a client asks on connect:
``GetSqlInfo``, ``GetCatalogs``, ``GetDbSchemas``, ``GetTables`` (the datasets), ``GetTableTypes``.

Token rules are HTTP's (node/api/access.py): ``authorization: Bearer <api.token>`` lets a query compute a miss;
without it (and without ``api.open_compute``) a query is answered only from the index and peers, and a miss is
refused with UNAUTHENTICATED. Errors are the node's one error tree (node/errors.py), mapped from their HTTP status
to Flight status codes by :func:`flight_error`.

pyarrow runs the handlers on gRPC's threads; each call hands its work to the node's event loop and waits for it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from concurrent.futures import CancelledError, Future, wait
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as fl

from node import __version__
from node.api import flight_proto as proto
from node.core import Node
from node.errors import CairnError, ConfigError, InvalidInput
from node.model import parse_cid

log = logging.getLogger("cairn.flight")
T = TypeVar("T")

AUTH = "cairn-auth"  # the middleware's key in a call's context
META = "cairn."  # prefix of the schema metadata keys that say where an answer came from (docs/flight-sql.md)
POLL_S = 0.25  # how often a waiting call looks whether its client went away
ANSWER_FIELDS = ("source", "trust", "verified", "query", "invocation", "execution", "receipt", "logicalHash")


def flight_error(e: CairnError) -> Exception:
    """The Flight error for a node error, by the HTTP status it carries (the one error tree, node/errors.py)."""
    status, message = e.status, e.message
    if status == 401:
        return fl.FlightUnauthenticatedError(message)
    if status == 403:
        return fl.FlightUnauthorizedError(message)
    if status == 404:
        return pa.ArrowKeyError(message)  # gRPC NOT_FOUND
    if status in (429, 502, 503):
        return fl.FlightUnavailableError(message)
    if status == 504:
        return fl.FlightTimedOutError(message)
    if status < 500:
        return pa.ArrowInvalid(message)  # gRPC INVALID_ARGUMENT: bad SQL, unknown table, a refused query
    return fl.FlightServerError(message)


class _Caller(fl.ServerMiddleware):
    def __init__(self, has_token: bool) -> None:
        self.has_token = has_token


class _TokenCheck(fl.ServerMiddlewareFactory):
    """Reads ``authorization: Bearer <token>`` as the HTTP API does; a call without it is not refused here: the
    query decides (an answer the node has is open, computing is not)."""

    def __init__(self, token: str) -> None:
        self.token = token.encode()

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> _Caller:
        given = next(iter(headers.get("authorization", [])), "")
        given = given.decode(errors="replace") if isinstance(given, bytes) else given
        token = given[7:].strip() if given.startswith("Bearer ") else ""
        return _Caller(bool(token) and hmac.compare_digest(token.encode(), self.token))


class FlightFace(fl.FlightServerBase):
    def __init__(self, node: Node, loop: asyncio.AbstractEventLoop, location: str, token: str) -> None:
        super().__init__(location, middleware={AUTH: _TokenCheck(token)})
        self.node, self.loop = node, loop

    # -- the bridge to the node's loop ---------------------------------------------------------------

    def _run(self, coro: Awaitable[T], context: Any = None) -> T:
        """``coro`` on the node's loop, waited for here. A client that goes away cancels it (with ``context``),
        as a disconnect cancels an HTTP request and its query (node/daemon.py)."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(_awaited(coro), self.loop)
        while context is not None and not wait([future], timeout=POLL_S).done:
            if context.is_cancelled():
                future.cancel()
        try:
            return future.result()
        except CairnError as e:
            raise flight_error(e) from None
        except CancelledError:  # the client went away, or a second Ctrl-C cancelled the node's queries
            raise fl.FlightCancelledError("the query was cancelled") from None
        except (fl.FlightError, pa.ArrowException, NotImplementedError):
            raise
        except Exception as e:  # a bug: say so without leaking internals, keep the trace in the log
            log.exception("unhandled error in a Flight SQL call")
            raise fl.FlightInternalError(f"internal error: {type(e).__name__}") from None

    def _may_compute(self, context: Any) -> bool:
        caller = context.get_middleware(AUTH)
        return bool(caller is not None and caller.has_token) or self.node.settings.api.open_compute

    # -- GetFlightInfo ------------------------------------------------------------------------------

    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        name, message = _command(descriptor.command)
        if name == "CommandStatementQuery":
            return self._statement(context, descriptor, message.query)
        if name == "CommandPreparedStatementQuery":  # the handle is the SQL (CreatePreparedStatement)
            return self._statement(context, descriptor, _sql_of(message.prepared_statement_handle))
        if name in CATALOG:
            schema = TABLES_WITH_SCHEMA if name == "CommandGetTables" and message.include_schema else CATALOG[name][0]
            # The ticket is the command itself: DoGet answers it from the node's state at that time.
            return fl.FlightInfo(schema, descriptor, [fl.FlightEndpoint(descriptor.command, [])], -1, -1)
        raise NotImplementedError(f"Flight SQL command {name or 'unknown'} is not served by this node")

    def _statement(self, context: Any, descriptor: fl.FlightDescriptor, sql: str) -> fl.FlightInfo:
        if not sql.strip():
            raise flight_error(InvalidInput("the SQL statement is empty"))
        may_compute = self._may_compute(context)
        answer = self._run(self.node.query(sql, {}, limit=0, may_compute=may_compute), context)
        handle = {"columns": answer["columns"], **{k: answer[k] for k in ANSWER_FIELDS}}
        schema = self._run(self._result_schema(handle))
        ticket = fl.Ticket(proto.pack("TicketStatementQuery", statement_handle=json.dumps(handle).encode()))
        endpoint = fl.FlightEndpoint(ticket, [])
        meta = json.dumps(handle).encode()
        return fl.FlightInfo(schema, descriptor, [endpoint], answer["row_count"], -1, app_metadata=meta)

    async def _result_schema(self, handle: dict[str, Any]) -> pa.Schema:
        columns, tables = await self.node.execution_data(parse_cid(handle["execution"]), handle["columns"])
        first = await anext(tables)  # every result has a slice, an empty result too: its schema
        if isinstance(tables, AsyncGenerator):  # the rest is not read: let the reader go now
            await tables.aclose()
        return _named(first.schema, columns or handle["columns"], handle)

    # -- DoGet --------------------------------------------------------------------------------------

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.FlightDataStream:
        name, message = _command(ticket.ticket)
        if name in CATALOG:
            return fl.RecordBatchStream(self._run(CATALOG[name][1](self.node, message)))
        if name != "TicketStatementQuery":
            raise pa.ArrowInvalid("this ticket is not one this node gave: ask GetFlightInfo for one")
        try:
            handle = json.loads(message.statement_handle)
            execution, columns = parse_cid(handle["execution"]), list(handle["columns"])
        except (ValueError, KeyError, TypeError, CairnError):
            raise pa.ArrowInvalid("this ticket's statement handle is not one this node gave") from None
        names, tables = self._run(self.node.execution_data(execution, columns))
        first = self._run(_first(tables))
        schema = _named(first.schema, names or columns, handle)
        return fl.GeneratorStream(schema, self._batches(first, tables, schema))

    def _batches(self, first: pa.Table, tables: Any, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The result, slice by slice, each read from the node once the client has taken the one before; a
        slice's own column names are positional (``_0``, …): the stream's are the asker's."""
        table: pa.Table | None = first
        while table is not None:
            if table.num_columns != len(schema):
                raise pa.ArrowInvalid("a slice of this result has another number of columns than its first")
            yield from table.rename_columns(schema.names).replace_schema_metadata(schema.metadata).to_batches()
            table = self._run(_next(tables))

    # -- actions: prepared statements ---------------------------------------------------------------

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return [
            ("CreatePreparedStatement", "a prepared statement: its handle is its SQL"),
            ("ClosePreparedStatement", "nothing to release: a handle holds no state"),
        ]

    def do_action(self, context: Any, action: fl.Action) -> Iterator[fl.Result]:
        kind = action.type
        if kind == "CreatePreparedStatement":
            name, message = _command(action.body.to_pybytes())
            if name != "ActionCreatePreparedStatementRequest":
                raise pa.ArrowInvalid("CreatePreparedStatement takes an ActionCreatePreparedStatementRequest")
            # No schema before the query is answered (answering is what computes): the client learns it from
            # GetFlightInfo, as for a statement. The handle is the SQL itself: nothing to keep or to leak.
            body = proto.pack("ActionCreatePreparedStatementResult", prepared_statement_handle=message.query.encode())
            return iter([fl.Result(body)])
        if kind == "ClosePreparedStatement":
            return iter([])
        raise NotImplementedError(f"Flight action {kind!r} is not served by this node")


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw


async def _first(tables: Any) -> pa.Table:
    return await anext(tables)


async def _next(tables: Any) -> pa.Table | None:
    return await anext(tables, None)


def _command(data: bytes) -> tuple[str, Any]:
    try:
        return proto.unpack(data)
    except ValueError as e:
        raise pa.ArrowInvalid(f"not a Flight SQL command: {e}") from None


def _sql_of(handle: bytes) -> str:
    try:
        return handle.decode()
    except UnicodeDecodeError:
        raise pa.ArrowInvalid("this prepared statement handle is not one this node gave") from None


def _named(schema: pa.Schema, columns: list[str], handle: dict[str, Any]) -> pa.Schema:
    """The result's schema under the asker's column names, with where the answer came from as metadata."""
    if len(columns) != len(schema):
        columns = list(schema.names)
    meta = {f"{META}{k}": json.dumps(v) if not isinstance(v, str) else v for k, v in handle.items() if k != "columns"}
    return pa.schema([f.with_name(n) for f, n in zip(schema, columns)], metadata=meta)


# -- the catalog commands: (the answer's schema, how to answer it) -----------------------------------------------

_SQL_INFO_VALUE = pa.dense_union(
    [
        pa.field("string_value", pa.utf8()),
        pa.field("bool_value", pa.bool_()),
        pa.field("bigint_value", pa.int64()),
        pa.field("int32_bitmask", pa.int32()),
        pa.field("string_list", pa.list_(pa.utf8())),
        pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32()))),
    ]
)
SQL_INFO_SCHEMA = pa.schema([pa.field("info_name", pa.uint32(), nullable=False), pa.field("value", _SQL_INFO_VALUE)])
CATALOGS_SCHEMA = pa.schema([pa.field("catalog_name", pa.utf8(), nullable=False)])
DB_SCHEMAS_SCHEMA = pa.schema([pa.field("catalog_name", pa.utf8()), pa.field("db_schema_name", pa.utf8(), False)])
TABLES_SCHEMA = pa.schema(
    [
        pa.field("catalog_name", pa.utf8()),
        pa.field("db_schema_name", pa.utf8()),
        pa.field("table_name", pa.utf8(), nullable=False),
        pa.field("table_type", pa.utf8(), nullable=False),
    ]
)
TABLES_WITH_SCHEMA = TABLES_SCHEMA.append(pa.field("table_schema", pa.binary(), nullable=False))
TABLE_TYPES_SCHEMA = pa.schema([pa.field("table_type", pa.utf8(), nullable=False)])


async def _sql_info(node: Node, message: Any) -> pa.Table:
    """Server name, version, Arrow version, read-only (SqlInfo 0-3): strings then one boolean."""
    known = {0: "cairn", 1: __version__, 2: pa.__version__, 3: True}
    wanted = [i for i in (list(message.info) or known) if i in known]
    types = pa.array([1 if isinstance(known[i], bool) else 0 for i in wanted], pa.int8())
    strings = [str(known[i]) for i in wanted if not isinstance(known[i], bool)]
    bools = [bool(known[i]) for i in wanted if isinstance(known[i], bool)]
    offsets, seen = [], {0: 0, 1: 0}
    for t in types.to_pylist():
        offsets.append(seen[t])
        seen[t] += 1
    children = [pa.array(strings, pa.utf8()), pa.array(bools, pa.bool_())]
    children += [pa.array([], f.type) for f in list(_SQL_INFO_VALUE)[2:]]
    value = pa.UnionArray.from_dense(
        types, pa.array(offsets, pa.int32()), children, [f.name for f in _SQL_INFO_VALUE], list(range(6))
    )
    return pa.Table.from_arrays([pa.array(wanted, pa.uint32()), value], schema=SQL_INFO_SCHEMA)


async def _catalogs(node: Node, message: Any) -> pa.Table:
    return CATALOGS_SCHEMA.empty_table()  # datasets have no catalog: names are one flat namespace


async def _db_schemas(node: Node, message: Any) -> pa.Table:
    """One schema, named "" (no catalog either): a client that walks catalog → schema → tables finds the datasets
    under it and writes their bare names, as queries name them."""
    return pa.Table.from_pydict({"catalog_name": [None], "db_schema_name": [""]}, schema=DB_SCHEMAS_SCHEMA)


async def _tables(node: Node, message: Any) -> pa.Table:
    """Every named dataset, as a table a query may name in FROM (docs/queries.md); with ``include_schema``, the
    Arrow schema of its head (JDBC's getColumns, DBeaver's navigator), as an IPC message."""
    names = sorted(d["name"] for d in await node.list_datasets() if d["name"])
    pattern = message.table_name_filter_pattern
    if pattern:
        names = [n for n in names if _like(n, pattern)]
    if message.table_types and "TABLE" not in message.table_types:
        names = []
    columns: dict[str, list[Any]] = {
        "catalog_name": [None] * len(names),
        "db_schema_name": [""] * len(names),
        "table_name": names,
        "table_type": ["TABLE"] * len(names),
    }
    if not message.include_schema:
        return pa.Table.from_pydict(columns, schema=TABLES_SCHEMA)
    columns["table_schema"] = [(await _head_schema(node, n)).serialize().to_pybytes() for n in names]
    return pa.Table.from_pydict(columns, schema=TABLES_WITH_SCHEMA)


async def _head_schema(node: Node, name: str) -> pa.Schema:
    """The columns of a dataset's head, as its first slice holds them (as ``GET /api/v0/datasets/{ref}/data``
    reads it); a dataset with no rows yet has none."""
    first = await anext(node.datasets.tables(await node.dataset_version(name)), None)
    return first.schema.remove_metadata() if first is not None else pa.schema([])


async def _table_types(node: Node, message: Any) -> pa.Table:
    return pa.Table.from_pydict({"table_type": ["TABLE"]}, schema=TABLE_TYPES_SCHEMA)


def _like(name: str, pattern: str) -> bool:
    """SQL LIKE as Flight SQL's filter patterns use it: ``%`` any run, ``_`` one character."""
    import re

    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name) is not None


Answer = Callable[[Node, Any], Awaitable[pa.Table]]
CATALOG: dict[str, tuple[pa.Schema, Answer]] = {
    "CommandGetSqlInfo": (SQL_INFO_SCHEMA, _sql_info),
    "CommandGetCatalogs": (CATALOGS_SCHEMA, _catalogs),
    "CommandGetDbSchemas": (DB_SCHEMAS_SCHEMA, _db_schemas),
    "CommandGetTables": (TABLES_SCHEMA, _tables),
    "CommandGetTableTypes": (TABLE_TYPES_SCHEMA, _table_types),
}


# -- start and stop, with the node (node/daemon.py) -------------------------------------------------------


def start(node: Node, host: str, port: int, token: str) -> FlightFace:
    """Listen on ``host:port`` (0: a free port); the address is set on the node (``Node.info``: ``flight``)."""
    where = f"[{host}]" if ":" in host else host
    try:
        face = FlightFace(node, asyncio.get_running_loop(), f"grpc://{where}:{port}", token)
    except (OSError, pa.ArrowException):  # gRPC says only "Server did not start properly" (the cause is logged)
        raise ConfigError(
            f"Arrow Flight SQL cannot listen on {host}:{port} (in use?): set api.flight_port "
            "(CAIRN_API_FLIGHT_PORT; 0 picks a free port) or turn it off with api.flight = false"
        ) from None
    node.flight_url = f"grpc://{where}:{face.port}"
    log.info("flight sql listening", extra={"flight": node.flight_url})
    return face


async def stop(face: FlightFace) -> None:
    """Stop serving; waits for calls in flight, off the loop (they wait on the loop themselves)."""
    await asyncio.to_thread(face.shutdown)
