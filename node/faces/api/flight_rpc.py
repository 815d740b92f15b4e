"""Arrow Flight's gRPC service on grpcio: the transport under the Flight SQL face (node/faces/api/flight.py).

Flight is gRPC (service ``arrow.flight.protocol.FlightService``) carrying Arrow IPC: each ``FlightData`` message
of a stream holds one IPC message (its flatbuffer header and its body), made here by pyarrow's IPC writer.

Why grpcio and not pyarrow.flight's server: pyarrow's sends INVALID_ARGUMENT, NOT_FOUND or UNIMPLEMENTED only by
way of a Python exception, whose status detail is the formatted traceback (install paths and all) appended to
the message the client reads; and it cannot end a call whose client stopped reading (the blocked write holds the
call's thread and batches for as long as the client keeps the connection). Here:

- every call ends in one gRPC status with one line (:class:`Refused`; a node error by its HTTP status);
- every call is watched (:class:`Calls`): one whose client keeps it waiting, to send its request or to take the
  next message, longer than ``api.flight_idle_timeout`` is cancelled, which frees what it holds;
- at most ``api.flight_max_calls`` calls run at once (each on a thread of its own), at most
  ``api.flight_max_streams`` of them result streams, each holding about one batch of ``api.flight_batch_bytes``;
  a client's message is at most ``api.flight_max_message_bytes``.

Every method is registered as request-streaming, even those whose request is one message: so the handler runs at
once and the wait for that message is watched too (a unary handler would hold its thread until the message came).
A handler runs on a gRPC thread; the node's work is handed to its loop (:meth:`FlightService.run`) and waited for.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import pyarrow as pa

from config import ApiSettings
from node.faces.api import flight_proto as proto
from node.support.errors import CairnError

log = logging.getLogger("cairn.flight")
T = TypeVar("T")

SERVICE = "arrow.flight.protocol.FlightService"
Code = grpc.StatusCode

# A node error's gRPC status, by the HTTP status it carries; other 4xx are INVALID_ARGUMENT, other 5xx INTERNAL.
_BY_HTTP = {
    401: Code.UNAUTHENTICATED,
    403: Code.PERMISSION_DENIED,
    404: Code.NOT_FOUND,
    429: Code.UNAVAILABLE,
    501: Code.UNIMPLEMENTED,
    502: Code.UNAVAILABLE,
    503: Code.UNAVAILABLE,
    504: Code.DEADLINE_EXCEEDED,
    507: Code.RESOURCE_EXHAUSTED,  # gRPC's own words: "perhaps the entire file system is out of space"
}


class Refused(Exception):
    """A call answered with a gRPC status and one line: all the client reads."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def refusal(e: CairnError) -> Refused:
    """The gRPC status of a node error (node/support/errors.py), by the HTTP status it carries; its one-line message."""
    code = _BY_HTTP.get(e.status) or (Code.INVALID_ARGUMENT if e.status < 500 else Code.INTERNAL)
    return Refused(code, e.message)


@dataclass(frozen=True)
class Limits:
    """What one client can make the service hold (``api.flight_*``, config/settings.py)."""

    max_calls: int = 64
    max_streams: int = 32
    stream_bytes: int = 512 << 20
    batch_bytes: int = 1 << 20
    idle_timeout: float = 60.0
    max_message_bytes: int = 1 << 20
    max_pattern: int = 256

    @classmethod
    def of(cls, api: ApiSettings) -> Limits:
        return cls(
            api.flight_max_calls,
            api.flight_max_streams,
            api.flight_stream_bytes,
            api.flight_batch_bytes,
            api.flight_idle_timeout,
            api.flight_max_message_bytes,
            api.flight_max_pattern,
        )


# -- the calls in progress, watched ----------------------------------------------------------------------------


class Watch:
    """One call: whether it waits on its client now (``since``: from when), whether it is a result stream, and the
    memory it has reserved."""

    __slots__ = ("cancelled", "context", "reserved", "since", "stream")

    def __init__(self, context: Any, stream: bool) -> None:
        self.context, self.stream = context, stream
        self.since: float | None = None
        self.cancelled = False
        self.reserved = 0

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """While the client owes the call something: its request, or taking the message just given to gRPC."""
        self.since = time.monotonic()
        try:
            yield
        finally:
            self.since = None


