"""``path=``: the files a client on the node's machine may have it ingest in place, and no others: a token holder
must not reach every file the node can read (docs/api.md "Ingesting a local file").

A dataset is readable without the token and pinned where peers fetch it, so ``path=`` must not turn the node into
a reader of whatever it can open (``node.key``, ``api.token``, ``~/.ssh``). The rules, in order:

1. the path is absolute; symlinks and ``..`` are resolved (``realpath``) before anything is checked;
2. nothing under ``$CAIRN_HOME`` (keys, token, index, Kubo repo), whatever ``api.ingest_dirs`` says;
3. only under one of ``api.ingest_dirs`` (none set: ``path=`` is off, and ``cairn add`` uploads instead);
4. only a regular file, opened without following a symlink, and the file actually opened is checked again (its
   ``/proc/self/fd`` name), so a directory swapped between the check and the open changes nothing; a file with
   several hard links is refused if one of them is in ``$CAIRN_HOME``.

Refusals outside the allowed directories are answered before the file is touched, so they tell nothing of what
exists there. No message holds the file's contents.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from node.support.errors import InvalidInput, PathRefused, quote

_HOW = "set api.ingest_dirs to the directories the node may read, or upload the file"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_place(real: str, home: Path, dirs: Sequence[str], shown: str) -> None:
    """Refuse a resolved path under the node's home or outside every allowed directory."""
    if _under(real, os.path.realpath(home)):
        raise PathRefused(f"path= refused: {shown} is in the node's home ($CAIRN_HOME), which is never ingested")
    if not any(_under(real, os.path.realpath(d)) for d in dirs):
        raise PathRefused(f"path= refused: {shown} is not under api.ingest_dirs; {_HOW}")


def _opened_name(fd: int) -> str | None:
    """The path the kernel has for an open file (Linux), to check the file actually opened."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None  # no /proc: the (device, inode) comparison in open_local stands alone


def _linked_into_home(st: os.stat_result, home: Path) -> bool:
    """Whether a file with several hard links has one under the home (Kubo's block store, public data, skipped)."""
    for root, dirs, files in os.walk(home):
        dirs[:] = [d for d in dirs if d != "blocks"]
        for f in files:
            try:
                other = os.lstat(os.path.join(root, f))
            except OSError:
                continue  # gone meanwhile: not a link of ours
            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                return True
    return False


def open_local(path: str, home: Path, dirs: Sequence[str]) -> BinaryIO:
    """Open ``path`` for an ingest in place, or refuse it (PathRefused 403, InvalidInput 400); the caller closes it."""
    shown = quote(path, 200)
    if not dirs:
        raise PathRefused(f"path= is off on this node; {_HOW}")
    if not os.path.isabs(path):
        raise InvalidInput(f"path= must be an absolute path, got {shown}")
    real = os.path.realpath(path)
    check_place(real, home, dirs, shown)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO must not hang the open
    try:
        # Opened by its resolved name, which the readers use for the format (the extension) and messages.
        f = open(real, "rb", opener=lambda p, _: os.open(p, flags))  # noqa: SIM115  the caller closes it
    except FileNotFoundError:
        raise InvalidInput(f"path= names no file: {shown}") from None
    except IsADirectoryError:
        raise PathRefused(f"path= refused: {shown} is not a regular file") from None
    except OSError as e:
        raise PathRefused(f"path= refused: cannot open {shown}: {e.strerror}") from None
    try:
        _check_opened(f.fileno(), real, home, dirs, shown)
    except BaseException:
        f.close()
        raise
    return f


def _check_opened(fd: int, real: str, home: Path, dirs: Sequence[str], shown: str) -> None:
    """The file actually opened: a regular file, still where it was checked, no hard link into the home."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise PathRefused(f"path= refused: {shown} is not a regular file")
    check_place(_opened_name(fd) or real, home, dirs, shown)
    try:
        now = os.stat(real)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        raise PathRefused(f"path= refused: {shown} changed while it was opened")
    if st.st_nlink > 1 and _linked_into_home(st, home):
        raise PathRefused(f"path= refused: {shown} is a hard link to a file in the node's home")
