"""The Flight SQL messages of node/faces/api/flight_proto.py against bytes a real client sent.

The hex constants are what ADBC's Flight SQL driver (adbc-driver-flightsql 1.13.0, the pinned test client) sent
to a Flight server: ``cursor.execute("SELECT 1")`` (a CreatePreparedStatement action), the GetSqlInfo it asks on
connect, and ``adbc_get_table_types()``.
"""

from __future__ import annotations

import pytest

from node.faces.api import flight_proto as proto

CREATE_PREPARED_SELECT_1 = bytes.fromhex(
    "0a52747970652e676f6f676c65617069732e636f6d2f6172726f772e666c696768742e70726f746f636f6c2e73716c2e416374696f6e"
    "437265617465507265706172656453746174656d656e7452657175657374120a0a0853454c4543542031"
)
GET_SQL_INFO_8 = bytes.fromhex(
    "0a3f747970652e676f6f676c65617069732e636f6d2f6172726f772e666c696768742e70726f746f636f6c2e73716c2e436f6d6d616e"
    "6447657453716c496e666f12030a0108"
)
GET_TABLE_TYPES = bytes.fromhex(
    "0a42747970652e676f6f676c65617069732e636f6d2f6172726f772e666c696768742e70726f746f636f6c2e73716c2e436f6d6d616e"
    "644765745461626c655479706573"
)


def test_reads_what_adbc_sends() -> None:
    name, msg = proto.unpack(CREATE_PREPARED_SELECT_1)
    assert name == "ActionCreatePreparedStatementRequest" and msg.query == "SELECT 1"
    name, msg = proto.unpack(GET_SQL_INFO_8)
    assert name == "CommandGetSqlInfo" and list(msg.info) == [8]
    assert proto.unpack(GET_TABLE_TYPES)[0] == "CommandGetTableTypes"


def test_writes_the_bytes_a_client_would() -> None:
    assert proto.pack("ActionCreatePreparedStatementRequest", query="SELECT 1") == CREATE_PREPARED_SELECT_1
    assert proto.pack("CommandGetSqlInfo", info=[8]) == GET_SQL_INFO_8
    assert proto.pack("CommandGetTableTypes") == GET_TABLE_TYPES


def test_round_trips_the_answers() -> None:
    body = proto.pack("ActionCreatePreparedStatementResult", prepared_statement_handle=b"h", dataset_schema=b"")
    name, msg = proto.unpack(body)
    assert name == "ActionCreatePreparedStatementResult" and msg.prepared_statement_handle == b"h"
    # field 1, length-delimited: the proto3 bytes of TicketStatementQuery{statement_handle = "abc"}
    assert proto.pack("TicketStatementQuery", statement_handle=b"abc").endswith(b"\x12\x05\x0a\x03abc")
    name, msg = proto.unpack(proto.pack("CommandStatementQuery", query="SELECT 2"))
    assert name == "CommandStatementQuery" and msg.query == "SELECT 2"


def test_unknown_and_malformed() -> None:
    assert proto.unpack(b"\x0a\x0dexample.org/X") == ("", None)  # an Any of a message this module does not know
    with pytest.raises(ValueError, match="not a protobuf Any"):
        proto.unpack(b"\xff\xff\xff")


def test_flight_messages_are_the_bytes_arrow_writes_and_reads() -> None:
    """Flight's own messages (the gRPC requests and answers) against pyarrow.flight's serializations."""
    import pyarrow as pa
    import pyarrow.flight as fl

    schema = pa.schema([("a", pa.int64())])
    info = proto.new("FlightInfo", schema=schema.serialize().to_pybytes(), total_records=5, total_bytes=-1)
    info.flight_descriptor.type, info.flight_descriptor.cmd = proto.DESCRIPTOR_CMD, b"cmd"
    info.endpoint.add().ticket.ticket = b"tick"
    info.app_metadata = b"meta"
    theirs = fl.FlightInfo(
        schema, fl.FlightDescriptor.for_command(b"cmd"), [fl.FlightEndpoint(b"tick", [])], 5, -1, app_metadata=b"meta"
    )
    assert proto.encode(info) == theirs.serialize()
    assert proto.decode("Ticket", fl.Ticket(b"t").serialize()).ticket == b"t"
    action = proto.decode("Action", fl.Action("Kind", b"body").serialize())
    assert (action.type, action.body) == ("Kind", b"body")
    path = proto.decode("FlightDescriptor", fl.FlightDescriptor.for_path("x").serialize())
    assert path.type != proto.DESCRIPTOR_CMD and list(path.path) == ["x"]
    with pytest.raises(ValueError, match="not a valid Ticket"):
        proto.decode("Ticket", b"\xff\xff\xff")


def test_flight_data_frames_an_ipc_message() -> None:
    # field 2 (data_header) then field 1000 (data_body), each length-delimited; 300 needs a two-byte varint
    assert proto.flight_data(b"h" * 300, b"body") == b"\x12\xac\x02" + b"h" * 300 + b"\xc2\x3e\x04body"
    assert proto.flight_data(b"h") == b"\x12\x01h"  # a schema message: no body
