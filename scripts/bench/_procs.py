"""Process helpers the benchmarks share: /proc readings, process trees, waiting for a PID to go or for a process
tree to quiet down, how to run `cairn`. The bench harness built on them (a node, phases, the API client) is
_harness.py.

Processes are always identified by PID *and* start time where it matters, so a reused PID is never
mistaken for the process we started (and nothing is ever killed by name).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 onward), or None if it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot): tells a live process from a reused PID."""
    f = stat_fields(pid)
    return int(f[19]) if f and len(f) > 19 else None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a live process so far (all its threads)."""
    f = stat_fields(pid) if pid is not None else None
    try:
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK") if f else None
    except (ValueError, IndexError):
        return None


def pid_alive(pid: int, started: int | None = None) -> bool:
    """Alive and not a zombie; with ``started``, also the same process (not a reused PID)."""
    f = stat_fields(pid)
    if f is None or f[0] == "Z":
        return False
    return started is None or start_time(pid) == started


def wait_gone(pid: int, timeout: float, started: int | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid, started):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def cairn_argv() -> list[str]:
    script = Path(sys.executable).with_name("cairn")
    return [str(script)] if script.exists() else [sys.executable, "-m", "node"]


def java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
        return (out.stderr or out.stdout).splitlines()[0].strip()
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def _children_by_parent() -> dict[int, list[int]]:
    """Every live process's PID under its parent's, from one pass over /proc/*/stat: unlike
    /proc/PID/task/*/children, it also sees a process whose parent thread has exited."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            f = stat_fields(int(entry.name))
            if f:
                children.setdefault(int(f[1]), []).append(int(entry.name))
    return children


def children(pid: int) -> list[int]:
    """``pid``'s live child processes (one level)."""
    return _children_by_parent().get(pid, [])


def descendants(root: int) -> list[int]:
    """``root``'s live descendants, children before their own children; ``root`` itself is not among them."""
    by_parent = _children_by_parent()
    out, todo = [], list(by_parent.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(by_parent.get(pid, []))
    return out


def tree_pids(pid: int) -> list[int]:
    """``pid`` first, then every live descendant."""
    return [pid, *descendants(pid)]


def wait_tree_quiet(pid: int, share: float = 0.05, window: float = 1.0, timeout: float = 120.0) -> float:
    """Wait until ``pid`` and its descendants together use under ``share`` of a core over ``window`` s (a node's
    Spark JVM warms up for seconds after the node listens: a timed step started then shares the cores with it).
    Unlike _harness.wait_machine_quiet, other work on the machine does not count. Returns the seconds waited;
    raises RuntimeError after ``timeout``."""
    t0 = time.monotonic()
    while True:
        pids = tree_pids(pid)
        before = sum(cpu_seconds(p) or 0.0 for p in pids)
        time.sleep(window)
        used = sum(cpu_seconds(p) or 0.0 for p in pids) - before
        if used < share * window:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"pid {pid} and its children stayed busy ({used / window:.0%} of a core) for {timeout}s")
