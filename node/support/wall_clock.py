"""The node's wall clock: the one place that reads it for timestamps that are kept.

Two forms, one source:
- :func:`now`: seconds since the epoch (float), for index rows (``created``, ``updated``, claim and
  refusal times) and files;
- :func:`utc_now_iso`: RFC 3339 UTC with microseconds and ``Z`` (``2026-11-25T06:04:54.123456Z``),
  the form signed objects carry (the ``time`` of metadata blocks, receipts and announcements;
  node/domain/model/metadata.py, query.py). Changing it changes the bytes, hence the CIDs, of new objects.

Durations (timeouts, uptimes, latencies) are not timestamps: they use ``time.monotonic`` /
``time.perf_counter`` where they are measured.
"""

from __future__ import annotations

import datetime as dt
import time


def now() -> float:
    """Seconds since the epoch, UTC."""
    return time.time()


def iso_utc(t: dt.datetime) -> str:
    """``t`` (timezone-aware) as the RFC 3339 text signed objects carry: UTC, microseconds, ``Z``."""
    if t.tzinfo is None:
        raise ValueError("a naive datetime has no defined instant")  # a bug in the caller, not input
    return t.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def utc_now_iso() -> str:
    """The current instant as :func:`iso_utc` text."""
    return iso_utc(dt.datetime.fromtimestamp(now(), dt.UTC))
