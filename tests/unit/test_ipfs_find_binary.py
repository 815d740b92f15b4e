"""Where the node finds its Kubo binary."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from node.adapters.ipfs import find_kubo_binary
from node.support.errors import ConfigError


def fake_ipfs(path: Path, version: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'version --number' ] && echo {version}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("CAIRN_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return tmp_path


def test_configured_path(clean_env: Path) -> None:
    binary = fake_ipfs(clean_env / "opt" / "ipfs", "0.1.0")
    assert find_kubo_binary(str(binary)) == binary
    with pytest.raises(ConfigError, match="does not exist"):
        find_kubo_binary(str(clean_env / "missing"))


def test_cairn_cache_then_xdg(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = fake_ipfs(clean_env / "xdg" / "cairn" / "kubo" / "v0.42.0" / "ipfs", "0.42.0")
    assert find_kubo_binary() == xdg
    cached = fake_ipfs(clean_env / "cc" / "kubo" / "v0.42.0" / "ipfs", "0.42.0")
    monkeypatch.setenv("CAIRN_CACHE", str(clean_env / "cc"))
    assert find_kubo_binary() == cached


def test_home_cache(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME")
    home = fake_ipfs(clean_env / "home" / ".cache" / "cairn" / "kubo" / "v0.42.0" / "ipfs", "0.42.0")
    assert find_kubo_binary() == home


def test_path_only_with_the_pinned_version(clean_env: Path) -> None:
    on_path = fake_ipfs(clean_env / "bin" / "ipfs", "0.41.0")
    with pytest.raises(ConfigError, match=r"scripts/setup/kubo\.sh"):
        find_kubo_binary()
    fake_ipfs(on_path, "0.42.0")
    assert find_kubo_binary() == on_path
    assert os.access(on_path, os.X_OK)
