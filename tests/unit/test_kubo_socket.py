"""The managed Kubo's RPC API on a unix socket: where the socket goes, its directory, and the client over it.

End to end (a real Kubo, another user's process refused on every path) is
tests/integration/test_kubo_managed.py::test_no_other_user_reaches_anything_on_the_api."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from aiohttp import web

from node.adapters.ipfs import KuboClient
from node.adapters.ipfs.addr import SUN_PATH_MAX
from node.adapters.ipfs.managed_repo import api_socket_path, private_dir
from node.support.errors import KuboStartError, KuboUnreachable


def test_socket_beside_the_repo(tmp_path: Path) -> None:
    assert api_socket_path(tmp_path / "kubo") == tmp_path / "kubo.rpc" / "api.sock"


def test_a_path_too_long_moves_to_a_short_dir_named_after_the_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "kubo"
    # A runtime dir as short as a real one (/run/user/UID): pytest's tmp_path may itself be too long for a socket.
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    sock = api_socket_path(deep)
    assert sock.parent.parent == runtime and sock.parent.name.startswith(f"cairn-kubo-{os.getuid()}-")
    assert len(os.fsencode(sock)) <= SUN_PATH_MAX
    assert api_socket_path(deep) == sock  # the same at every start
    assert api_socket_path(deep.with_name("other")) != sock  # one per repo
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    shutil.rmtree(runtime)
    assert api_socket_path(deep).parent.parent == Path("/tmp")


def test_private_dir_is_0700_and_refuses_what_is_not_ours(tmp_path: Path) -> None:
    made = tmp_path / "kubo.rpc"
    private_dir(made)
    assert made.stat().st_mode & 0o777 == 0o700
    made.chmod(0o755)
    private_dir(made)  # tightened
    assert made.stat().st_mode & 0o777 == 0o700
    link = tmp_path / "link.rpc"
    link.symlink_to(made)
    with pytest.raises(KuboStartError, match="must be a directory of this user's"):
        private_dir(link)


async def _serve(site_of: type[web.UnixSite] | type[web.TCPSite], where: str) -> tuple[web.AppRunner, str]:
    async def version(request: web.Request) -> web.Response:
        return web.json_response({"Version": where, "Auth": request.headers.get("Authorization")})

    app = web.Application()
    app.router.add_post("/api/v0/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    if site_of is web.UnixSite:
        await web.UnixSite(runner, where).start()
        return runner, f"/unix{where}"
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_client_over_a_socket_and_moving_to_tcp(tmp_path: Path) -> None:
    """The client reaches a ``/unix/…`` API and follows it when it moves to TCP and back."""
    unix_runner, unix_api = await _serve(web.UnixSite, str(tmp_path / "api.sock"))
    tcp_runner, tcp_api = await _serve(web.TCPSite, "tcp")
    try:
        async with KuboClient(unix_api, auth="bearer:s3cret", timeout=5.0) as client:
            assert client.api_url == f"unix:{tmp_path}/api.sock"
            assert (await client.version()).version == str(tmp_path / "api.sock")
            client.api_url = tcp_api
            assert (await client.version()).version == "tcp"
            client.api_url = unix_api
            assert (await client.version()).version == str(tmp_path / "api.sock")
    finally:
        await unix_runner.cleanup()
        await tcp_runner.cleanup()
    async with KuboClient(f"unix:{tmp_path}/gone.sock", timeout=2.0) as client:
        with pytest.raises(KuboUnreachable, match=f"cannot reach Kubo at unix:{tmp_path}/gone.sock"):
            await client.version()