class Calls:
    """The calls in progress. A watchdog thread cancels each one that has waited on its client longer than
    ``idle_timeout`` (gRPC then frees its messages and ends its handler); result streams are counted against
    ``max_streams``, and the memory they reserve against ``stream_bytes``. A call leaves, and gives its memory
    back, when gRPC says it ended (its done-callback), not when its handler returns: an answer that is written but
    not yet taken is still held."""

    def __init__(self, limits: Limits) -> None:
        self.idle_timeout, self.max_streams, self.stream_bytes = (
            limits.idle_timeout,
            limits.max_streams,
            limits.stream_bytes,
        )
        self._lock = threading.Lock()
        self._open: set[Watch] = set()
        self._reserved = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watchdog, name="cairn-flight-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def enter(self, context: Any, stream: bool = False) -> Watch:
        watch = Watch(context, stream)
        with self._lock:
            if stream and self.streams() >= self.max_streams:
                raise Refused(
                    Code.RESOURCE_EXHAUSTED,
                    f"this node has {self.max_streams} result streams open, its most (api.flight_max_streams): "
                    "try again when one ends",
                )
            self._open.add(watch)
        if not context.add_callback(lambda: self._leave(watch)):
            self._leave(watch)  # the call ended already
        return watch

    def reserve(self, watch: Watch, nbytes: int) -> None:
        """Reserve ``nbytes`` for the stream ``watch`` until it ends, or refuse it (RESOURCE_EXHAUSTED)."""
        with self._lock:
            if nbytes > self.stream_bytes:
                raise Refused(
                    Code.RESOURCE_EXHAUSTED,
                    f"this result needs about {nbytes >> 20} MiB to stream, more than all streams may hold "
                    f"({self.stream_bytes >> 20} MiB, api.flight_stream_bytes): ask for fewer columns",
                )
            if self._reserved + nbytes > self.stream_bytes:
                raise Refused(
                    Code.RESOURCE_EXHAUSTED,
                    f"the result streams open hold the {self.stream_bytes >> 20} MiB this node gives them "
                    "(api.flight_stream_bytes): try again when one ends",
                )
            if watch in self._open:  # not when the call has ended already: nothing would give it back
                self._reserved += nbytes
                watch.reserved += nbytes

    def _leave(self, watch: Watch) -> None:
        with self._lock:
            if watch in self._open:
                self._open.discard(watch)
                self._reserved -= watch.reserved

    def streams(self) -> int:
        """Result streams open now (callers hold the lock, or read a moment's value)."""
        return sum(1 for w in self._open if w.stream)

    def count(self) -> tuple[int, int, int]:
        """(calls, result streams, bytes they reserved) in progress now."""
        with self._lock:
            return len(self._open), self.streams(), self._reserved

    def sweep(self, now: float | None = None) -> int:
        """Cancel the calls that have waited on their clients too long at ``now`` (monotonic seconds; the clock's
        reading when None); how many were cancelled."""
        now = time.monotonic() if now is None else now
        with self._lock:
            late = [w for w in self._open if not w.cancelled and now - (w.since or now) > self.idle_timeout]
            for w in late:
                w.cancelled = True
        for w in late:
            log.info(
                "flight call cancelled: its client kept it waiting",
                extra={"peer": w.context.peer(), "idle_timeout": self.idle_timeout},
            )
            w.context.cancel()  # thread-safe: gRPC ends the call, its pending messages and its handler's wait
        return len(late)

    def _watchdog(self) -> None:
        every = min(1.0, self.idle_timeout / 4)
        while not self._stop.wait(every):
            self.sweep()


# -- Arrow IPC in FlightData messages --------------------------------------------------------------------------


class _Sink:
    """The file the IPC writer writes into: what it wrote since the last ``take``."""

    closed = False

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def _messages(data: bytes) -> Iterator[bytes]:
    """The FlightData of each IPC message in ``data`` (what the writer wrote for one batch: its dictionaries, if
    any, then the batch)."""
    reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(data))
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            return
        yield proto.flight_data(message.metadata, message.body)


