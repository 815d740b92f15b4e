"""Structured logging: ``key=value`` text or one JSON object per line, to stderr."""

from __future__ import annotations

import json
import logging
import sys
import time

# Attributes every LogRecord has; anything else came from ``extra=`` and is a structured field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [f"{ts}Z", record.levelname.lower(), record.name, json.dumps(record.getMessage())]
        parts += [f"{k}={json.dumps(v, default=str)}" for k, v in _fields(record).items()]
        if record.exc_info:
            parts.append(json.dumps(self.formatException(record.exc_info)))
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Chatty third parties: only their warnings.
    for name in ("aiohttp.access", "libp2p", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)
