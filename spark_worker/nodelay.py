"""TCP_NODELAY on the JVM's end of the calling thread's py4j connection.

py4j's Java side writes each answer through an 8 KiB ``BufferedWriter`` on a socket that keeps Nagle's algorithm
on. An answer longer than 8 KiB leaves in two writes: the second waits for the ACK of the first, and Linux delays
that ACK by 40 ms. Measured on these machines (Spark 4.3, py4j's pinned threads): an 8,180-character string came
back from the JVM in 0.2 ms, an 8,200-character one in 44 ms, and so did every longer one; with this option set on
the JVM's socket, 0.15 ms (9 KB) and 9.7 ms (1 MB). The guard's plan JSON is over 8 KiB for a filter under a
GROUP BY (``TreeNode.toJSON``, spark_worker/guard.py), and so is a wide input's schema: 44 ms of a job each time
(on the miss path).

py4j gives no setting for it, and a listening socket's options cannot be set from Java, so each connection is set
once it exists: the JVM thread serving this Python thread (py4j pins one to each) holds the connection, whose
``socket`` field is reached by reflection (Spark opens ``java.base/java.lang`` to it). If any step fails, jobs run as
before, 40 ms slower per long answer; the reason is logged once.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

_done = threading.local()  # .ok: this thread's connection was tried (True: set), so each thread tries once
_warned = threading.Event()


def no_delay(jvm: Any) -> bool:
    """Set TCP_NODELAY on the Java end of this thread's py4j connection (tried once per thread); whether it is set."""
    ok = getattr(_done, "ok", None)
    if ok is not None:
        return bool(ok)
    try:
        connection_socket(jvm).setTcpNoDelay(True)
        _done.ok = True
    except Exception as e:  # noqa: BLE001 - only speed is at stake: py4j answers over 8 KiB stay 40 ms slower
        _done.ok = False
        if not _warned.is_set():
            _warned.set()
            log.warning("py4j: could not set TCP_NODELAY on the JVM's socket (%s: %s)", type(e).__name__, e)
    return bool(_done.ok)


def connection_socket(jvm: Any) -> Any:
    """The ``java.net.Socket`` of the py4j connection the JVM serves this thread's calls on."""
    thread = jvm.java.lang.Thread.currentThread()
    connection = _runnable(jvm, thread)
    return _field(connection.getClass(), "socket").get(connection)


def _runnable(jvm: Any, thread: Any) -> Any:
    """The Runnable a ``java.lang.Thread`` runs: ``target`` up to JDK 18, ``holder.task`` since JDK 19."""
    thread_class = jvm.java.lang.Class.forName("java.lang.Thread")
    try:
        return _field(thread_class, "target").get(thread)
    except Exception:  # noqa: BLE001 - py4j raises its own error for a missing field: try the newer layout
        holder = _field(thread_class, "holder").get(thread)
        return _field(holder.getClass(), "task").get(holder)


def _field(java_class: Any, name: str) -> Any:
    field = java_class.getDeclaredField(name)
    field.setAccessible(True)
    return field
