"""The node's own Kubo daemon: init its repo, start it on loopback ports, watch it, restart it.

``ManagedKubo`` holds one daemon's settings and state; the jobs are in their own modules: the repo's init and
config, the secret and the socket's directory (``managed_repo.py``), daemons a dead node left (``managed_orphans.py``),
the process started, waited for and stopped (``managed_process.py``), its exit watched (``managed_watch.py``).
The process is a plain ``subprocess.Popen`` polled from asyncio, not an asyncio subprocess, so a
ManagedKubo is bound to no event loop (a test session can start it in one loop and use it from others).

Hardening (a node attacked, overloaded or crashed keeps its data):
- The daemon ends with its node: it is forked with ``PR_SET_PDEATHSIG = SIGTERM``, which the kernel sends when
  the *thread* that forked it ends, so ``start`` (and the supervisor's restarts) fork from the event loop's
  thread, never from a pool thread. A daemon that outlived a node anyway (an older node, a signal lost in a
  race) is found at the next start by its PID file or its ``IPFS_PATH`` (``/proc/PID/environ``) and stopped;
  any other process holding the repo's lock is named and refused.
- Its RPC API needs a secret: ``API.Authorizations`` grants ``/api/v0`` to one bearer token, made once and kept
  with mode 0600 beside the repo (``<repo>.secret``, i.e. ``$CAIRN_HOME/kubo.secret``); ``client()`` sends it.
  Without it ``/api/v0/*`` answers 403, ``version`` included. But Kubo mounts more on its API listener, outside
  ``API.Authorizations`` and with no switch to turn them off (``serveHTTPApi`` in its cmd/ipfs/kubo/daemon.go):
  ``/debug/pprof/`` (``profile`` makes it profile itself), ``/debug/vars``, ``/debug/stack``,
  ``/debug/pprof-mutex/`` and ``/debug/pprof-block/`` (these two *set* profiling rates),
  ``/debug/metrics/prometheus``, ``/webui``: all answer anyone who reaches the listener (measured on 0.42).
- So the API listens on a unix domain socket, ``<repo>.rpc/api.sock`` (``$CAIRN_HOME/kubo.rpc/api.sock``), in a
  directory of mode 0700 owned by the node's user: no other user's process can connect at all (the same users
  as could read the secret, which stays, as a second wall). A path too long for a socket (107 bytes) moves to a
  0700 directory named after the repo under ``$XDG_RUNTIME_DIR`` or ``/tmp`` (logged). ``api_url`` is then
  ``unix:/path``, which ``KuboClient`` takes. ``api_port`` (a number, 0 = any free one) puts it on loopback TCP
  instead, where those paths are open to every local process: tests of port handling use it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node.adapters.ipfs.addr import unix_socket_path
from node.adapters.ipfs.kubo_client import KuboClient
from node.adapters.ipfs.managed_orphans import PID_FILE, clear_stale
from node.adapters.ipfs.managed_process import log_tail, spawn, tcp_port, terminate, wait_ready
from node.adapters.ipfs.managed_repo import (
    HOME_SECRET,
    KUBO_VERSION,
    api_socket_path,
    find_kubo_binary,
    home_kubo_auth,
    init_repo,
    load_secret,
    private_dir,
    write_config,
)
from node.adapters.ipfs.managed_watch import ExitInfo, OnChange, State, notify, wait_for_exit
from node.support.errors import KuboError, KuboStartError

__all__ = [
    "HOME_SECRET",
    "KUBO_VERSION",
    "ExitInfo",
    "ManagedKubo",
    "OnChange",
    "State",
    "api_socket_path",
    "find_kubo_binary",
    "home_kubo_auth",
]

log = logging.getLogger(__name__)


class ManagedKubo:
    def __init__(
        self,
        repo: Path,
        binary: Path,
        *,
        api_port: int | None = None,
        gateway_port: int = 0,
        swarm_port: int = 0,
        swarm_host: str = "127.0.0.1",
        bootstrap: list[str] | None = None,
        log_path: Path | None = None,
        config: Mapping[str, Any] | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        secret_path: Path | None = None,
    ) -> None:
        """``config``: extra Kubo settings by dotted key, e.g. ``{"Pubsub.Enabled": True}``. ``secret_path``: the
        file holding the RPC API's secret (default ``<repo>.secret`` beside the repo). ``api_port`` None (the
        default): the RPC API listens on a unix socket in a 0700 directory (``api_socket``); a number: on that
        loopback TCP port (0: any free one), where Kubo's /debug paths answer any local process."""
        self.repo = Path(repo)
        self.binary = Path(binary)
        self.secret_path = Path(secret_path) if secret_path else self.repo.with_name(self.repo.name + ".secret")
        self._secret: str | None = None
        self.api_socket = api_socket_path(self.repo) if api_port is None else None
        self.ports = {"gateway": gateway_port, "swarm": swarm_port}
        if api_port is not None:
            self.ports["api"] = api_port
        self.swarm_host = swarm_host  # loopback unless peers elsewhere (other hosts, containers) must reach it
        self.bootstrap = list(bootstrap or [])
        self.log_path = Path(log_path) if log_path else self.repo.with_name(self.repo.name + ".log")
        self.config = dict(config or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.restarts = 0
        self.last_exit: ExitInfo | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._api_url: str | None = None
        self._gateway_url: str | None = None
        self._identity: dict[str, Any] = {}
        self._bound: dict[str, int] = {}  # ports the last run really got (port 0 = Kubo's pick)
        self._log_offset = 0
        self._stopping = False

    # --- state -----------------------------------------------------------------------------

    @property
    def api_url(self) -> str:
        if self._api_url is None:
            raise KuboError("the managed Kubo is not started")
        return self._api_url

    @property
    def auth(self) -> str:
        """The RPC API's secret in Kubo's ``AuthSecret`` form (``bearer:…``), what ``KuboClient(auth=…)`` takes."""
        if self._secret is None:
            raise KuboError("the managed Kubo is not started")
        return f"bearer:{self._secret}"

    def client(self, **kwargs: Any) -> KuboClient:
        """A client of this daemon's RPC API that sends its secret (``kwargs``: KuboClient's timeouts)."""
        return KuboClient(self.api_url, auth=self.auth, **kwargs)

    @property
    def gateway_url(self) -> str | None:
        return self._gateway_url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def peer_id(self) -> str | None:
        return self._identity.get("ID")

    @property
    def swarm_addrs(self) -> list[str]:
        """Full multiaddrs (with /p2p/<peer id>) other daemons can ``swarm connect`` to."""
        return list(self._identity.get("Addresses") or [])

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _env(self) -> dict[str, str]:
        return {**os.environ, "IPFS_PATH": str(self.repo), "IPFS_TELEMETRY": "off"}

    # --- start -----------------------------------------------------------------------------

    async def start(self) -> str:
        """Start the daemon (initialising the repo the first time); returns the API base URL."""
        if self.alive():
            return self.api_url
        self._stopping = False
        await asyncio.to_thread(self._prepare_repo, self.ports)
        await self._launch()
        return self.api_url

    async def _launch(self) -> None:
        # Forked on the loop's thread, and the handle kept at once, with no await between (see spawn).
        proc, self._log_offset = spawn(self.binary, self._env(), self.log_path)
        self._proc = proc
        (self.repo / PID_FILE).write_text(str(proc.pid))
        try:
            ready = await wait_ready(
                proc, self.repo, auth=self.auth, start_timeout=self.start_timeout, log_tail=self.log_tail
            )
        except BaseException:
            await self._terminate()
            raise
        self._api_url, self._gateway_url, self._identity = ready.api_url, ready.gateway_url, ready.identity
        self._remember_ports()

    def _prepare_repo(self, ports: Mapping[str, int]) -> None:
        try:
            init_repo(self.binary, self.repo, self._env())
            if self.api_socket is not None:  # checked first: a stale socket is removed only from a directory of ours
                private_dir(self.api_socket.parent)
            clear_stale(self.repo, self.binary, self.api_socket, self.stop_timeout)
            self._secret = load_secret(self.secret_path)
            write_config(
                self.repo,
                ports,
                api_socket=self.api_socket,
                swarm_host=self.swarm_host,
                bootstrap=self.bootstrap,
                secret=self._secret,
                extra=self.config,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            raise KuboStartError(f"cannot prepare the Kubo repo {self.repo}: {e}") from e

    def _remember_ports(self) -> None:
        swarm = [p for a in self.swarm_addrs if (p := tcp_port(a))]
        for key, url in (("api", self._api_url), ("gateway", self._gateway_url)):
            if url and unix_socket_path(url) is None:
                self._bound[key] = int(url.rsplit(":", 1)[1])
        if swarm:
            self._bound["swarm"] = swarm[0]

    def log_tail(self, lines: int = 30) -> str:
        """The end of what the current (or last) run wrote to its log."""
        return log_tail(self.log_path, self._log_offset, lines)

    # --- stop ------------------------------------------------------------------------------

    async def stop(self) -> None:
        """SIGTERM our daemon, SIGKILL it if it has not exited within ``stop_timeout``."""
        self._stopping = True
        await self._terminate()

    async def _terminate(self) -> None:
        if self._proc is not None:
            await terminate(self._proc, self.stop_timeout, self.repo)

    # --- supervise -------------------------------------------------------------------------

    async def supervise(
        self,
        on_change: OnChange | None = None,
        *,
        poll_interval: float = 0.1,
        backoff: float = 0.2,
        max_backoff: float = 30.0,
        stable_after: float = 60.0,
    ) -> None:
        """Run as a task: restart the daemon when it dies, with growing backoff; cancel to stop watching.

        The backoff goes back to ``backoff`` once a run has stayed up ``stable_after`` seconds. After a
        restart with port 0 configured, the ports of the previous run are tried first, so peers and
        clients find it where it was; ``api_url`` may still change (read it on "up").
        """
        delay = backoff
        up_since = time.monotonic()
        # A process we started counts as up, even if it died before this task first ran.
        state: State = "up" if self._proc is not None else "down"

        async def moved(new: State) -> None:
            nonlocal state
            if new != state:
                state = new
                await notify(on_change, new)

        while True:
            if self.alive() or self._stopping:
                await self._exit_or(poll_interval)
                continue
            if self._proc is not None:  # it died, or the last restart attempt did
                self.last_exit = ExitInfo(self._proc.returncode, time.time(), self.log_tail())
                log.warning("Kubo pid %s exited with code %s", self._proc.pid, self._proc.returncode)
                self._proc = None
            await moved("down")
            if time.monotonic() - up_since >= stable_after:
                delay = backoff
            await asyncio.sleep(delay)
            if self._stopping or self.alive():  # stopped, or started by someone else, meanwhile
                continue
            await moved("restarting")
            try:
                await self._restart()
            except KuboError as e:
                log.warning("restarting Kubo failed: %s", e)
                delay = min(delay * 2, max_backoff)
                await moved("down")
                continue
            self.restarts += 1
            up_since = time.monotonic()
            delay = min(delay * 2, max_backoff)
            await moved("up")

    async def _exit_or(self, poll_interval: float) -> None:
        """Until the daemon exits, or ``RECHECK_S`` pass (``managed_watch.wait_for_exit``)."""
        await wait_for_exit(self._proc, poll_interval)

    async def _restart(self) -> None:
        sticky = {k: v or self._bound.get(k, 0) for k, v in self.ports.items()}
        try:
            await asyncio.to_thread(self._prepare_repo, sticky)
            await self._launch()
        except KuboStartError:
            if sticky == self.ports:
                raise
            # A port of the last run was taken meanwhile: let Kubo pick new ones.
            await asyncio.to_thread(self._prepare_repo, self.ports)
            await self._launch()
