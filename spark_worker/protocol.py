"""The worker's wire format, shared by the worker and its client (standard library only).

One frame = a 12-byte prefix ``>IQ`` (header length, payload length), the header (a UTF-8 JSON
object), then the payload (``payload length`` raw bytes, 0 when there is none).

A connection carries request/response pairs in order: the client sends one frame, the worker
answers with one frame. Requests never carry a payload; a successful ``run`` answer carries the
result as an Arrow IPC stream.

Requests and answers (see docs/spark.md):

- ``{"op": "ping"}`` → ``{"ok": true, "spark": "4.3.0", "jobs": n, "protocol": 1, "pid": …, "jvm_pid": …,
  "profile": {"engine", "versions", "jvm", "settings"}}`` (the engine profile: spark_worker.session.engine_profile)
- ``{"op": "run", "job": id, "statement": sql, "inputs": {name: {"paths": […], "columns": […]}}}``
  → ``{"batch": 0}`` + Arrow IPC stream, ``{"batch": 1}`` + …, then
  ``{"ok": true, "job": id, "rows": n, "elapsed_ms": …, "ipc_ms": …, "ipc_bytes": …, "batches": n, "order": […]}``
- ``{"op": "stats"}`` → ``{"ok": true, "jobs": n, "failed": n, "succeeded": n, "cancelled": n, "running": id|null, …}``
- a run may carry ``"limits": {"rows": n, "bytes": n, "plan_bytes": n}`` (0: none; spark_worker/budget.py)
- any failure → ``{"ok": false, "error": "<one line>", "kind": "analysis"|"runtime"|"request"|"cancelled"|
  "refused" (guard or budget; ``condition`` names the rule)|"died" (the JVM died, e.g. out of memory),
  "condition": Spark error class or null, "sqlstate": … or null}``
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

PROTOCOL_VERSION = 2  # 2: a run's result streams as batch frames before its answer

PREFIX = struct.Struct(">IQ")
MAX_HEADER = 64 * 1024 * 1024  # a statement plus its input file lists; far above any real request
MAX_PAYLOAD = 1 << 40  # sanity bound only: a payload is one batch of a result

# Names the worker accepts (the node sends canonical names: inputs a, b, …, columns col_0, …).
INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
JOB_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
GLOB_CHARS = frozenset("*?[]{}\\")  # Hadoop expands these in paths: the worker refuses them

ERROR_KINDS = ("analysis", "runtime", "request", "cancelled", "refused", "died")


class ProtocolError(Exception):
    """A malformed frame: the connection cannot be used any more."""


def encode_frame(header: dict[str, Any], payload_len: int = 0) -> bytes:
    """The prefix and header of a frame; the caller sends ``payload_len`` payload bytes after it."""
    body = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if len(body) > MAX_HEADER:
        raise ProtocolError(f"frame header too large ({len(body)} bytes)")
    return PREFIX.pack(len(body), payload_len) + body


def decode_prefix(prefix: bytes) -> tuple[int, int]:
    header_len, payload_len = PREFIX.unpack(prefix)
    if header_len == 0 or header_len > MAX_HEADER:
        raise ProtocolError(f"bad frame header length {header_len}")
    if payload_len > MAX_PAYLOAD:
        raise ProtocolError(f"bad frame payload length {payload_len}")
    return header_len, payload_len


def decode_header(body: bytes) -> dict[str, Any]:
    try:
        header = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"frame header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not a JSON object")
    return header


# The environment variable that carries the Spark Connect token from the node to the worker (never argv).
TOKEN_ENV = "CAIRN_SPARK_TOKEN"
