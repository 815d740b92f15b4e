"""The managed Kubo's process: forked to end with the node, waited for until its API answers, stopped in order.

The process is a plain ``subprocess.Popen`` polled from asyncio, not an asyncio subprocess, so it is bound to no
event loop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from node.adapters.ipfs.addr import api_base_url
from node.adapters.ipfs.managed_orphans import PID_FILE, recorded_pid
from node.adapters.ipfs.rpc_transport import api_session, auth_header, rpc_url
from node.support.errors import KuboStartError

log = logging.getLogger("node.adapters.ipfs.managed")  # one logger name for the managed Kubo, whichever module logs

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class Ready:
    """A run whose API answers: where its API and gateway listen, and what it said of itself (``id``)."""

    api_url: str
    gateway_url: str
    identity: dict[str, Any]


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to SIGTERM the child when the forking thread ends (SIGKILL of the node
    included); None where prctl is missing. Resolved here, before the fork, so the child only makes one call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as e:
        log.warning("prctl unavailable (%s): a managed Kubo may outlive a killed node until its next start", e)
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the node died before prctl: no signal will come, so do not start
            os._exit(1)

    return preexec


def spawn(binary: Path, env: Mapping[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Fork ``<binary> daemon`` writing to ``log_path``: the process, and where its run starts in the log.

    Called on the event loop's thread on purpose: it takes milliseconds, and in a pool thread a cancellation
    (the node stopping during a restart) could lose the Popen handle and orphan the daemon; and
    PR_SET_PDEATHSIG would fire when that pool thread exits, killing a healthy daemon."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as logf:
        offset = logf.tell()
        # Own session: a Ctrl-C meant for the node does not hit Kubo; the node stops it in order.
        proc = subprocess.Popen(
            [str(binary), "daemon", "--enable-gc=false"],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # The kernel SIGTERMs Kubo when this (the loop's) thread ends, e.g. on kill -9 of the node.
            preexec_fn=die_with_parent(),  # one prctl call in the child, resolved before the fork
        )
    return proc, offset


async def wait_ready(
    proc: subprocess.Popen[bytes], repo: Path, *, auth: str, start_timeout: float, log_tail: Callable[[], str]
) -> Ready:
    """Poll (no fixed sleeps) until the API answers ``id``; fail fast if the process exits."""
    deadline = time.monotonic() + start_timeout
    while True:
        if proc.poll() is not None:
            raise KuboStartError(
                f"Kubo exited with code {proc.returncode} while starting (repo {repo}); its log:\n{log_tail()}"
            )
        if time.monotonic() > deadline:
            raise KuboStartError(
                f"Kubo did not answer within {start_timeout:g} s (repo {repo}); its log:\n{log_tail()}"
            )
        # Kubo writes <repo>/api when its API listens and <repo>/gateway a moment later.
        url, gateway = read_url(repo, "api"), read_url(repo, "gateway")
        if url is not None and gateway is not None and (identity := await _identity(url, auth)) is not None:
            return Ready(url, gateway, identity)
        await asyncio.sleep(0.02)


async def _identity(url: str, auth: str) -> dict[str, Any] | None:
    """What the API at ``url`` answers to ``id``, or None if it does not answer (yet)."""
    timeout = aiohttp.ClientTimeout(total=2.0)
    headers = {"Authorization": auth_header(auth)}
    try:
        async with (
            api_session(url, limit=1, timeout=timeout, headers=headers) as http,
            http.post(rpc_url(url, "/api/v0/id")) as resp,
        ):
            if resp.status != 200:
                return None
            identity: dict[str, Any] = await resp.json(content_type=None)
            return identity
    except (aiohttp.ClientError, TimeoutError):
        return None


def read_url(repo: Path, name: str) -> str | None:
    """The address Kubo wrote to ``<repo>/<name>`` (``api``, ``gateway``) as a base URL, if it has yet."""
    try:
        text = (repo / name).read_text().strip()
    except FileNotFoundError:
        return None
    return api_base_url(text) if text else None


def tcp_port(multiaddr: str) -> int | None:
    parts = multiaddr.split("/")
    return int(parts[parts.index("tcp") + 1]) if "tcp" in parts else None


def log_tail(log_path: Path, offset: int, lines: int = 30) -> str:
    """The last ``lines`` of what a run wrote to ``log_path`` from ``offset`` on."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


async def terminate(proc: subprocess.Popen[bytes], stop_timeout: float, repo: Path) -> None:
    """SIGTERM the daemon, SIGKILL it if it has not exited within ``stop_timeout``; then drop its PID file."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:  # in a thread: Popen.wait blocks, and the loop must keep serving while Kubo shuts down
            await asyncio.to_thread(proc.wait, stop_timeout)
        except subprocess.TimeoutExpired:
            log.warning("Kubo pid %s ignored SIGTERM for %g s; killing it", proc.pid, stop_timeout)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.to_thread(proc.wait)
    if recorded_pid(repo) == proc.pid:  # another ManagedKubo may own the repo by now
        with contextlib.suppress(FileNotFoundError):
            (repo / PID_FILE).unlink()
