"""ManagedKubo: the node's own daemon, started, stopped, supervised, recovered (real Kubo 0.42)."""

from __future__ import annotations

import asyncio
import encodings.idna  # noqa: F401  http.client's host encoding, loaded before the probe's child drops to nobody
import http.client
import json
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from node.adapters.ipfs import KuboClient, ManagedKubo, managed_watch
from node.support.errors import KuboRPCError, KuboStartError
from tests.fixtures.kubo import post_status
from tests.fixtures.procs import process_running

pytestmark = pytest.mark.kubo


async def until(check: Callable[[], bool], deadline: float = 15.0, what: str = "condition") -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what} not met within {deadline} s")
        await asyncio.sleep(0.02)


async def test_start_stop(kubo_binary: Path, tmp_path: Path) -> None:
    node = ManagedKubo(tmp_path / "repo", kubo_binary, log_path=tmp_path / "kubo.log", bootstrap=[])
    url = await node.start()
    try:
        assert node.alive() and node.pid is not None and process_running(node.pid)
        assert url == node.api_url == f"unix:{tmp_path}/repo.rpc/api.sock" and node.api_socket is not None
        assert node.api_socket.is_socket() and node.api_socket.parent.stat().st_mode & 0o777 == 0o700
        assert node.gateway_url is not None and node.gateway_url.startswith("http://127.0.0.1:")
        assert node.swarm_addrs and node.swarm_addrs[0].startswith("/ip4/127.0.0.1/tcp/")
        assert node.swarm_addrs[0].endswith(f"/p2p/{node.peer_id}")
        cfg = json.loads((tmp_path / "repo" / "config").read_text())
        assert cfg["Bootstrap"] == [] and cfg["Discovery"]["MDNS"]["Enabled"] is False
        assert await node.start() == url  # already running: nothing to do
        async with node.client() as client:
            assert (await client.id()).id == node.peer_id
    finally:
        pid = node.pid
        await node.stop()
    assert not node.alive() and pid is not None and not process_running(pid)
    assert not (tmp_path / "repo" / "api").exists()  # a clean shutdown removes it
    assert not (tmp_path / "repo.rpc" / "api.sock").exists()  # and its socket
    assert "Daemon is ready" in (tmp_path / "kubo.log").read_text()


async def test_restart_keeps_identity_and_blocks(kubo_binary: Path, tmp_path: Path) -> None:
    node = ManagedKubo(tmp_path / "repo", kubo_binary, config={"Pubsub.Enabled": True})
    await node.start()
    peer = node.peer_id
    async with node.client() as client:
        cid = await client.block_put(b"kept across restarts", pin=True)
    await node.stop()
    await node.start()
    try:
        assert node.peer_id == peer
        async with node.client() as client:
            assert await client.block_get(cid, offline=True) == b"kept across restarts"
        cfg = json.loads((tmp_path / "repo" / "config").read_text())
        assert cfg["Pubsub"]["Enabled"] is True
    finally:
        await node.stop()


async def test_supervise_restarts_after_sigkill(kubo: ManagedKubo) -> None:
    states: list[str] = []

    async def on_change(state: str) -> None:  # async listeners are awaited
        states.append(state)

    async with kubo.client() as client:
        cid = await client.block_put(os.urandom(32), pin=True)
    old_pid, old_url = kubo.pid, kubo.api_url
    assert old_pid is not None
    task = asyncio.create_task(kubo.supervise(on_change, poll_interval=0.02, backoff=0.05))
    try:
        os.kill(old_pid, signal.SIGKILL)
        await until(lambda: kubo.restarts == 1 and kubo.alive(), what="restart after SIGKILL")
        assert states == ["down", "restarting", "up"]
        assert kubo.last_exit is not None and kubo.last_exit.returncode == -signal.SIGKILL
        assert kubo.pid != old_pid
        assert kubo.api_url == old_url  # ports of the previous run are reused when free
        async with kubo.client() as client:
            assert (await client.id()).id == kubo.peer_id
            assert await client.pin_ls(cid) == {cid: "recursive"}
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    # No longer supervised: a second death stays dead.
    pid = kubo.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await until(lambda: not kubo.alive(), what="daemon exit")
    # Nothing is left that could restart it: the supervisor ended cancelled, and no task of the loop is still
    # running ManagedKubo code (a restart would run in one).
    assert task.cancelled()
    running = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not [t for t in running if "ManagedKubo" in t.get_coro().__qualname__], running  # type: ignore[union-attr]
    assert kubo.restarts == 1 and not kubo.alive()


