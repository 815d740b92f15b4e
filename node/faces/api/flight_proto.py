"""The Arrow Flight and Flight SQL protobuf messages the Flight SQL face reads and writes (node/faces/api/flight.py,
node/faces/api/flight_rpc.py).

Flight's own messages (``FlightDescriptor``, ``Ticket``, ``FlightInfo``, …, package ``arrow.flight.protocol``) are
the gRPC service's requests and answers. Flight SQL puts its commands, tickets and action bodies in
``google.protobuf.Any`` (type URL ``type.googleapis.com/arrow.flight.protocol.sql.<Message>``). The field numbers
are those of the Arrow repository's ``format/Flight.proto`` and ``format/FlightSql.proto``. No generated module
ships with pyarrow, and ``protobuf`` is already a pinned dependency, so the messages are described here field by
field and built by protobuf's own message factory: the bytes are protobuf's, only the schema is ours. Fields the
face does not use (``transaction_id``, ``expiration_time``, …) are left out: protobuf keeps unknown fields and
ignores them. ``FlightData``, the one message of every streamed batch, is written by :func:`flight_data` without
protobuf (its body would be copied twice). tests/unit/test_flight_proto.py checks bytes real clients sent.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

FLIGHT_PACKAGE = "arrow.flight.protocol"
PACKAGE = "arrow.flight.protocol.sql"
TYPE_URL_PREFIX = "type.googleapis.com/"

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_UINT32 = descriptor_pb2.FieldDescriptorProto.TYPE_UINT32
_BOOL = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL
_INT32 = descriptor_pb2.FieldDescriptorProto.TYPE_INT32  # also an enum's encoding on the wire
_INT64 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

Field = tuple[str, int, int | str, bool]  # name, number, scalar type or message name, repeated

# Flight's messages: name -> fields, as in Flight.proto
FLIGHT_MESSAGES: dict[str, tuple[Field, ...]] = {
    "FlightDescriptor": (("type", 1, _INT32, False), ("cmd", 2, _BYTES, False), ("path", 3, _STRING, True)),
    "Ticket": (("ticket", 1, _BYTES, False),),
    "Location": (("uri", 1, _STRING, False),),
    "FlightEndpoint": (
        ("ticket", 1, "Ticket", False),
        ("location", 2, "Location", True),
        ("app_metadata", 4, _BYTES, False),
    ),
    "FlightInfo": (
        ("schema", 1, _BYTES, False),
        ("flight_descriptor", 2, "FlightDescriptor", False),
        ("endpoint", 3, "FlightEndpoint", True),
        ("total_records", 4, _INT64, False),
        ("total_bytes", 5, _INT64, False),
        ("ordered", 6, _BOOL, False),
        ("app_metadata", 7, _BYTES, False),
    ),
    "Action": (("type", 1, _STRING, False), ("body", 2, _BYTES, False)),
    "Result": (("body", 1, _BYTES, False),),
    "ActionType": (("type", 1, _STRING, False), ("description", 2, _STRING, False)),
}
DESCRIPTOR_CMD = 2  # FlightDescriptor.DescriptorType.CMD (PATH is 1)

# Flight SQL's messages: name -> fields, as in FlightSql.proto
MESSAGES: dict[str, tuple[Field, ...]] = {
    "CommandGetSqlInfo": (("info", 1, _UINT32, True),),
    "CommandStatementQuery": (("query", 1, _STRING, False),),
    "TicketStatementQuery": (("statement_handle", 1, _BYTES, False),),
    "CommandPreparedStatementQuery": (("prepared_statement_handle", 1, _BYTES, False),),
    "ActionCreatePreparedStatementRequest": (("query", 1, _STRING, False),),
    "ActionCreatePreparedStatementResult": (
        ("prepared_statement_handle", 1, _BYTES, False),
        ("dataset_schema", 2, _BYTES, False),
        ("parameter_schema", 3, _BYTES, False),
    ),
    "ActionClosePreparedStatementRequest": (("prepared_statement_handle", 1, _BYTES, False),),
    "CommandGetCatalogs": (),
    "CommandGetDbSchemas": (("catalog", 1, _STRING, False), ("db_schema_filter_pattern", 2, _STRING, False)),
    "CommandGetTables": (
        ("catalog", 1, _STRING, False),
        ("db_schema_filter_pattern", 2, _STRING, False),
        ("table_name_filter_pattern", 3, _STRING, False),
        ("table_types", 4, _STRING, True),
        ("include_schema", 5, _BOOL, False),
    ),
    "CommandGetTableTypes": (),
}


def _file(name: str, package: str, messages: dict[str, tuple[Field, ...]]) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")
    for message, fields in messages.items():
        msg = proto.message_type.add(name=message)
        for fname, number, ftype, repeated in fields:
            label = _REPEATED if repeated else _OPTIONAL
            if isinstance(ftype, str):  # a message of the same package
                msg.field.add(name=fname, number=number, type=_MESSAGE, type_name=f".{package}.{ftype}", label=label)
            else:
                msg.field.add(name=fname, number=number, type=ftype, label=label)
    return proto


def _build() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()  # our own pool: nothing else in the process can clash with it
    pool.Add(_file("cairn_flight.proto", FLIGHT_PACKAGE, FLIGHT_MESSAGES))
    pool.Add(_file("cairn_flight_sql.proto", PACKAGE, MESSAGES))
    classes = {name: pool.FindMessageTypeByName(f"{FLIGHT_PACKAGE}.{name}") for name in FLIGHT_MESSAGES}
    classes |= {name: pool.FindMessageTypeByName(f"{PACKAGE}.{name}") for name in MESSAGES}
    return {name: message_factory.GetMessageClass(d) for name, d in classes.items()}


_CLASSES = _build()


def type_url(name: str) -> str:
    return f"{TYPE_URL_PREFIX}{PACKAGE}.{name}"


def pack(name: str, **fields: Any) -> bytes:
    """The bytes of an ``Any`` holding message ``name`` with ``fields``."""
    message = _CLASSES[name](**fields)
    return bytes(any_pb2.Any(type_url=type_url(name), value=message.SerializeToString()).SerializeToString())


def unpack(data: bytes) -> tuple[str, Any]:
    """``(message name, message)`` of an ``Any``'s bytes; ``("", None)`` when it holds no message known here
    (the caller says what it expected). Raises ``ValueError`` on bytes that are not an ``Any`` at all."""
    holder = any_pb2.Any()
    try:
        holder.ParseFromString(data)
    except DecodeError as e:
        raise ValueError(f"not a protobuf Any: {e}") from None
    prefix = TYPE_URL_PREFIX + PACKAGE + "."
    name = holder.type_url[len(prefix) :] if holder.type_url.startswith(prefix) else ""
    if name not in MESSAGES:
        return "", None
    message = _CLASSES[name]()
    try:
        message.ParseFromString(holder.value)
    except DecodeError as e:
        raise ValueError(f"not a valid {name}: {e}") from None
    return name, message


# -- Flight's own messages (not in an Any) ---------------------------------------------------------------------


def new(name: str, **fields: Any) -> Any:
    """A Flight message ``name`` with ``fields`` (to fill further, or to ``encode``)."""
    return _CLASSES[name](**fields)


def encode(message: Any) -> bytes:
    return bytes(message.SerializeToString())


def decode(name: str, data: bytes) -> Any:
    """The Flight message ``name`` in ``data``; ``ValueError`` when the bytes are not one."""
    message = _CLASSES[name]()
    try:
        message.ParseFromString(data)
    except DecodeError as e:
        raise ValueError(f"not a valid {name}: {e}") from None
    return message


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_DATA_HEADER = b"\x12"  # FlightData field 2 (data_header), length-delimited
_DATA_BODY = b"\xc2\x3e"  # FlightData field 1000 (data_body), length-delimited: the varint of 1000 << 3 | 2


def flight_data(header: Any, body: Any = None) -> bytes:
    """The bytes of a ``FlightData`` message holding one Arrow IPC message: its flatbuffer ``header`` and its
    ``body`` (any bytes-like object; ``None`` or empty: none)."""
    parts = [_DATA_HEADER, _varint(len(header)), header]
    if body is not None and len(body):
        parts += [_DATA_BODY, _varint(len(body)), body]
    return b"".join(parts)
