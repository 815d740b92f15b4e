"""One call to the Spark worker: a request frame on a fresh connection to its Unix socket, and the answer
(``spark_worker.protocol``); a run's result batches arrive before its answer. Closing the connection while a job runs
makes the worker cancel that job."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from spark_worker.protocol import PREFIX, ProtocolError, decode_header, decode_prefix, encode_frame


async def exchange(
    socket_path: Path,
    header: dict[str, Any],
    *,
    on_sent: Callable[[], None] | None = None,
    batches: list[pa.RecordBatch] | None = None,
) -> tuple[dict[str, Any], pa.Buffer | None]:
    """One request/answer on a fresh connection (closed on return, error or cancellation). ``batches``: a run's
    result batches, received before its answer (spark_worker.protocol), are appended there."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, str(socket_path))
        await loop.sock_sendall(sock, encode_frame(header))
        if on_sent is not None:
            on_sent()
        while True:
            prefix = await _recv_exact(loop, sock, PREFIX.size)
            header_len, payload_len = decode_prefix(bytes(prefix))
            answer = decode_header(bytes(await _recv_exact(loop, sock, header_len)))
            payload = pa.py_buffer(await _recv_exact(loop, sock, payload_len)) if payload_len else None
            if batches is None or "batch" not in answer:
                return answer, payload
            if answer["batch"] != len(batches) or payload is None:
                raise ProtocolError(
                    f"batch frame {answer['batch']!r} with {payload_len} bytes, expected {len(batches)}"
                )
            batches.append(own_batch(payload))
    finally:
        sock.close()


async def _recv_exact(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = await loop.sock_recv_into(sock, view[got:])
        if k == 0:
            raise ConnectionResetError("the worker closed the connection")  # an OSError: callers catch those
        got += k
    return buf


def own_batch(payload: pa.Buffer) -> pa.RecordBatch:
    """The one record batch of a batch frame, each column copied into its own memory: the frame's buffer is freed at
    once, and the columns can later be made one chunk each while freeing the batches column by column
    (``spark._one_chunk_columns``: the result held about once, not twice)."""
    try:
        batch = pa.ipc.open_stream(payload).read_next_batch()
    except (pa.ArrowInvalid, StopIteration) as e:
        raise ProtocolError(f"a batch frame is not one Arrow record batch: {e}") from None
    return pa.RecordBatch.from_arrays([pa.concat_arrays([c]) for c in batch.columns], schema=batch.schema)