async def test_supervise_is_woken_by_the_exit_not_by_polling(
    kubo: ManagedKubo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle node's loop is not woken to poll its Kubo (a 0.1 s poll cost up to 1 % of a core). With the poll and
    the recheck an hour long, only the daemon's pidfd can tell the supervisor it died: it still restarts it."""
    monkeypatch.setattr(managed_watch, "RECHECK_S", 3600.0)
    states: list[str] = []
    old_pid = kubo.pid
    assert old_pid is not None
    rounds = _Rounds(kubo, monkeypatch)
    task = asyncio.create_task(kubo.supervise(states.append, poll_interval=3600.0, backoff=0.02))
    try:
        await rounds.reach(1)  # the supervisor waits on the live daemon
        os.kill(old_pid, signal.SIGKILL)
        await until(lambda: kubo.restarts == 1 and kubo.alive(), what="restart after SIGKILL, woken by the pidfd")
        assert states == ["down", "restarting", "up"] and kubo.pid != old_pid
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_supervise_does_not_restart_after_stop(kubo: ManagedKubo, monkeypatch: pytest.MonkeyPatch) -> None:
    states: list[str] = []
    rounds = _Rounds(kubo, monkeypatch)
    task = asyncio.create_task(kubo.supervise(states.append, poll_interval=0.02, backoff=0.02))
    try:
        await kubo.stop()
        await rounds.reach(rounds.entered + 3)  # three rounds looked at the stopped daemon
        assert not kubo.alive() and kubo.restarts == 0 and states == []
    finally:
        task.cancel()


class _Rounds:
    """The supervisor's rounds, counted: each ends waiting for the daemon's exit (``_exit_or``)."""

    def __init__(self, kubo: ManagedKubo, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self._changed = 0, asyncio.Event()
        wait = kubo._exit_or

        async def counted(poll_interval: float) -> None:
            self.entered += 1
            self._changed.set()
            await wait(poll_interval)

        monkeypatch.setattr(kubo, "_exit_or", counted)

    async def reach(self, n: int) -> None:
        async with asyncio.timeout(60):  # a bound only a hang fails
            while self.entered < n:
                self._changed.clear()
                await self._changed.wait()


async def test_stale_api_file_and_lock_after_sigkill(kubo_binary: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    node = ManagedKubo(repo, kubo_binary)
    await node.start()
    pid = node.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await until(lambda: not node.alive(), what="daemon exit")
    # What a killed daemon leaves behind: an api file, repo.lock and its API socket (Kubo will not listen over it).
    assert (repo / "api").exists() and (repo / "repo.lock").exists() and node.api_socket is not None
    assert node.api_socket.is_socket()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    (repo / "api").write_text(f"/ip4/127.0.0.1/tcp/{dead_port}")

    fresh = ManagedKubo(repo, kubo_binary)  # a new node process finding the leftovers
    try:
        url = await fresh.start()
        assert url != f"http://127.0.0.1:{dead_port}"
        async with fresh.client() as client:
            assert (await client.id()).id == node.peer_id
    finally:
        await fresh.stop()


async def test_orphaned_daemon_of_an_earlier_node_is_replaced(kubo_binary: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    crashed = ManagedKubo(repo, kubo_binary)  # a node that died without stopping its Kubo
    await crashed.start()
    orphan = crashed.pid
    assert orphan is not None
    successor = ManagedKubo(repo, kubo_binary)
    try:
        await successor.start()
        assert not crashed.alive()  # recognised by the PID file and binary, stopped by PID
        assert successor.pid != orphan and successor.alive()
    finally:
        await successor.stop()
        await crashed.stop()


async def test_orphan_found_by_its_ipfs_path_is_replaced(kubo_binary: Path, tmp_path: Path) -> None:
    """Without our PID file (a node killed between fork and writing it), /proc/PID/environ's IPFS_PATH says
    the daemon holding the lock is this repo's: it is stopped, not refused (fails on the old code)."""
    repo = tmp_path / "repo"
    first = ManagedKubo(repo, kubo_binary)
    await first.start()
    orphan = first.pid
    assert orphan is not None
    successor = ManagedKubo(repo, kubo_binary)
    try:
        (repo / "cairn-daemon.pid").unlink()
        await successor.start()
        assert not process_running(orphan) and successor.alive() and successor.peer_id == first.peer_id
    finally:
        await successor.stop()
        await first.stop()


async def test_repo_locked_by_a_foreign_process_is_refused(kubo_binary: Path, tmp_path: Path) -> None:
    """A lock holder that is not a Kubo of this repo is named and left alone."""
    repo = tmp_path / "repo"
    node = ManagedKubo(repo, kubo_binary)
    await node.start()
    await node.stop()
    hold = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.lockf(fd, fcntl.LOCK_EX); print(1, flush=True); time.sleep(120)"
    )
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", hold, str(repo / "repo.lock"), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and await holder.stdout.readline() == b"1\n"  # it holds the lock now
        with pytest.raises(KuboStartError, match=f"locked by pid {holder.pid} .*not a Kubo of this repo") as info:
            await ManagedKubo(repo, kubo_binary).start()
        assert "\n" not in str(info.value) and holder.returncode is None
    finally:
        holder.kill()
        await holder.wait()


async def test_start_failure_reports_log_tail(kubo_binary: Path, tmp_path: Path) -> None:
    """A daemon that exits while starting fails the start at its exit: with an hour to start in, only the exit can
    end the start before the 120 s bound (which only a hang fails)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        node = ManagedKubo(tmp_path / "repo", kubo_binary, api_port=port, start_timeout=3600)
        with pytest.raises(KuboStartError, match="address already in use") as info:
            async with asyncio.timeout(120):
                await node.start()
    assert "exited with code 1" in str(info.value)
    assert not node.alive()


async def test_two_managed_daemons_connect(
    kubo: ManagedKubo, kubo_factory: Callable[..., Awaitable[ManagedKubo]]
) -> None:
    # bootstrap list = the first daemon: the second dials it on start.
    second = await kubo_factory(bootstrap=[kubo.swarm_addrs[0]])
    async with second.client() as client:

        async def connected() -> bool:
            return kubo.peer_id in [p.id for p in await client.swarm_peers()]

        end = time.monotonic() + 15
        while not await connected():
            assert time.monotonic() < end, "bootstrap peer never connected"
            await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_supervise_backs_off_while_restart_fails(kubo_binary: Path, tmp_path: Path) -> None:
    port = free_port()
    node = ManagedKubo(tmp_path / "repo", kubo_binary, api_port=port)
    await node.start()
    states: list[str] = []
    task = None
    try:
        with socket.socket() as squatter:  # the fixed API port is taken while the daemon is down
            pid = node.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await until(lambda: not node.alive(), what="daemon exit")
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            # Supervision starts after the death, so the squatter surely wins the port.
            task = asyncio.create_task(node.supervise(states.append, poll_interval=0.02, backoff=0.02, max_backoff=0.1))
            await until(lambda: states.count("restarting") >= 2, what="two failed restarts")
            assert node.restarts == 0 and node.last_exit is not None
            assert "address already in use" in node.last_exit.log_tail
        await until(lambda: node.restarts == 1 and node.alive(), what="restart once the port is free")
        assert states[:4] == ["down", "restarting", "down", "restarting"] and states[-1] == "up"
        assert node.api_url == f"http://127.0.0.1:{port}"
    finally:
        if task is not None:
            task.cancel()
        await node.stop()


async def test_restart_moves_when_its_old_port_is_taken(kubo_factory: Callable[..., Awaitable[ManagedKubo]]) -> None:
    kubo = await kubo_factory(api_port=0)  # on TCP, any free port
    old_url = kubo.api_url
    old_port = int(old_url.rsplit(":", 1)[1])
    task = None
    try:
        with socket.socket() as squatter:
            pid = kubo.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await until(lambda: not kubo.alive(), what="daemon exit")
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", old_port))
            squatter.listen()
            task = asyncio.create_task(kubo.supervise(poll_interval=0.02, backoff=0.02))
            await until(lambda: kubo.restarts == 1 and kubo.alive(), what="restart on a new port")
            assert kubo.api_url != old_url  # port 0 configured: Kubo picked another one
            async with kubo.client() as client:
                assert (await client.id()).id == kubo.peer_id
    finally:
        if task is not None:
            task.cancel()


# -- the RPC API needs the node's secret (any local process could drive Kubo otherwise) --------------------------------


async def test_rpc_api_refuses_a_process_without_the_secret(kubo: ManagedKubo) -> None:
    """Any local process could pin, add, read the config (with the node's key) or shut Kubo down: on the old
    code these answered 200. Now every path is 403 without the secret or with a wrong one."""
    secret = kubo.secret_path.read_text().strip()
    assert kubo.secret_path.stat().st_mode & 0o777 == 0o600 and len(secret) >= 32
    for path in ("id", "version", "config/show", "pin/ls", "add", "shutdown"):
        assert await post_status(kubo.api_url, f"/api/v0/{path}") == 403, path
        assert await post_status(kubo.api_url, f"/api/v0/{path}", "Bearer not-the-secret") == 403, path
    assert await post_status(kubo.api_url, "/api/v0/id", f"Bearer {secret}") == 200
    assert kubo.alive()  # the refused shutdown did nothing
    assert kubo.gateway_url is not None and await post_status(kubo.gateway_url, "/api/v0/id") == 404  # no RPC there
    async with KuboClient(kubo.api_url) as anonymous:
        with pytest.raises(KuboRPCError, match="API secret is missing or wrong") as info:
            await anonymous.id()
    assert info.value.http_status == 403 and info.value.status == 502 and "\n" not in info.value.message


async def test_secret_is_kept_tightened_and_the_only_one(kubo_binary: Path, tmp_path: Path) -> None:
    """The secret survives restarts (a file, 0600); an entry someone added to the repo's config while the
    daemon was down is dropped at the next start, and a secret file made readable is set back to 0600."""
    node = ManagedKubo(tmp_path / "repo", kubo_binary)
    await node.start()
    first = node.auth
    await node.stop()
    cfg_path = tmp_path / "repo" / "config"
    cfg = json.loads(cfg_path.read_text())
    cfg["API"]["Authorizations"]["intruder"] = {"AuthSecret": "bearer:let-me-in", "AllowedPaths": ["/api/v0"]}
    cfg_path.write_text(json.dumps(cfg))
    node.secret_path.chmod(0o644)
    await node.start()
    try:
        assert node.auth == first and node.secret_path.stat().st_mode & 0o777 == 0o600
        assert await post_status(node.api_url, "/api/v0/id", "Bearer let-me-in") == 403
        async with node.client() as client:
            assert (await client.id()).id == node.peer_id
    finally:
        await node.stop()


async def test_client_sends_each_kind_of_kubo_secret(kubo_factory: Callable[..., Awaitable[ManagedKubo]]) -> None:
    """An external Kubo's secret in each of Kubo's AuthSecret forms (ipfs.api_auth) opens what it allows."""
    scopes = {
        "alice": {"AuthSecret": "basic:alice:pa55", "AllowedPaths": ["/api/v0/id"]},
        "bob": {"AuthSecret": "bearer:bob-token", "AllowedPaths": ["/api/v0"]},
    }
    daemon = await kubo_factory(config={f"API.Authorizations.{k}": v for k, v in scopes.items()})
    for auth in ("basic:alice:pa55", "basic:YWxpY2U6cGE1NQ==", "bearer:bob-token", "bob-token"):
        async with KuboClient(daemon.api_url, auth=auth) as client:
            assert (await client.id()).id == daemon.peer_id, auth
    async with KuboClient(daemon.api_url, auth="basic:alice:pa55") as alice:
        with pytest.raises(KuboRPCError) as info:
            await alice.pin_ls()  # outside alice's AllowedPaths
    assert info.value.http_status == 403


# What Kubo mounts on its API listener beside /api/v0, outside API.Authorizations and with no switch to turn it off
# (kubo cmd/ipfs/kubo/daemon.go serveHTTPApi): profiling (profile: the daemon profiles itself for a second; the
# mutex and block handlers *set* profiling rates), expvars, goroutine stacks, metrics, the web UI, the gateway.
OPEN_ON_TCP = [
    ("POST", "/api/v0/version"),
    ("GET", "/debug/pprof/"),
    ("GET", "/debug/pprof/profile?seconds=1"),
    ("GET", "/debug/vars"),
    ("GET", "/debug/stack"),
    ("POST", "/debug/pprof-mutex/?fraction=1"),
    ("POST", "/debug/pprof-block/?rate=1"),
    ("GET", "/debug/metrics/prometheus"),
    ("GET", "/webui"),
]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self._path)


def _probe(api_url: str, paths: list[tuple[str, str]]) -> dict[str, int | str]:
    """Plain http.client, no secret: each path's status, or why there was none."""
    out: dict[str, int | str] = {}
    for method, path in paths:
        if api_url.startswith("unix:"):
            conn: http.client.HTTPConnection = _UnixConnection(api_url.removeprefix("unix:"))
        else:
            conn = http.client.HTTPConnection(api_url.split("://", 1)[1], timeout=30)
        try:
            conn.request(method, path)
            out[path] = conn.getresponse().status
        except OSError as e:
            out[path] = f"unreachable: {e}"
        finally:
            conn.close()
    return out


def _probe_in_child(api_url: str, paths: list[tuple[str, str]]) -> dict[str, int | str]:
    """``_probe`` in a forked child that first becomes uid/gid nobody (65534), no supplementary groups: another
    user's process. Forked, not exec'd: no interpreter that user may run is needed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only plain sockets from here, then _exit
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(w, json.dumps(_probe(api_url, paths)).encode())
            code = 0
        except BaseException:  # noqa: BLE001  the child must reach _exit; the parent sees the code
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the probe as nobody failed"
    result: dict[str, int | str] = json.loads(data)
    return result


async def probe_as_nobody(api_url: str, paths: list[tuple[str, str]]) -> dict[str, int | str]:
    """What another user's process (uid nobody, no secret) gets on each path: its status, or why it got none."""
    return await asyncio.to_thread(_probe_in_child, api_url, paths)


async def test_no_other_user_reaches_anything_on_the_api(kubo_factory: Callable[..., Awaitable[ManagedKubo]]) -> None:
    """The API listens on a unix socket in a 0700 directory: another user's process reaches none of Kubo's paths
    there, /debug/* included, which answer without the secret on a TCP listener (as the old code had: this
    test fails on it, all those paths answering 200). The node's own client works over the socket."""
    kubo = await kubo_factory()
    async with kubo.client() as client:
        cid = await client.block_put(os.urandom(64), pin=True)
        assert (await client.id()).id == kubo.peer_id
        assert await client.block_get(cid, offline=True)
    paths = [*OPEN_ON_TCP, ("GET", f"/ipfs/{cid}")]
    assert kubo.api_socket is not None and kubo.api_url == f"unix:{kubo.api_socket}"
    sock_dir = kubo.api_socket.parent.stat()
    assert sock_dir.st_mode & 0o777 == 0o700 and sock_dir.st_uid == os.getuid()
    if os.geteuid() != 0:  # no other uid to probe as: the kernel's 0700 check is what keeps the others out
        return
    got = await probe_as_nobody(kubo.api_url, paths)
    assert set(got) == {p for _, p in paths}
    open_ = {p: v for p, v in got.items() if not (isinstance(v, str) and "Permission denied" in v)}
    assert open_ == {}, f"reachable by another user: {open_}"
    # The probe does see what a TCP listener leaves open (so it is not refused for some other reason).
    tcp = await kubo_factory(api_port=0)
    on_tcp = await probe_as_nobody(tcp.api_url, OPEN_ON_TCP)
    assert on_tcp["/api/v0/version"] == 403  # API.Authorizations covers /api/v0 only
    assert {p: on_tcp[p] for p in ("/debug/vars", "/debug/stack", "/debug/pprof-mutex/?fraction=1")} == {
        "/debug/vars": 200,
        "/debug/stack": 200,
        "/debug/pprof-mutex/?fraction=1": 200,
    }


# -- the daemon ends with the process that started it (no Kubo left behind a dead node) --------------------------------

ROOT = Path(__file__).resolve().parents[2]  # the starter imports this worktree's node package
STARTER = """
import asyncio, sys
from pathlib import Path
from node.adapters.ipfs import ManagedKubo

async def main() -> None:
    kubo = ManagedKubo(Path(sys.argv[1]), Path(sys.argv[2]))
    await kubo.start()
    print(kubo.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def test_daemon_ends_when_its_starter_is_sigkilled(
    kubo_binary: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """PR_SET_PDEATHSIG: kill -9 of the process that started Kubo (no clean stop runs) ends Kubo too; on the
    old code it lived on, holding the repo. A new ManagedKubo then starts on the repo without stopping anyone."""
    starter = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STARTER,
        str(tmp_path / "repo"),
        str(kubo_binary),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    assert starter.stdout is not None
    line = await asyncio.wait_for(starter.stdout.readline(), 60)
    daemon = int(line)
    assert process_running(daemon)
    starter.kill()
    await starter.wait()
    await until(lambda: not process_running(daemon), deadline=30, what="Kubo to end after its starter's SIGKILL")
    successor = ManagedKubo(tmp_path / "repo", kubo_binary)
    try:
        await successor.start()
        async with successor.client() as client:
            assert (await client.id()).id == successor.peer_id
        assert "left running" not in caplog.text  # nothing was left for the start-time backstop
    finally:
        await successor.stop()


def _ip4_hosts(addrs: list[str]) -> list[str]:
    return [a.split("/")[2] for a in addrs if a.startswith("/ip4/")]


async def test_swarm_listens_where_configured(kubo_binary: Path, tmp_path: Path) -> None:
    """`ipfs.swarm_host` 0.0.0.0 (the container's setting: peers reach it from outside): the swarm is reachable on a
    non-loopback address of this machine; the default binds loopback only, so that address is refused there."""
    wide = ManagedKubo(tmp_path / "wide", kubo_binary, swarm_host="0.0.0.0", bootstrap=[])
    narrow = ManagedKubo(tmp_path / "narrow", kubo_binary, bootstrap=[])
    await wide.start()
    try:
        await narrow.start()
        cfg = json.loads((tmp_path / "wide" / "config").read_text())
        assert cfg["Addresses"]["Swarm"] == ["/ip4/0.0.0.0/tcp/0"]
        assert cfg["Addresses"]["API"] == f"/unix{wide.api_socket}"  # the RPC API is on no network at all
        outside = [h for h in _ip4_hosts(wide.swarm_addrs) if not h.startswith("127.")]
        if not outside:
            pytest.skip("this machine has no non-loopback IPv4 address to dial")
        host, wide_port = outside[0], int(wide.swarm_addrs[0].split("/")[4])
        with socket.create_connection((host, wide_port), timeout=5):
            pass  # a peer on another host (or container) reaches it
        assert set(_ip4_hosts(narrow.swarm_addrs)) == {"127.0.0.1"}
        narrow_port = int(narrow.swarm_addrs[0].split("/")[4])
        with pytest.raises(OSError):
            socket.create_connection((host, narrow_port), timeout=5).close()
    finally:
        await narrow.stop()
        await wide.stop()
