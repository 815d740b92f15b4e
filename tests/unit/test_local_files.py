"""``path=`` placement rules (node/faces/api/local_files.py) against an independent oracle: pathlib's
``is_relative_to`` on the resolved paths, over generated paths with ``..``, ``.``, symlinks and names that share
prefixes (``/a`` vs ``/ab``). The end-to-end behaviour on a real node is tests/integration/test_confine.py."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.faces.api.local_files import check_place, open_local
from node.support.errors import InvalidInput, PathRefused

NAMES = ["a", "ab", "home", "home2", "..", ".", "link", "data.csv"]


def _tree(root: Path) -> None:
    """root/{a,ab,home,home2}/ with data.csv in each; home/secret; a/link -> ../home; ab/link -> ../a."""
    for d in ("a", "ab", "home", "home2"):
        (root / d).mkdir()
        (root / d / "data.csv").write_text("x\n1\n")
    (root / "home" / "secret").write_text("k")
    (root / "a" / "link").symlink_to(root / "home")
    (root / "ab" / "link").symlink_to(root / "a")


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.sampled_from(NAMES), min_size=1, max_size=6), allowed=st.sampled_from(["a", "ab", "home2"]))
def test_check_place_agrees_with_pathlib(parts: list[str], allowed: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(os.path.realpath(tmp))
        _tree(root)
        home, dirs = root / "home", [str(root / allowed)]
        real = Path(os.path.realpath(root.joinpath(*parts)))
        ok = real.is_relative_to(root / allowed) and not real.is_relative_to(home)
        try:
            check_place(str(real), home, dirs, "p")
            accepted = True
        except PathRefused:
            accepted = False
        assert accepted == ok, (parts, allowed, real)


def test_open_local_refusals(tmp_path: Path) -> None:
    _tree(tmp_path)
    home, dirs = tmp_path / "home", [str(tmp_path / "a")]
    with open_local(str(tmp_path / "a" / "data.csv"), home, dirs) as f:
        assert f.read() == b"x\n1\n" and f.name.endswith("data.csv")
    for path in (tmp_path / "a" / "link" / "secret", tmp_path / "ab" / "data.csv", tmp_path / "a" / ".." / "ab"):
        with pytest.raises(PathRefused):
            open_local(str(path), home, dirs)
    with pytest.raises(PathRefused, match="off"):
        open_local(str(tmp_path / "a" / "data.csv"), home, [])
    with pytest.raises(InvalidInput, match="absolute"):
        open_local("a/data.csv", home, dirs)
    with pytest.raises(InvalidInput, match="no file"):
        open_local(str(tmp_path / "a" / "absent.csv"), home, dirs)
