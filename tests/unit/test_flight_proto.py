"""The Flight SQL messages of node/api/flight_proto.py against bytes a real client sent.

The hex constants are what ADBC's Flight SQL driver (adbc-driver-flightsql 1.13.0, the pinned test client) sent
to a Flight server: ``cursor.execute("SELECT 1")`` (a CreatePreparedStatement action), the GetSqlInfo it asks on
connect, and ``adbc_get_table_types()``.
"""

from __future__ import annotations

import pytest

from node.api import flight_proto as proto

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
