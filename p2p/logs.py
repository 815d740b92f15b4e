"""Taming py-libp2p's logging.

On import, libp2p configures its ``libp2p`` logger (no handlers, ``propagate=False``, level
WARNING unless ``LIBP2P_DEBUG`` is set), so its warnings reach stderr through Python's
last-resort handler, bypassing the node's logging setup. It logs routine p2p events (a peer
went away, a dial failed) as multi-line ERRORs, and its auto-connector sets itself to INFO.

:func:`tame_libp2p_logging` routes every ``libp2p.*`` record through one handler that
re-emits it on the ``cairn.p2p.libp2p`` logger (so the node's handlers and levels apply):
one line (exception reduced to ``Type: message``), libp2p WARNING → DEBUG, ERROR and above →
WARNING, and the same line repeated within a minute dropped.

Not covered: a few libp2p modules call ``logging.warning(...)`` on the *root* logger (e.g.
"Error resetting stream" while a connection is torn down); those follow the root config.
"""

from __future__ import annotations

import logging
import os
import time

TARGET = "cairn.p2p.libp2p"
REPEAT_WINDOW = 60.0


class OneLineForwarder(logging.Handler):
    def __init__(self, target: str = TARGET, repeat_window: float = REPEAT_WINDOW) -> None:
        super().__init__(logging.DEBUG)
        self._target = logging.getLogger(target)
        self._window = repeat_window
        self._recent: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = logging.WARNING if record.levelno >= logging.ERROR else logging.DEBUG
            if not self._target.isEnabledFor(level):
                return
            lines = [line.strip() for line in record.getMessage().splitlines() if line.strip()]
            text = " | ".join(lines)
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                first = next((ln for ln in str(exc).splitlines() if ln.strip()), "")
                text += f" ({type(exc).__name__}: {first.strip()})" if first else f" ({type(exc).__name__})"
            text = f"{record.name}: {text}"
            if len(text) > 400:
                text = text[:399] + "…"
            now = time.monotonic()
            if now - self._recent.get(text, -1e18) < self._window:
                return
            if len(self._recent) > 1000:
                self._recent.clear()
            self._recent[text] = now
            out = logging.LogRecord(
                self._target.name, level, record.pathname, record.lineno, text, None, None, record.funcName
            )
            out.created, out.msecs = record.created, record.msecs
            out.thread, out.threadName = record.thread, record.threadName
            self._target.handle(out)
        except Exception:  # noqa: BLE001  pragma: no cover - logging must never raise; handleError reports it
            self.handleError(record)


_tamed = False


def tame_libp2p_logging(force: bool = False) -> None:
    """Install the forwarder on the ``libp2p`` logger. Idempotent; does nothing when
    ``LIBP2P_DEBUG`` is set (libp2p's own debug configuration is then what the user asked
    for), unless ``force``."""
    global _tamed
    if (_tamed and not force) or (os.environ.get("LIBP2P_DEBUG") and not force):
        return
    import libp2p

    del libp2p

    _tamed = True
    root = logging.getLogger("libp2p")
    root.handlers[:] = [OneLineForwarder()]
    root.setLevel(logging.WARNING)
    root.propagate = False
    # Sets itself to INFO at import and reports its state every few seconds.
    logging.getLogger("libp2p.network.auto_connector").setLevel(logging.WARNING)
