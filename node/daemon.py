"""`cairn node start`: run a node in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import time

from aiohttp import web

from config import Settings
from node import __version__
from node.api import create_app
from node.core import Node
from node.errors import ConfigError
from node.home import Home

log = logging.getLogger("cairn.daemon")


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> None:
    running = Home(settings.home).read_runtime()
    if running is not None:
        raise ConfigError(f"a node already runs for {settings.home} (pid {running['pid']}, {running.get('api')})")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner: web.AppRunner | None = None
    node = await Node.open(settings)
    try:
        app = create_app(node, node.home.token(), settings.api.max_upload_bytes)
        # A client that disconnects cancels its request, and so its query (issue 15; as aiohttp's TestServer does).
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, settings.api.host, settings.api.port)
        try:
            await site.start()
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"api.port {settings.api.port} on {settings.api.host} is in use: "
                    "set another with --api-port, CAIRN_API_PORT or api.port (0 picks a free one)"
                ) from None
            raise
        host, port = runner.addresses[0][:2]
        node.api_url = f"http://{host}:{port}"
        node.home.write_runtime(
            {"pid": os.getpid(), "api": node.api_url, "version": __version__, "started": time.time()}
        )
        log.info("http api listening", extra={"api": node.api_url})
        print(f"cairn node {node.identity.peer_id} listening on {node.api_url}", flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("stopping on signal")
    finally:
        node.home.clear_runtime(os.getpid())
        if runner is not None:
            await runner.cleanup()
        await node.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
