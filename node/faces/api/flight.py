"""The Arrow Flight SQL face: what ADBC, JDBC and BI tools speak, answered by the same ``Node.query`` as HTTP.

Like the HTTP face it parses, calls ``Node``, renders: a SQL statement is answered by ``Node.query`` (index,
peers' claims, Spark: hits, single-flight and trust all as ``POST /api/v0/query``), its rows are the execution's
slices, streamed from their Parquet files a batch of about ``api.flight_batch_bytes`` at a time. The subset served
(docs/flight-sql.md): GetFlightInfo on ``CommandStatementQuery`` and ``CommandPreparedStatementQuery`` (the
prepared statement's handle is its SQL: nothing is held between calls), DoGet on the ticket that answers, the
``CreatePreparedStatement``/``ClosePreparedStatement`` actions, and the catalog commands a client asks on connect:
``GetSqlInfo``, ``GetCatalogs``, ``GetDbSchemas``, ``GetTables`` (the datasets), ``GetTableTypes``.

Token rules are HTTP's (node/faces/api/access.py): ``authorization: Bearer <api.token>`` lets a query compute a miss;
without it (and without ``api.open_compute``) a query is answered only from the index and peers, and a miss is
refused with UNAUTHENTICATED. Errors are the node's one error tree (node/support/errors.py), mapped from their HTTP
status
to gRPC status codes (node/faces/api/flight_rpc.py, which serves Flight's gRPC service and bounds what a client holds).

Handlers run on gRPC's threads; the node's work is handed to its event loop and waited for. What a client's input
can make long (a filter pattern over every dataset name) runs on the handler's thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from node import __version__
from node.core import Node
from node.domain.model import parse_cid
from node.faces.api import flight_proto as proto
from node.faces.api.flight_rpc import Call, Code, FlightService, Limits, Refused, Stream
from node.support.errors import CairnError, ConfigError, quote

log = logging.getLogger("cairn.flight")

META = "cairn."  # prefix of the schema metadata keys that say where an answer came from (docs/flight-sql.md)
ANSWER_FIELDS = ("source", "trust", "verified", "query", "invocation", "execution", "receipt", "logicalHash")
# A slice file is read through a buffer this big, a column chunk at a time (pyarrow's default, pre_buffer, reads
# every column chunk of a row group whole first: 11 MB, not 8, for three columns of a 1 Mi-row slice).
READ_BUFFER = 64 << 10
# What reading one column holds at a time: a data page and a dictionary page decoded (each at most 1 MiB as slices
# are written, node/services/datasets/slices.py) and their buffers; measured: 2.2 MB for an int64 column, 8.4 MB for
# three.
COLUMN_READ_BYTES = 3 << 20
PROBE_ROWS = 1024  # rows decoded to learn a slice's bytes per row, and so its batch size
STOP_GRACE_S = 5.0  # at stop: what the calls in progress are given before they are cancelled


class FlightFace(FlightService):
    def __init__(self, node: Node, loop: asyncio.AbstractEventLoop, token: str, limits: Limits) -> None:
        super().__init__(loop, token, limits)
        self.node = node

    def _may_compute(self, call: Call) -> bool:
        return call.has_token or self.node.settings.api.open_compute

    # -- GetFlightInfo ------------------------------------------------------------------------------

    def get_flight_info(self, call: Call, descriptor: Any) -> bytes:
        if descriptor.type != proto.DESCRIPTOR_CMD:
            raise Refused(Code.INVALID_ARGUMENT, "a Flight SQL descriptor is a command (CMD), not a path")
        name, message = _command(descriptor.cmd)
        if name == "CommandStatementQuery":
            return self._statement(call, descriptor, message.query)
        if name == "CommandPreparedStatementQuery":  # the handle is the SQL (CreatePreparedStatement)
            return self._statement(call, descriptor, _sql_of(message.prepared_statement_handle))
        if name in CATALOG:
            schema = TABLES_WITH_SCHEMA if name == "CommandGetTables" and message.include_schema else CATALOG[name][0]
            # The ticket is the command itself: DoGet answers it from the node's state at that time.
            return _info(schema, descriptor, descriptor.cmd, -1)
        raise Refused(Code.UNIMPLEMENTED, f"the Flight SQL command {name or 'given'} is not served by this node")

    def _statement(self, call: Call, descriptor: Any, sql: str) -> bytes:
        if not sql.strip():
            raise Refused(Code.INVALID_ARGUMENT, "the SQL statement is empty")
        answer = self.run(call, self.node.query(sql, {}, limit=0, may_compute=self._may_compute(call)))
        fields: Mapping[str, Any] = answer
        handle = {"columns": answer["columns"], **{k: fields[k] for k in ANSWER_FIELDS}}
        schema = self.run(call, self._result_schema(handle))
        ticket = proto.pack("TicketStatementQuery", statement_handle=json.dumps(handle).encode())
        return _info(schema, descriptor, ticket, answer["row_count"], json.dumps(handle).encode())

    async def _result_schema(self, handle: dict[str, Any]) -> pa.Schema:
        names, files = await self.node.execution_files(parse_cid(handle["execution"]), handle["columns"])
        first = await anext(files)  # every result has a slice, an empty result too: its schema
        if isinstance(files, AsyncGenerator):  # the rest is not read: let the reader go now
            await files.aclose()
        schema, _ = await asyncio.to_thread(_layout, first, 0)
        return _named(schema, names or handle["columns"], handle)

    # -- DoGet --------------------------------------------------------------------------------------

    def do_get(self, call: Call, ticket: bytes) -> Stream:
        name, message = _command(ticket)
        if name in CATALOG:
            table = CATALOG[name][1](self, call, message)
            return table.schema, iter(table.to_batches())
        if name != "TicketStatementQuery":
            raise Refused(Code.INVALID_ARGUMENT, "this ticket is not one this node gave: ask GetFlightInfo for one")
        try:
            handle = json.loads(message.statement_handle)
            execution, columns = parse_cid(handle["execution"]), [str(c) for c in handle["columns"]]
        except (ValueError, KeyError, TypeError, CairnError):
            raise Refused(Code.INVALID_ARGUMENT, "this ticket's statement handle is not one this node gave") from None
        names, files = self.run(call, self.node.execution_files(execution, columns))
        first = self.run(call, _next(files))
        if first is None:
            raise Refused(Code.INTERNAL, "this result has no slice")
        schema, footprint = _layout(first, self.limits.batch_bytes)
        self.calls.reserve(call.watch, footprint)  # refused if the streams open hold the budget
        schema = _named(schema, names or columns, handle)
        return schema, self._batches(call, first, files, schema)

    def _batches(self, call: Call, first: Path, files: Any, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The result, slice by slice, each read a batch at a time once the client has taken the one before; a
        slice's own column names are positional (``_0``, …): the stream's are the asker's."""
        path: Path | None = first
        while path is not None:
            yield from _read(path, schema, self.limits.batch_bytes)
            path = self.run(call, _next(files))

    # -- actions: prepared statements ---------------------------------------------------------------

    def list_actions(self) -> list[tuple[str, str]]:
        return [
            ("CreatePreparedStatement", "a prepared statement: its handle is its SQL"),
            ("ClosePreparedStatement", "nothing to release: a handle holds no state"),
        ]

    def do_action(self, call: Call, kind: str, body: bytes) -> list[bytes]:
        if kind == "CreatePreparedStatement":
            name, message = _command(body)
            if name != "ActionCreatePreparedStatementRequest":
                raise Refused(
                    Code.INVALID_ARGUMENT, "CreatePreparedStatement takes an ActionCreatePreparedStatementRequest"
                )
            # No schema before the query is answered (answering is what computes): the client learns it from
            # GetFlightInfo, as for a statement. The handle is the SQL itself: nothing to keep or to leak.
            return [proto.pack("ActionCreatePreparedStatementResult", prepared_statement_handle=message.query.encode())]
        if kind == "ClosePreparedStatement":
            return []
        raise Refused(Code.UNIMPLEMENTED, f"the Flight action {quote(kind)} is not served by this node")

    # -- the catalog commands (on the handler's thread; the node's state read on its loop) ---------------------

    def _pattern(self, text: str) -> Like | None:
        """A client's filter pattern, bounded (``api.flight_max_pattern``); None: no pattern, everything passes."""
        if not text:
            return None
        if len(text) > self.limits.max_pattern:
            raise Refused(
                Code.INVALID_ARGUMENT,
                f"a filter pattern has at most {self.limits.max_pattern} characters (api.flight_max_pattern), "
                f"this one {len(text)}",
            )
        return Like(text)

    def _in_the_schema(self, message: Any) -> bool:
        """Whether the command's catalog and schema filters pass the one schema there is: no catalog, named ""."""
        schemas = self._pattern(message.db_schema_filter_pattern)
        return not message.catalog and (schemas is None or schemas.match(""))

    def _db_schemas(self, call: Call, message: Any) -> pa.Table:
        """One schema, named "" (no catalog either): a client that walks catalog → schema → tables finds the
        datasets under it and writes their bare names, as queries name them."""
        names = [""] if self._in_the_schema(message) else []
        return pa.Table.from_pydict({"catalog_name": [None] * len(names), "db_schema_name": names}, DB_SCHEMAS_SCHEMA)

    def _tables(self, call: Call, message: Any) -> pa.Table:
        """Every named dataset the filters pass, as a table a query may name in FROM (docs/queries.md); with
        ``include_schema``, the Arrow schema of its head (JDBC's getColumns, DBeaver's navigator), as IPC."""
        pattern = self._pattern(message.table_name_filter_pattern)
        wanted = self._in_the_schema(message) and (not message.table_types or "TABLE" in message.table_types)
        names = self.run(call, _dataset_names(self.node)) if wanted else []
        if pattern is not None:
            names = [n for n in names if pattern.match(n)]
        columns: dict[str, list[Any]] = {
            "catalog_name": [None] * len(names),
            "db_schema_name": [""] * len(names),
            "table_name": names,
            "table_type": ["TABLE"] * len(names),
        }
        if not message.include_schema:
            return pa.Table.from_pydict(columns, schema=TABLES_SCHEMA)
        schemas = [self.run(call, self.node.data.schema(n)) for n in names]
        columns["table_schema"] = [s.serialize().to_pybytes() for s in schemas]
        return pa.Table.from_pydict(columns, schema=TABLES_WITH_SCHEMA)


