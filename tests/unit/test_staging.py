"""``spark.staging`` (node/services/resolve/staging.py): slices staged once under their CID, shared by
nodes, never overwritten, checked before use. The end-to-end test (Spark executors reading a staging directory two
nodes share) is in tests/integration/test_spark_modes.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from config import SettingsError, load_settings, staging_problem
from node.adapters.ipfs.unixfs import UnixfsHasher
from node.services.resolve.spark import _run_request
from node.services.resolve.staging import Staging
from node.support.errors import SliceCorrupt


def _slice(path: Path, data: bytes) -> tuple[Path, object]:
    path.write_bytes(data)
    hasher = UnixfsHasher()
    hasher.update(data)
    return path, hasher.cid()


async def test_two_nodes_share_one_write(tmp_path: Path) -> None:
    """The first node writes the slice (atomically, under its CID); the second finds it, checks it, reuses it: the
    file is the same inode with the same mtime, and no temp file is left."""
    local, cid = _slice(tmp_path / "cache-a.parquet", b"PAR1" + os.urandom(3000) + b"PAR1")
    other, _ = _slice(tmp_path / "cache-b.parquet", local.read_bytes())
    shared = tmp_path / "shared"
    a, b = Staging(f"file://{shared}"), Staging(f"file://{shared}/")
    path = await a.stage(local, cid)  # type: ignore[arg-type]
    assert Path(path).parent == shared and Path(path).name.endswith(".parquet") and str(cid) in path
    before = os.stat(path)
    assert await b.stage(other, cid) == path  # type: ignore[arg-type]
    assert await b.stage(other, cid) == path  # type: ignore[arg-type]
    after = os.stat(path)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert a.counts == {"written": 1} and b.counts == {"reused": 2}
    assert os.listdir(shared) == [Path(path).name]  # the temp file is gone
    assert Path(path).read_bytes() == local.read_bytes()  # noqa: ASYNC240  a tmp file of 3 kB
    # An input made on the spot (an empty version's file) is staged under the CID of its bytes.
    assert await b.stage(local) == path and b.counts["reused"] == 3


async def test_a_wrong_staged_file_is_refused_not_replaced(tmp_path: Path) -> None:
    local, cid = _slice(tmp_path / "s.parquet", b"x" * 100)
    shared = tmp_path / "shared"
    shared.mkdir()
    staged = shared / f"{cid}.parquet"
    staged.write_bytes(b"y" * 100)  # the right size, the wrong bytes
    with pytest.raises(SliceCorrupt, match="gives bafk"):
        await Staging(f"file://{shared}").stage(local, cid)  # type: ignore[arg-type]
    staged.write_bytes(b"y" * 7)
    with pytest.raises(SliceCorrupt, match="has 7 bytes, the slice 100"):
        await Staging(f"file://{shared}").stage(local, cid)  # type: ignore[arg-type]
    assert staged.read_bytes() == b"y" * 7  # never overwritten


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("/shared", "must be file:///ABSOLUTE/PATH"),
        ("file://host/shared", "no host"),
        ("file://shared", "no host"),
        ("hdfs://namenode", "needs a host or bucket and a folder"),
        ("s3://bucket/dir", "s3a://BUCKET/DIR"),
        ("s3a://bucket/dir/*", "glob"),
    ],
)
def test_staging_setting_is_checked(url: str, needle: str, tmp_path: Path) -> None:
    assert needle in staging_problem(url)
    with pytest.raises(SettingsError, match=r"spark\.staging"):
        load_settings(tmp_path, env={}, overrides={"spark.staging": url})


def test_remote_locations_go_to_spark_as_they_are() -> None:
    for url in ("", "file:///shared", "hdfs://nn:8020/cairn", "s3a://bucket/cairn"):
        assert staging_problem(url) == ""
    request = _run_request("j", "SELECT 1", {"a": (["s3a://b/c/x.parquet", "hdfs://nn/c/y.parquet"], ["col_0"])})
    assert request["inputs"]["a"]["paths"] == ["s3a://b/c/x.parquet", "hdfs://nn/c/y.parquet"]
