"""`cairn node start --detach` and `cairn node stop`: a node in the background, found by its home's PID file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from node.adapters.home import Home
from node.support.errors import ConfigError, NodeNotRunning

START_DEADLINE = 120.0  # Kubo starts in seconds; a slower start is a fault to report, not to wait out
AFTER_CANCEL = 15.0  # after the second signal: cancelled queries, then Spark, Kubo and p2p stop


def start_detached(home_path: Path, start_argv: list[str]) -> int:
    """Run `cairn node start` in its own session, its output appended to the home's node.log; return once it
    listens (its node.json names it), or fail with the log's last lines if it exits first."""
    home = Home(home_path)
    running = home.read_runtime()
    if running is not None:
        raise ConfigError(f"a node already runs for {home.path} (pid {running['pid']}, {running.get('api')})")
    home.logs.mkdir(parents=True, exist_ok=True)
    with open(home.node_log, "ab") as log:
        offset = log.tell()
        proc = subprocess.Popen(
            [sys.executable, "-m", "node", "--home", str(home.path), *start_argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no terminal: Ctrl-C and the shell's exit do not reach it
        )
    deadline = time.monotonic() + START_DEADLINE
    while (info := home.read_runtime()) is None or info.get("pid") != proc.pid:
        if proc.poll() is not None:
            raise ConfigError(f"the node exited during its start ({_tail(home.node_log, offset)})")
        if time.monotonic() > deadline:
            raise ConfigError(
                f"the node (pid {proc.pid}) did not listen within {START_DEADLINE:.0f} s: see {home.node_log}"
            )
        time.sleep(0.1)  # polling node.json with a deadline
    print(f"cairn node started in the background (pid {proc.pid}), listening on {info['api']}")
    print(f"log  {home.node_log}")
    print("stop it with `cairn node stop`")
    return 0


def stop(home: Home, timeout: float) -> int:
    """SIGTERM the node of ``home``: it refuses new queries and lets running ones finish; past ``timeout`` a
    second SIGTERM cancels them. Returns once the process is gone."""
    pid = home.read_pid()
    if pid is None:
        raise NodeNotRunning(f"no node is running for {home.path}")
    os.kill(pid, signal.SIGTERM)
    print(f"stopping the node (pid {pid}) …", file=sys.stderr)
    if not _wait_gone(pid, timeout):
        print(f"queries still run after {timeout:g} s: cancelling them", file=sys.stderr)
        _signal(pid, signal.SIGTERM)
        if not _wait_gone(pid, AFTER_CANCEL):
            raise ConfigError(f"the node (pid {pid}) did not stop; see {home.node_log} (kill -9 {pid} ends it)")
    print(f"stopped the node of {home.path} (pid {pid})")
    return 0


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _alive(pid: int) -> bool:
    """Alive and not a zombie (a node started by this very process, as in tests, is reaped by its parent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != b"Z"


def _tail(path: Path, offset: int, lines: int = 5) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return "no log"
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    try:  # the daemon's own error line, when it printed one
        return json.loads(kept[-1])["msg"] if kept and kept[-1].startswith("{") else " | ".join(kept[-lines:])
    except (ValueError, KeyError):
        return " | ".join(kept[-lines:])
