"""The node's own Kubo daemon: init its repo, start it on loopback ports, watch it, restart it.

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
import contextlib
import ctypes
import fcntl
import hashlib
import inspect
import json
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp

from node.errors import ConfigError, KuboError, KuboStartError
from node.ipfs.addr import SUN_PATH_MAX, api_base_url, unix_socket_path
from node.ipfs.client import KuboClient
from node.ipfs.rpc_transport import api_session, auth_header, rpc_url

log = logging.getLogger(__name__)

KUBO_VERSION = "0.42.0"
PID_FILE = "cairn-daemon.pid"  # ours, inside the repo: lets a restarted node find a daemon it orphaned
AUTH_USER = "cairn"  # the node's entry in the daemon's API.Authorizations
HOME_SECRET = "kubo.secret"  # in $CAIRN_HOME: the node's managed Kubo's RPC secret (0600, like api.token)
SOCKET_DIR_SUFFIX = ".rpc"  # <repo>.rpc/: the 0700 directory of the RPC API's unix socket
SOCKET_NAME = "api.sock"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

State = Literal["up", "down", "restarting"]
OnChange = Callable[[State], Awaitable[None] | None]


@dataclass(frozen=True)
class ExitInfo:
    returncode: int | None
    at: float  # time.time() when noticed
    log_tail: str


def find_kubo_binary(configured: str | os.PathLike[str] | None = None, version: str = KUBO_VERSION) -> Path:
    """The Kubo to run: the configured path, else the build cache, else an ``ipfs`` of that version on PATH."""
    if configured:
        path = Path(configured).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ConfigError(f"the configured Kubo binary {path} does not exist or is not executable")
    cache = os.environ.get("CAIRN_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cairn"
    )
    cached = Path(cache) / "kubo" / f"v{version}" / "ipfs"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    on_path = shutil.which("ipfs")
    if on_path and _version_of(Path(on_path)) == version:
        return Path(on_path)
    raise ConfigError(
        f"Kubo {version} not found (looked at {cached} and for an `ipfs` {version} on PATH): "
        "run `make run` or scripts/setup/kubo.sh to build it, or set the Kubo binary in the config"
    )


def _version_of(binary: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(binary), "version", "--number"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


# A Kubo that just ended (its main thread a zombie) may still hold the lock while its other threads exit: seen
# once in a full suite run after kill -9 of its starter; give that a moment before calling the holder a stranger.
LOCK_RELEASE_S = 5.0
RECHECK_S = 5.0  # the supervisor looks again this often while the daemon lives (it is woken at once when it exits)


def _lock_released(repo: Path, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if not _repo_locked(repo):
            return True
    return False


def _repo_locked(repo: Path) -> bool:
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


def _is_our_daemon(pid: int, binary: Path) -> bool:
    """Is ``pid`` a running ``<binary> daemon``? Guards against signalling a recycled PID."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        len(argv) >= 2 and os.path.realpath(os.fsdecode(argv[0])) == os.path.realpath(binary) and argv[1] == b"daemon"
    )


def _daemons_of(repo: Path, binary: Path) -> set[int]:
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
        if paths and os.path.realpath(os.fsdecode(paths[-1])) == want and _running(int(entry.name)):
            found.add(int(entry.name))
    return found


def _lock_holder(lock: Path) -> int | None:
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


def _describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({' '.join(os.fsdecode(a) for a in argv if a)[:120]})"


def _die_with_parent() -> Callable[[], None] | None:
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


def _load_secret(path: Path) -> str:
    """The RPC secret, made on first use with mode 0600 (like api.token); a file others could read is tightened."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        try:
            os.link(tmp, path)  # never replaces a secret another process made meanwhile
        except FileExistsError:
            pass  # theirs wins; read below
        finally:
            tmp.unlink()
    if path.stat().st_mode & 0o077:
        log.warning("the Kubo API secret %s was readable by others; setting mode 0600", path)
        os.chmod(path, 0o600)
    secret = path.read_text().strip()
    if not secret or any(c.isspace() or c == ":" for c in secret):
        raise KuboStartError(f"the Kubo API secret file {path} is empty or malformed: delete it to make a new one")
    return secret


def home_kubo_auth(home: Path) -> str | None:
    """The RPC secret (``bearer:…``, for ``KuboClient(auth=…)``) of the managed Kubo of the node home ``home``,
    or None if it has none yet: how scripts and tests reach a node's own Kubo."""
    try:
        return f"bearer:{(Path(home) / HOME_SECRET).read_text().strip()}"
    except FileNotFoundError:
        return None


