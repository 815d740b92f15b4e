"""Pull sources (node/services/datasets/transfer.py): which redirects are followed (only within the source's origin,
checked
against an independent oracle, urllib.parse's urljoin and urlsplit with default ports, over generated Locations),
and the free-disk check. The hostile servers themselves are in tests/integration/test_confine.py."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from yarl import URL

from node.services.datasets.transfer import _origin, _redirect_target

BASE = "http://127.0.0.1:5000/odf/x/refs/head"
PORTS = {"http": 80, "https": 443}


def _oracle(location: str) -> bool:
    target = urllib.parse.urlsplit(urllib.parse.urljoin(BASE, location))
    here = urllib.parse.urlsplit(BASE)
    port = target.port or PORTS.get(target.scheme)
    return (target.scheme, (target.hostname or "").lower(), port) == ("http", here.hostname, here.port)


LOCATIONS = st.one_of(
    st.builds(
        lambda scheme, host, port, path: f"{scheme}{host}{port}{path}",
        st.sampled_from(["http://", "https://", "HTTP://", "//", "ftp://", ""]),
        st.sampled_from(["127.0.0.1", "localhost", "evil.example", "127.0.0.1.evil.example", ""]),
        st.sampled_from([":5000", ":5001", ":80", "", ":05000"]),
        st.sampled_from(["/a", "/odf/x/blocks/b", "", "?q=1", "/../../x"]),
    ),
    st.sampled_from(["/a", "b/c", "../d", "?x", "#f"]),
)


@given(LOCATIONS)
def test_same_origin_agrees_with_urllib(location: str) -> None:
    url = URL(BASE)
    target = _redirect_target(url, location)
    followed = target is not None and _origin(target) == _origin(url)
    try:
        want = _oracle(location)
    except ValueError:  # urllib cannot parse it either: must not be followed
        want = False
    assert want or not followed, (location, target)  # never anywhere the oracle calls another origin
    if location.lower().startswith(("http://", "https://", "/")):  # unambiguous: the two agree exactly
        assert followed == want, (location, target)


def test_no_or_malformed_location_goes_nowhere() -> None:
    url = URL(BASE)
    assert _redirect_target(url, None) is None
    assert _redirect_target(url, "http://[::1") is None


def test_slices_that_would_not_fit_the_disk_are_refused_before_fetching(tmp_path: Path) -> None:
    """The sizes a chain claims (a source may mint any chain) are checked against the free space first."""
    import shutil
    from types import SimpleNamespace

    from node.domain.model import parse_cid
    from node.services.datasets.chain import SliceRef
    from node.services.datasets.transfer import _refuse_overfill
    from node.support.errors import InsufficientStorage

    ds: Any = SimpleNamespace(tmp_dir=tmp_path)  # a small fake: only where the pull would write
    src: Any = SimpleNamespace(base="http://127.0.0.1:1/odf/x")
    free = shutil.disk_usage(tmp_path).free
    cid = parse_cid("bafkqaaa")
    _refuse_overfill(ds, src, [SliceRef(cid, 1, 1 << 20, "h", 0)])  # fits: no error
    with pytest.raises(InsufficientStorage, match="bytes free"):
        _refuse_overfill(ds, src, [SliceRef(cid, 1, free // 2 + 1, "h", 0), SliceRef(cid, 1, 1, "h", 0)])
