"""Work directories under ``$CAIRN_HOME/tmp``: what a killed node left there swept at start, and a full disk met by
the work inside them answered as a 507."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from node.support.errors import InsufficientStorage, KuboError

log = logging.getLogger("cairn.datasets")

# Work directories under $CAIRN_HOME/tmp that a killed node leaves behind (a crash must not fill the disk over time):
# ingest-*, pull-* (datasets), inputs-*, result-* (queries), and upload-* (an upload's spool file, written by
# node/faces/api/server.py; a node killed mid-ingest left it: tests/integration/test_faults.py). Nothing in them is
# needed after a restart.
TMP_PREFIXES = ("ingest-", "pull-", "inputs-", "result-", "upload-")


def sweep_tmp(tmp_dir: Path) -> int:
    """Remove what an earlier run of the node left in ``tmp_dir`` (called once, before anything runs)."""
    swept = 0
    for entry in tmp_dir.iterdir():
        if entry.name.startswith(TMP_PREFIXES):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            swept += 1
    if swept:
        log.info("swept %d leftover work directories from %s", swept, tmp_dir)
    return swept


@contextmanager
def disk_full_is_507(what: str, tmp_dir: Path) -> Iterator[None]:
    """A full disk met by the work inside (its files cut under ``tmp_dir``, or Kubo storing them in its repo) is
    a clear 507 ``InsufficientStorage`` (the client can act on it), not a 500 or a 502; the caller removes its work
    files."""
    try:
        yield
    except (OSError, KuboError) as e:
        if InsufficientStorage.is_disk_full(e):
            where = "in Kubo's repo" if isinstance(e, KuboError) else f"under $CAIRN_HOME/{tmp_dir.name}"
            raise InsufficientStorage(what, where) from None
        raise