def api_socket_path(repo: Path) -> Path:
    """Where the managed Kubo of ``repo`` has its RPC API socket: ``<repo>.rpc/api.sock``, or, when that path is
    too long for a unix socket, ``cairn-kubo-<uid>-<hash of the repo's path>/api.sock`` under
    ``$XDG_RUNTIME_DIR`` or ``/tmp`` (the same place at every start of that repo)."""
    repo = Path(os.path.abspath(repo))
    beside = repo.with_name(repo.name + SOCKET_DIR_SUFFIX) / SOCKET_NAME
    if len(os.fsencode(beside)) <= SUN_PATH_MAX:
        return beside
    tag = hashlib.sha256(os.fsencode(repo)).hexdigest()[:16]
    for base in (os.environ.get("XDG_RUNTIME_DIR"), "/tmp"):
        if not base or not os.path.isabs(base) or not os.path.isdir(base):
            continue
        short = Path(base) / f"cairn-kubo-{os.getuid()}-{tag}" / SOCKET_NAME
        if len(os.fsencode(short)) <= SUN_PATH_MAX:
            log.info(
                "the Kubo API socket beside its repo would be %d bytes long (a unix socket's path takes %d): "
                "it is %s instead",
                len(os.fsencode(beside)),
                SUN_PATH_MAX,
                short,
            )
            return short
    raise ConfigError(f"no unix socket path short enough for the Kubo API of {repo} (beside it: {beside})")


