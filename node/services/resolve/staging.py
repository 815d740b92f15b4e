"""Input slices staged where Spark's executors can read them (docs/scaling.md "Staging").

A node's slice cache is on the node's disk; a standalone, YARN or Kubernetes executor, or a Connect server, runs
elsewhere. ``spark.staging`` names a location the driver and every executor share: a ``file://`` path on a shared
filesystem, ``hdfs://…`` or ``s3a://…``. Each slice goes there once, under its CID (``<staging>/<cid>.parquet``):
the name says the bytes, so nodes configured with the same location share the files, and nothing is ever
overwritten. A file already there is checked before its first use by this node (its size, then its bytes must give
the CID, as the cache's fetches are: node/services/datasets/fetching.py), so a shared location cannot feed this node
bytes
its receipts would not name.

``file://`` is written with a temp file hard-linked to its final name (``link`` fails if the name exists, so two
nodes staging the same slice at once never replace each other's file); other schemes go through ``pyarrow.fs``
(``s3a://`` is ``s3://`` there; ``hdfs://`` needs libhdfs), with a temp name moved into place (an S3 object appears
whole when its upload ends). Spark reads the location under its own scheme.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from multiformats import CID

from config import staging_problem
from node.adapters.ipfs.unixfs import file_cid, read_cid
from node.domain.model import cid_str
from node.support.errors import SliceCorrupt

_READ = 1 << 20


class Staging:
    """One node's view of a staging location. ``counts``: ``written`` (slices this node put there) and ``reused``
    (slices it found there, checked), for /metrics (``cairn_spark_staged``)."""

    def __init__(self, url: str) -> None:
        why = staging_problem(url)
        if why or not url:
            raise ValueError(why or "no staging location")
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        self.scheme = parts.scheme
        self.root = Path(parts.path) if self.scheme == "file" else None
        self.counts: Counter[str] = Counter()
        self._checked: set[str] = set()  # CIDs whose staged file this node has checked (a file never changes)
        self._fs: Any = None

    async def stage(self, local: Path, cid: CID | None = None) -> str:
        """The path Spark reads for the file ``local`` (the slice ``cid``; None: hashed here, as for an empty input
        made on the spot), staged first if it is not there. Raises SliceCorrupt if a staged file is not ``cid``."""
        if cid is None:
            cid = await asyncio.to_thread(file_cid, local)
        name = f"{cid_str(cid)}.parquet"
        if self.root is not None:
            return await asyncio.to_thread(self._stage_file, self.root, local, cid, name)
        return await asyncio.to_thread(self._stage_fs, local, cid, name)

    def _stage_file(self, root: Path, local: Path, cid: CID, name: str) -> str:
        target = root / name
        if not target.exists():
            root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=root)
            try:
                with os.fdopen(fd, "wb") as out, open(local, "rb") as src:
                    shutil.copyfileobj(src, out, _READ)
                os.chmod(tmp, 0o644)  # executors may run as another user
                with contextlib.suppress(FileExistsError):  # another node staged it first: check theirs below
                    os.link(tmp, target)
                    self.counts["written"] += 1
                    self._checked.add(name)
                    return str(target)
            finally:
                os.unlink(tmp)
        self._check(cid, name, local.stat().st_size, target.stat().st_size, functools.partial(open, target, "rb"))
        return str(target)

    def _stage_fs(self, local: Path, cid: CID, name: str) -> str:
        from pyarrow import fs as pafs  # only for hdfs:// and s3a://

        if self._fs is None:
            self._fs, self._base = pafs.FileSystem.from_uri(self.url.replace("s3a://", "s3://", 1))
        target = f"{self._base}/{name}"
        info = self._fs.get_file_info(target)
        if info.type == pafs.FileType.NotFound:
            tmp = f"{self._base}/.{name}.{os.getpid()}.{os.urandom(4).hex()}.part"
            with self._fs.open_output_stream(tmp) as out, open(local, "rb") as src:
                shutil.copyfileobj(src, out, _READ)
            self._fs.move(tmp, target)
            self.counts["written"] += 1
            self._checked.add(name)
        else:
            self._check(cid, name, local.stat().st_size, info.size, lambda: self._fs.open_input_stream(target))
        return f"{self.url}/{name}"

    def _check(self, cid: CID, name: str, want: int, size: int | None, opener: Any) -> None:
        """A staged file found there: the slice's size, and (once per node) bytes that give its CID."""
        if size != want:
            raise SliceCorrupt(f"the staged file {name} has {size} bytes, the slice {want}: not used (remove it)")
        if name not in self._checked:
            with opener() as f:
                got = read_cid(f.read)
            if bytes(got) != bytes(cid):
                raise SliceCorrupt(f"the staged file {name} gives {cid_str(got)}: not used (remove it)")
            self._checked.add(name)
        self.counts["reused"] += 1
