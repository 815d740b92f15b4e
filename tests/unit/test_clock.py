"""The node's one clock (``node.support.wall_clock``): epoch seconds for the index, RFC 3339 text for signed objects."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.support import wall_clock as clock

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")


def test_now_is_epoch_seconds() -> None:
    before = time.time()
    got = clock.now()
    assert before <= got <= time.time()


def test_utc_now_iso_is_the_signed_objects_format() -> None:
    before = dt.datetime.now(dt.UTC)
    text = clock.utc_now_iso()
    after = dt.datetime.now(dt.UTC)
    assert ISO.fullmatch(text), text
    assert before - dt.timedelta(microseconds=1) <= dt.datetime.fromisoformat(text) <= after


@given(st.datetimes(timezones=st.timezones()))
def test_iso_utc_round_trips_any_instant(t: dt.datetime) -> None:
    text = clock.iso_utc(t)
    assert ISO.fullmatch(text), text
    # Same instant, whatever zone it was given in (subtraction: == across zones is False in DST folds, PEP 495).
    assert dt.datetime.fromisoformat(text) - EPOCH == t - EPOCH
    # The format signed objects had before node.support.wall_clock existed (metadata blocks, receipts, announcements).
    assert text == t.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        clock.iso_utc(dt.datetime(2026, 1, 1))