def _private_dir(path: Path) -> None:
    """Make ``path`` a directory only this user may enter (0700). One that is a symlink, not a directory, or another
    user's (a squatter in /tmp) is refused: the socket inside is reachable by whoever may enter it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise KuboStartError(
            f"{path} must be a directory of this user's to hold the Kubo API socket, and is not "
            "(a symlink, a file or another user's): remove it"
        )
    if st.st_mode & 0o077:
        log.warning("the Kubo API socket's directory %s was open to others; setting mode 0700", path)
        os.chmod(path, 0o700)


def _tcp_port(multiaddr: str) -> int | None:
    parts = multiaddr.split("/")
    return int(parts[parts.index("tcp") + 1]) if "tcp" in parts else None


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
        # Opened and forked on the loop on purpose: both take milliseconds, and in a thread a cancellation
        # (the node stopping during a restart) could lose the Popen handle and orphan the daemon; and
        # PR_SET_PDEATHSIG would fire when that pool thread exits, killing a healthy daemon.
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logf:  # noqa: ASYNC230  see above
            self._log_offset = logf.tell()
            # Own session: a Ctrl-C meant for the node does not hit Kubo; the node stops it in order.
            proc = self._proc = subprocess.Popen(  # noqa: ASYNC220  see above
                [str(self.binary), "daemon", "--enable-gc=false"],
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # The kernel SIGTERMs Kubo when this (the loop's) thread ends, e.g. on kill -9 of the node.
                preexec_fn=_die_with_parent(),  # one prctl call in the child, resolved before the fork
            )
        (self.repo / PID_FILE).write_text(str(proc.pid))
        try:
            await self._wait_ready(proc)
        except BaseException:
            await self._terminate()
            raise

    def _prepare_repo(self, ports: Mapping[str, int]) -> None:
        try:
            self._init_and_configure(ports)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            raise KuboStartError(f"cannot prepare the Kubo repo {self.repo}: {e}") from e

    def _init_and_configure(self, ports: Mapping[str, int]) -> None:
        self.repo.mkdir(parents=True, exist_ok=True)
        if not (self.repo / "config").exists():
            # test profile: loopback, no bootstrap peers, no mDNS.
            out = subprocess.run(
                [str(self.binary), "init", "--profile=test"],
                env=self._env(),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,  # the return code is read below, with Kubo's own message
            )
            if out.returncode != 0:
                raise KuboStartError(f"`ipfs init` failed in {self.repo}: {(out.stderr or out.stdout).strip()}")
        if self.api_socket is not None:  # checked first: a stale socket is removed only from a directory of ours
            _private_dir(self.api_socket.parent)
        self._clear_stale()
        self._secret = _load_secret(self.secret_path)
        self._write_config(ports)

    def _clear_stale(self) -> None:
        """Remove what a dead daemon left (api file, repo.lock); stop a daemon a crashed node orphaned."""
        if _repo_locked(self.repo):
            self._stop_orphans()
        for name in ("api", "gateway", "repo.lock", PID_FILE):
            with contextlib.suppress(FileNotFoundError):
                (self.repo / name).unlink()
        if self.api_socket is not None:  # a killed daemon leaves its socket, and Kubo will not listen over one
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                self.api_socket.unlink()

    def _stop_orphans(self) -> None:
        """Stop the daemons an earlier node left on this repo: named by our PID file, or started with
        ``IPFS_PATH`` = this repo. Any other lock holder is not ours to kill: refuse, naming it."""
        orphans = _daemons_of(self.repo, self.binary)
        recorded = self._recorded_pid()
        if recorded is not None and _is_our_daemon(recorded, self.binary):
            orphans.add(recorded)
        for pid in sorted(orphans):
            log.warning("stopping Kubo pid %s left running on %s by an earlier node", pid, self.repo)
            _kill_and_wait(pid, self.stop_timeout)
        if _repo_locked(self.repo) and not _lock_released(self.repo, LOCK_RELEASE_S):
            holder = _lock_holder(self.repo / "repo.lock")
            who = _describe(holder) if holder is not None else "another process"
            raise KuboStartError(
                f"the Kubo repo {self.repo} is locked by {who}, which is not a Kubo of this repo: "
                "stop it or pick another repo"
            )

    def _recorded_pid(self) -> int | None:
        try:
            return int((self.repo / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def _write_config(self, ports: Mapping[str, int]) -> None:
        # Edit the JSON directly: one read and one atomic write instead of an `ipfs config` run per key.
        path = self.repo / "config"
        cfg = json.loads(path.read_text())
        addrs = cfg.setdefault("Addresses", {})
        sock = self.api_socket
        addrs["API"] = f"/unix{sock}" if sock is not None else f"/ip4/127.0.0.1/tcp/{ports['api']}"
        addrs["Gateway"] = f"/ip4/127.0.0.1/tcp/{ports['gateway']}"
        family = "ip6" if ":" in self.swarm_host else "ip4"
        addrs["Swarm"] = [f"/{family}/{self.swarm_host}/tcp/{ports['swarm']}"]
        cfg["Bootstrap"] = list(self.bootstrap)
        # Replaced on every start: only the node's secret opens the RPC API (the whole of /api/v0).
        cfg.setdefault("API", {})["Authorizations"] = {
            AUTH_USER: {"AuthSecret": f"bearer:{self._secret}", "AllowedPaths": ["/api/v0"]}
        }
        for dotted, value in self.config.items():
            node = cfg
            *parents, leaf = dotted.split(".")
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = value
        tmp = path.with_name("config.cairn-tmp")
        tmp.write_text(json.dumps(cfg, indent=2))
        os.chmod(tmp, 0o600)  # the config holds the node's private key
        os.replace(tmp, path)

    async def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        """Poll (no fixed sleeps) until the API answers ``id``; fail fast if the process exits."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.poll() is not None:
                raise KuboStartError(
                    f"Kubo exited with code {proc.returncode} while starting "
                    f"(repo {self.repo}); its log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise KuboStartError(
                    f"Kubo did not answer within {self.start_timeout:g} s (repo {self.repo}); its log:\n"
                    f"{self.log_tail()}"
                )
            # Kubo writes <repo>/api when its API listens and <repo>/gateway a moment later.
            url, gateway = self._read_url("api"), self._read_url("gateway")
            if url is not None and gateway is not None and await self._answers(url):
                self._api_url = url
                self._gateway_url = gateway
                self._remember_ports()
                return
            await asyncio.sleep(0.02)

    async def _answers(self, url: str) -> bool:
        """Does the API at ``url`` answer ``id`` (kept as this run's identity)?"""
        timeout = aiohttp.ClientTimeout(total=2.0)
        headers = {"Authorization": auth_header(self.auth)}
        try:
            async with (
                api_session(url, limit=1, timeout=timeout, headers=headers) as http,
                http.post(rpc_url(url, "/api/v0/id")) as resp,
            ):
                if resp.status != 200:
                    return False
                self._identity = await resp.json(content_type=None)
                return True
        except (aiohttp.ClientError, TimeoutError):
            return False

    def _read_url(self, name: str) -> str | None:
        try:
            text = (self.repo / name).read_text().strip()
        except FileNotFoundError:
            return None
        return api_base_url(text) if text else None

    def _remember_ports(self) -> None:
        swarm = [p for a in self.swarm_addrs if (p := _tcp_port(a))]
        for key, url in (("api", self._api_url), ("gateway", self._gateway_url)):
            if url and unix_socket_path(url) is None:
                self._bound[key] = int(url.rsplit(":", 1)[1])
        if swarm:
            self._bound["swarm"] = swarm[0]

    def log_tail(self, lines: int = 30) -> str:
        """The end of what the current (or last) run wrote to its log."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    # --- stop ------------------------------------------------------------------------------

    async def stop(self) -> None:
        """SIGTERM our daemon, SIGKILL it if it has not exited within ``stop_timeout``."""
        self._stopping = True
        await self._terminate()

    async def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:  # in a thread: Popen.wait blocks, and the loop must keep serving while Kubo shuts down
                await asyncio.to_thread(proc.wait, self.stop_timeout)
            except subprocess.TimeoutExpired:
                log.warning("Kubo pid %s ignored SIGTERM for %g s; killing it", proc.pid, self.stop_timeout)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.to_thread(proc.wait)
        if self._recorded_pid() == proc.pid:  # another ManagedKubo may own the repo by now
            with contextlib.suppress(FileNotFoundError):
                (self.repo / PID_FILE).unlink()

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
                await self._notify(on_change, new)

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
        """Until the daemon exits, or ``RECHECK_S`` pass (a stop begun meanwhile is then seen). Woken by the
        process's pidfd, not by polling: a 0.1 s poll woke an idle node's event loop 10 times a second, 0.4-0.9 %
        of a core. Where there is no pidfd (or no live process), it sleeps ``poll_interval``."""
        proc = self._proc
        fd = -1
        if proc is not None and proc.poll() is None:  # not reaped: its pid is still this process's
            with contextlib.suppress(AttributeError, OSError):
                fd = os.pidfd_open(proc.pid)
        if fd < 0:
            await asyncio.sleep(poll_interval)
            return
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()

        def woken() -> None:
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(fd, woken)
        try:
            await asyncio.wait_for(exited, RECHECK_S)
        except TimeoutError:
            pass
        finally:
            loop.remove_reader(fd)
            os.close(fd)

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

    @staticmethod
    async def _notify(on_change: OnChange | None, state: State) -> None:
        if on_change is None:
            return
        try:
            result = on_change(state)
            if inspect.isawaitable(result):
                await result
        except Exception:  # a broken listener must not stop the supervision
            log.exception("Kubo state listener failed on %r", state)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead child not yet reaped still has a /proc entry)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _kill_and_wait(pid: int, timeout: float) -> None:
    """Stop a daemon this process did not start (found by our PID file), by its PID only."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    if _running(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _running(pid) and time.monotonic() < deadline + 5:
            time.sleep(0.02)
