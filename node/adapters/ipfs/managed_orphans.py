"""Daemons a dead node left on its Kubo repo: found by the PID file we keep in the repo or by their ``IPFS_PATH``
(``/proc/PID/environ``) and stopped, by PID only; any other process holding the repo's lock is named and refused."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import time
from pathlib import Path

from node.support.errors import KuboStartError

log = logging.getLogger("node.adapters.ipfs.managed")  # one logger name for the managed Kubo, whichever module logs

PID_FILE = "cairn-daemon.pid"  # ours, inside the repo: lets a restarted node find a daemon it orphaned

# A Kubo that just ended (its main thread a zombie) may still hold the lock while its other threads exit: seen
# once in a full suite run after kill -9 of its starter; give that a moment before calling the holder a stranger.
LOCK_RELEASE_S = 5.0


def lock_released(repo: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not repo_locked(repo):
            return True
    return False


def repo_locked(repo: Path) -> bool:
    """Is a live process holding the repo? Kubo takes a POSIX record lock (fcntl) on repo.lock."""
    lock = repo / "repo.lock"
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def is_our_daemon(pid: int, binary: Path) -> bool:
    """Is ``pid`` a running ``<binary> daemon``? Guards against signalling a recycled PID."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        len(argv) >= 2 and os.path.realpath(os.fsdecode(argv[0])) == os.path.realpath(binary) and argv[1] == b"daemon"
    )


def daemons_of(repo: Path, binary: Path) -> set[int]:
    """Running Kubo daemons whose ``IPFS_PATH`` is ``repo``: this repo's, so ours to stop (the environment a
    process was started with is in /proc/PID/environ, readable for our own user's processes only)."""
    want = os.path.realpath(repo)
    names = {b"ipfs", os.fsencode(binary.name)}
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            if len(argv) < 2 or argv[1] != b"daemon" or os.path.basename(argv[0]) not in names:
                continue
            env = Path(entry.path, "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        paths = [e[len(b"IPFS_PATH=") :] for e in env if e.startswith(b"IPFS_PATH=")]
        if paths and os.path.realpath(os.fsdecode(paths[-1])) == want and running(int(entry.name)):
            found.add(int(entry.name))
    return found


def lock_holder(lock: Path) -> int | None:
    """The PID holding a POSIX lock on ``lock``, from /proc/locks (``… POSIX ADVISORY WRITE PID MAJ:MIN:INODE …``)."""
    try:
        inode = lock.stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "POSIX" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


def describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({' '.join(os.fsdecode(a) for a in argv if a)[:120]})"


def running(pid: int) -> bool:
    """Alive and not a zombie (a dead child not yet reaped still has a /proc entry)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def kill_and_wait(pid: int, timeout: float) -> None:
    """Stop a daemon this process did not start (found by our PID file), by its PID only."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if running(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while running(pid) and time.monotonic() < deadline + 5:
            time.sleep(0.02)


def recorded_pid(repo: Path) -> int | None:
    """The daemon's PID our PID file in ``repo`` names, if any."""
    try:
        return int((repo / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def clear_stale(repo: Path, binary: Path, api_socket: Path | None, stop_timeout: float) -> None:
    """Remove what a dead daemon left (api file, repo.lock); stop a daemon a crashed node orphaned."""
    if repo_locked(repo):
        stop_orphans(repo, binary, stop_timeout)
    for name in ("api", "gateway", "repo.lock", PID_FILE):
        with contextlib.suppress(FileNotFoundError):
            (repo / name).unlink()
    if api_socket is not None:  # a killed daemon leaves its socket, and Kubo will not listen over one
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            api_socket.unlink()


def stop_orphans(repo: Path, binary: Path, stop_timeout: float) -> None:
    """Stop the daemons an earlier node left on ``repo``: named by our PID file, or started with
    ``IPFS_PATH`` = this repo. Any other lock holder is not ours to kill: refuse, naming it."""
    orphans = daemons_of(repo, binary)
    recorded = recorded_pid(repo)
    if recorded is not None and is_our_daemon(recorded, binary):
        orphans.add(recorded)
    for pid in sorted(orphans):
        log.warning("stopping Kubo pid %s left running on %s by an earlier node", pid, repo)
        kill_and_wait(pid, stop_timeout)
    if repo_locked(repo) and not lock_released(repo, LOCK_RELEASE_S):
        holder = lock_holder(repo / "repo.lock")
        who = describe(holder) if holder is not None else "another process"
        raise KuboStartError(
            f"the Kubo repo {repo} is locked by {who}, which is not a Kubo of this repo: stop it or pick another repo"
        )