async def _next(files: Any) -> Path | None:
    return await anext(files, None)


async def _dataset_names(node: Node) -> list[str]:
    return sorted(d["name"] for d in await node.data.listed() if d["name"])


def _command(data: bytes) -> tuple[str, Any]:
    try:
        return proto.unpack(data)
    except ValueError:
        raise Refused(Code.INVALID_ARGUMENT, "this is not a Flight SQL command") from None


def _sql_of(handle: bytes) -> str:
    try:
        return handle.decode()
    except UnicodeDecodeError:
        raise Refused(Code.INVALID_ARGUMENT, "this prepared statement handle is not one this node gave") from None


def _info(schema: pa.Schema, descriptor: Any, ticket: bytes, rows: int, app_metadata: bytes = b"") -> bytes:
    """A FlightInfo: one endpoint, on this node (no location), with ``ticket``."""
    info = proto.new("FlightInfo", schema=schema.serialize().to_pybytes(), total_records=rows, total_bytes=-1)
    info.flight_descriptor.CopyFrom(descriptor)
    info.endpoint.add().ticket.ticket = ticket
    info.app_metadata = app_metadata
    return proto.encode(info)


def _named(schema: pa.Schema, columns: list[str], handle: dict[str, Any]) -> pa.Schema:
    """The result's schema under the asker's column names, with where the answer came from as metadata."""
    if len(columns) != len(schema):
        columns = list(schema.names)
    meta = {f"{META}{k}": json.dumps(v) if not isinstance(v, str) else v for k, v in handle.items() if k != "columns"}
    return pa.schema([f.with_name(n) for f, n in zip(schema, columns)], metadata=meta)