def frames(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[bytes]:
    """A Flight stream: the schema, then each batch (as a stream writer writes them: dictionaries included), each
    made only when the one before was taken. The writer writes the schema with the first batch, or at its close
    when there is none."""
    sink = _Sink()
    writer = pa.ipc.new_stream(sink, schema)
    try:
        for batch in batches:
            writer.write_batch(batch)
            yield from _messages(sink.take())
    finally:
        writer.close()
    yield from _messages(sink.take())  # a stream of no batch: its schema (the end-of-stream mark is not sent)


# -- the service ---------------------------------------------------------------------------------------------


@dataclass
class Call:
    """What a handler knows of its call: gRPC's context, its watch, and whether the caller sent the token."""

    context: Any
    watch: Watch
    has_token: bool


Stream = tuple[pa.Schema, Iterator[pa.RecordBatch]]
NOT_SERVED = "is not served by this node (docs/flight-sql.md lists what is)"


class FlightService:
    """The Flight RPCs on a grpcio server. A subclass answers ``get_flight_info``, ``do_get``, ``do_action`` and
    ``list_actions``; every other RPC is UNIMPLEMENTED."""

    def __init__(self, loop: asyncio.AbstractEventLoop, token: str, limits: Limits) -> None:
        self.loop, self.limits = loop, limits
        self._token = token.encode()
        self.calls = Calls(limits)
        self._server: Any = None
        self.port = 0

    # -- to answer --

    def get_flight_info(self, call: Call, descriptor: Any) -> bytes:
        raise Refused(Code.UNIMPLEMENTED, f"GetFlightInfo {NOT_SERVED}")

    def do_get(self, call: Call, ticket: bytes) -> Stream:
        raise Refused(Code.UNIMPLEMENTED, f"DoGet {NOT_SERVED}")

    def do_action(self, call: Call, kind: str, body: bytes) -> list[bytes]:
        raise Refused(Code.UNIMPLEMENTED, f"the action {kind!r} {NOT_SERVED}")

    def list_actions(self) -> list[tuple[str, str]]:
        return []

    # -- the bridge to the node's loop --

    def run(self, call: Call, coro: Awaitable[T]) -> T:
        """``coro`` on the node's loop, waited for here; it is cancelled when the call ends first (the client went
        away, or the watchdog cancelled it), as a disconnect cancels an HTTP request and its query."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(_awaited(coro), self.loop)
        if not call.context.add_callback(future.cancel):
            future.cancel()
        try:
            return future.result()
        except CancelledError:  # the client went away, or a second Ctrl-C cancelled the node's queries
            raise Refused(Code.CANCELLED, "the query was cancelled") from None

    # -- start, stop --

    def start(self, address: str) -> int:
        """Listen on ``address`` (``host:port``); the port taken. ``OSError`` when it cannot."""
        limits = self.limits
        options = [
            ("grpc.so_reuseport", 0),  # a port in use is an error, never shared with another process
            ("grpc.max_receive_message_length", limits.max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),  # a peer gone without closing is noticed, and its calls end
            ("grpc.keepalive_timeout_ms", 20_000),
        ]
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=limits.max_calls, thread_name_prefix="cairn-flight"),
            handlers=[self._handlers()],
            options=options,
            maximum_concurrent_rpcs=limits.max_calls,
        )
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError as e:  # grpcio: "Failed to bind to address …"
            raise OSError(str(e)) from None
        if not self.port:
            raise OSError(f"cannot listen on {address}")
        self._server.start()
        self.calls.start()
        return self.port

    def shutdown(self, grace: float) -> None:
        """Refuse new calls, give those in progress ``grace`` seconds, then cancel them (blocks)."""
        if self._server is not None:
            self._server.stop(grace).wait()
        self.calls.stop()

    # -- the RPCs --

    def _handlers(self) -> grpc.GenericRpcHandler:
        raw: dict[str, Any] = {"request_deserializer": None, "response_serializer": None}  # bytes both ways
        unimplemented = {
            m: grpc.stream_stream_rpc_method_handler(self._unimplemented(m), **raw)
            for m in ("ListFlights", "PollFlightInfo", "GetSchema", "DoPut", "DoExchange")
        }
        return grpc.method_handlers_generic_handler(
            SERVICE,
            unimplemented
            | {
                "Handshake": grpc.stream_stream_rpc_method_handler(self._handshake, **raw),
                "GetFlightInfo": grpc.stream_unary_rpc_method_handler(self._get_flight_info, **raw),
                "DoGet": grpc.stream_stream_rpc_method_handler(self._do_get, **raw),
                "DoAction": grpc.stream_stream_rpc_method_handler(self._do_action, **raw),
                "ListActions": grpc.stream_stream_rpc_method_handler(self._list_actions, **raw),
            },
        )

    def _call(self, context: Any, stream: bool = False) -> Call:
        kind, given = _authorization(context)
        has_token = kind == "bearer" and bool(given) and hmac.compare_digest(given.encode(), self._token)
        return Call(context, self.calls.enter(context, stream), has_token)

    @staticmethod
    def _request(call: Call, requests: Iterator[bytes]) -> bytes:
        """The call's one request message, waited for under the watch."""
        with call.watch.waiting():
            try:
                message = next(requests, None)
            except grpc.RpcError:  # the call ended (cancelled by its client or by the watchdog) before it came
                raise Refused(Code.CANCELLED, "the call was cancelled before its request came") from None
        if message is None:
            raise Refused(Code.INVALID_ARGUMENT, "the call carried no request message")
        return message

    def _get_flight_info(self, requests: Iterator[bytes], context: Any) -> bytes:
        def answer() -> bytes:
            call = self._call(context)
            descriptor = _decode("FlightDescriptor", self._request(call, requests))
            info = self.get_flight_info(call, descriptor)
            call.watch.since = time.monotonic()  # the answer is the client's to take now
            return info

        return _answered(context, answer)

    def _do_get(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        def answer() -> Iterator[bytes]:
            call = self._call(context, stream=True)
            ticket = _decode("Ticket", self._request(call, requests)).ticket
            schema, batches = self.do_get(call, ticket)
            yield from _watched(call.watch, frames(schema, batches))

        return _streamed(context, answer)

    def _do_action(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        def answer() -> Iterator[bytes]:
            call = self._call(context)
            action = _decode("Action", self._request(call, requests))
            results = self.do_action(call, action.type, action.body)
            yield from _watched(call.watch, (proto.encode(proto.new("Result", body=r)) for r in results))

        return _streamed(context, answer)

    def _list_actions(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        def answer() -> Iterator[bytes]:
            call = self._call(context)
            self._request(call, requests)
            kinds = (proto.new("ActionType", type=t, description=d) for t, d in self.list_actions())
            yield from _watched(call.watch, (proto.encode(k) for k in kinds))

        return _streamed(context, answer)

    def _handshake(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        """The API token as Flight's bearer authentication (what JDBC's driver does with ``token=``): a handshake
        with the right ``authorization: Bearer`` header is answered with it, which the client then sends on every
        call; a wrong token, or another kind of credential, is UNAUTHENTICATED; no credential at all is fine (a
        call without one is answered as the API answers a client without the token)."""

        def answer() -> Iterator[bytes]:
            call = self._call(context)
            kind, _ = _authorization(context)
            if kind and not call.has_token:
                raise Refused(
                    Code.UNAUTHENTICATED,
                    "this node takes its API token as a bearer header (authorization: Bearer <token>), and this "
                    "is not it",
                )
            self._request(call, requests)  # one request (empty for bearer authentication); any more are not read
            if call.has_token:
                context.send_initial_metadata((("authorization", _header(context)),))
            yield from ()

        return _streamed(context, answer)

    def _unimplemented(self, method: str) -> Callable[[Iterator[bytes], Any], Iterator[bytes]]:
        def handler(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
            return _streamed(context, lambda: _refuse(Refused(Code.UNIMPLEMENTED, f"{method} {NOT_SERVED}")))

        return handler


def _header(context: Any) -> str:
    value = dict(context.invocation_metadata() or ()).get("authorization", "")
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _authorization(context: Any) -> tuple[str, str]:
    """The call's credential: (``"bearer"``, token), (another scheme, in lower case, ""), or ("", "") for none."""
    scheme, _, rest = _header(context).strip().partition(" ")
    if not scheme:
        return "", ""
    return (scheme.lower(), rest.strip()) if scheme.lower() == "bearer" else (scheme.lower(), "")


async def _awaited(aw: Awaitable[T]) -> T:
    return await aw


def _decode(name: str, data: bytes) -> Any:
    try:
        return proto.decode(name, data)
    except ValueError:
        raise Refused(Code.INVALID_ARGUMENT, f"the request is not a Flight {name}") from None


def _refuse(refused: Refused) -> Iterator[bytes]:
    raise refused
    yield b""  # a generator, as the streaming handlers' answers are


def _watched(watch: Watch, messages: Iterator[bytes]) -> Iterator[bytes]:
    """``messages``, each given to gRPC under the watch (the client owes taking it); after the last, the call
    waits on its client until gRPC has sent everything (the watch stays until the call ends)."""
    for message in messages:
        with watch.waiting():
            yield message
    watch.since = time.monotonic()


def _status(context: Any, e: BaseException) -> None:
    """End the call with ``e``'s status and one line (``context.abort`` raises: gRPC then sends the status)."""
    if isinstance(e, Refused):
        context.abort(e.code, e.message)
    if isinstance(e, CairnError):
        refused = refusal(e)
        context.abort(refused.code, refused.message)
    # A bug: say so without leaking internals (no traceback, no path); the trace goes to the node's log.
    log.error("unhandled error in an Arrow Flight call", exc_info=e)
    context.abort(Code.INTERNAL, f"internal error: {type(e).__name__}")


def _answered(context: Any, answer: Callable[[], bytes]) -> bytes:
    try:
        return answer()
    except Exception as e:
        _status(context, e)
        raise  # not reached: abort raised


def _streamed(context: Any, answer: Callable[[], Iterator[bytes]]) -> Iterator[bytes]:
    try:
        yield from answer()
    except Exception as e:
        _status(context, e)
        raise  # not reached: abort raised
