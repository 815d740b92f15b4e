"""The few Arrow Flight SQL protobuf messages the Flight SQL face reads and writes (node/api/flight.py).

Flight SQL puts its commands, tickets and action bodies in ``google.protobuf.Any`` (type URL
``type.googleapis.com/arrow.flight.protocol.sql.<Message>``); the field numbers are those of the Arrow repository's
``format/FlightSql.proto``. No generated module ships with pyarrow, and ``protobuf`` is already a pinned dependency,
so the messages are described here field by field and built by protobuf's own message factory: the bytes are
protobuf's, only the schema is ours. Fields the face does not use (``transaction_id``, …) are left out: protobuf
keeps unknown fields and ignores them. tests/unit/test_flight_proto.py checks bytes a real client sent.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

PACKAGE = "arrow.flight.protocol.sql"
TYPE_URL_PREFIX = "type.googleapis.com/"

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_UINT32 = descriptor_pb2.FieldDescriptorProto.TYPE_UINT32
_BOOL = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# message name -> (field name, number, type, repeated), as in FlightSql.proto
MESSAGES: dict[str, tuple[tuple[str, int, int, bool], ...]] = {
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


def _build() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(name="cairn_flight_sql.proto", package=PACKAGE, syntax="proto3")
    for name, fields in MESSAGES.items():
        msg = proto.message_type.add(name=name)
        for fname, number, ftype, repeated in fields:
            msg.field.add(name=fname, number=number, type=ftype, label=_REPEATED if repeated else _OPTIONAL)
    pool = descriptor_pool.DescriptorPool()  # our own pool: nothing else in the process can clash with it
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}")) for name in MESSAGES}


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
    if name not in _CLASSES:
        return "", None
    message = _CLASSES[name]()
    try:
        message.ParseFromString(holder.value)
    except DecodeError as e:
        raise ValueError(f"not a valid {name}: {e}") from None
    return name, message