# -- a result's slices, read a batch at a time ---------------------------------------------------------------


def _layout(path: Path, batch_bytes: int) -> tuple[pa.Schema, int]:
    """A slice's schema, from its footer, and about what streaming it holds at most: the batch three times (decoded,
    as IPC, given to gRPC) and, for each column, the smaller of its whole chunk and a page and a dictionary."""
    try:
        with pq.ParquetFile(path) as f:
            md = f.metadata
            groups = range(md.num_row_groups)
            sizes = [
                max((md.row_group(g).column(c).total_uncompressed_size for g in groups), default=0)
                for c in range(md.num_columns)
            ]
            return f.schema_arrow, 3 * batch_bytes + sum(min(size, COLUMN_READ_BYTES) for size in sizes)
    except (OSError, pa.ArrowException):
        raise Refused(Code.INTERNAL, "a slice of this result cannot be read") from None


def _batch_rows(f: pq.ParquetFile, batch_bytes: int) -> int:
    """Rows in a batch of about ``batch_bytes``, from the bytes per row of the slice's first rows as Arrow holds
    them (Parquet's own sizes are of its encoding: a repeated string costs a few bits there, not its length)."""
    probe = next(f.iter_batches(batch_size=PROBE_ROWS), None)
    if probe is None or probe.num_rows == 0:
        return PROBE_ROWS
    per_row = max(1, probe.nbytes // probe.num_rows)
    return max(1, batch_bytes // per_row)


def _read(path: Path, schema: pa.Schema, batch_bytes: int) -> Iterator[pa.RecordBatch]:
    """A slice file a batch at a time, under the stream's ``schema``; the next batch is decoded only when asked."""
    try:
        with pq.ParquetFile(path, buffer_size=READ_BUFFER, pre_buffer=False) as f:
            if len(f.schema_arrow) != len(schema):
                raise Refused(Code.INTERNAL, "a slice of this result has another number of columns than its first")
            for batch in f.iter_batches(batch_size=_batch_rows(f, batch_bytes)):
                yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    except (OSError, pa.ArrowException):
        raise Refused(Code.INTERNAL, "a slice of this result cannot be read") from None


# -- filter patterns: SQL LIKE without backtracking ---------------------------------------------------------


class Like:
    """SQL LIKE as Flight SQL's filter patterns use it: ``%`` any run of characters, ``_`` one, no escape.

    Matched without backtracking, in time linear in the name for each piece of the pattern: the pattern is cut at
    each ``%`` into pieces that each match a fixed number of characters; the first must match at the start, the
    last at the end, and each one between at its leftmost place after the one before (a later place only leaves
    less room for the rest, so leftmost is never wrong). A piece is a regex of literal characters and ``.``, which
    ``re`` tries at each place in time linear in the piece. A translation to one regex (``.*`` per ``%``) backtracks:
    ``%`` × 60 then ``#`` held the node for seconds per name."""

    def __init__(self, pattern: str) -> None:
        # (the piece as a regex, the characters it matches)
        pieces = [
            (re.compile("".join("." if c == "_" else re.escape(c) for c in p), re.S), len(p))
            for p in pattern.split("%")
        ]
        self.first, self.middle, self.last = pieces[0], [p for p, _ in pieces[1:-1]], pieces[-1]
        self.whole = len(pieces) == 1  # no %: the one piece is the whole name

    def match(self, name: str) -> bool:
        (first, start), (last, width) = self.first, self.last
        if self.whole:
            return first.fullmatch(name) is not None
        end = len(name) - width
        if end < start or not first.match(name, 0, start) or not last.fullmatch(name, end):
            return False
        for piece in self.middle:
            found = piece.search(name, start, end)
            if found is None:
                return False
            start = found.end()
        return True


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


def _sql_info(face: FlightFace, call: Call, message: Any) -> pa.Table:
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


def _catalogs(face: FlightFace, call: Call, message: Any) -> pa.Table:
    return CATALOGS_SCHEMA.empty_table()  # datasets have no catalog: names are one flat namespace


def _table_types(face: FlightFace, call: Call, message: Any) -> pa.Table:
    return pa.Table.from_pydict({"table_type": ["TABLE"]}, schema=TABLE_TYPES_SCHEMA)


Answer = Callable[[FlightFace, Call, Any], pa.Table]
CATALOG: dict[str, tuple[pa.Schema, Answer]] = {
    "CommandGetSqlInfo": (SQL_INFO_SCHEMA, _sql_info),
    "CommandGetCatalogs": (CATALOGS_SCHEMA, _catalogs),
    "CommandGetDbSchemas": (DB_SCHEMAS_SCHEMA, FlightFace._db_schemas),
    "CommandGetTables": (TABLES_SCHEMA, FlightFace._tables),
    "CommandGetTableTypes": (TABLE_TYPES_SCHEMA, _table_types),
}


# -- start and stop, with the node (node/faces/daemon.py) -------------------------------------------------------


def start(node: Node, host: str, port: int, token: str, limits: Limits | None = None) -> FlightFace:
    """Listen on ``host:port`` (0: a free port); the address is set on the node (``Node.info``: ``flight``).
    ``limits``: the ``api.flight_*`` settings unless given."""
    where = f"[{host}]" if ":" in host else host
    face = FlightFace(node, asyncio.get_running_loop(), token, limits or Limits.of(node.settings.api))
    try:
        face.start(f"{where}:{port}")
    except OSError:
        raise ConfigError(
            f"Arrow Flight SQL cannot listen on {host}:{port} (in use?): set api.flight_port "
            "(CAIRN_API_FLIGHT_PORT; 0 picks a free port) or turn it off with api.flight = false"
        ) from None
    url = f"grpc://{where}:{face.port}"
    node.listening(flight=url)
    log.info("flight sql listening", extra={"flight": url})
    return face


async def stop(face: FlightFace, grace: float = STOP_GRACE_S) -> None:
    """Stop serving: new calls are refused, those in progress have ``grace`` seconds, then are cancelled. Off the
    loop: the calls wait on the loop themselves."""
    await asyncio.to_thread(face.shutdown, grace)
