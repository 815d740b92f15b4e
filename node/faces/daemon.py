"""`cairn node start`: run a node until SIGINT/SIGTERM.

The first signal stops taking queries and lets the running ones finish, saying so; a second one cancels them
(their Spark job groups with them) and stops at once."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal

from aiohttp import web

from config import Settings, flight_port
from node.adapters.home import Home
from node.core import Node
from node.faces.api import create_app, flight
from node.support.errors import ConfigError

log = logging.getLogger("cairn.daemon")


def _say(message: str) -> None:
    """To the terminal (or the --detach log) and the log: a user who pressed Ctrl-C must see why it waits."""
    print(message, flush=True)
    log.info(message)


class Signals:
    """SIGINT/SIGTERM: the first sets ``stop``, the second ``hurry``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.stop, self.hurry = loop, asyncio.Event(), asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)

    def _on_signal(self) -> None:
        (self.hurry if self.stop.is_set() else self.stop).set()

    def close(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.loop.remove_signal_handler(sig)


async def serve(settings: Settings, ready: asyncio.Event | None = None) -> None:
    home = Home(settings.home)
    running = home.read_runtime()
    if running is not None:
        raise ConfigError(f"a node already runs for {settings.home} (pid {running['pid']}, {running.get('api')})")
    if (starting := home.read_pid()) is not None and starting != os.getpid():
        raise ConfigError(f"a node is starting for {settings.home} (pid {starting})")
    home.write_pid()  # from the first moment: `cairn node stop` can stop a node that is still starting
    signals = Signals(asyncio.get_running_loop())
    runner: web.AppRunner | None = None
    face: flight.FlightFace | None = None
    try:
        node = await Node.open(settings)
    except BaseException:
        home.clear_pid(os.getpid())
        signals.close()
        raise
    try:
        node.warm_up()
        if settings.api.flight:  # before the HTTP API: node.json, written once that listens, names both
            face = flight.start(node, settings.api.host, flight_port(settings.api), node.home.token())
        runner = await _listen(node, settings)
        if ready is not None:
            ready.set()
        await signals.stop.wait()
        await _drain(node, signals)
    finally:
        node.stopped_listening()
        if face is not None:  # its queries are done or cancelled (_drain): its calls end now
            await flight.stop(face)
        if runner is not None:
            if signals.hurry.is_set():
                # Queries are cancelled: do not wait 60 s for their sockets. Private (aiohttp 3.14 sets it only
                # in the constructor); test_lifecycle's waiting HTTP query and 5 s deadline fail if it stops working.
                runner._shutdown_timeout = 1.0
            await runner.cleanup()
        await node.close(hurry=signals.hurry.is_set())
        home.clear_pid(os.getpid())
        signals.close()


async def _listen(node: Node, settings: Settings) -> web.AppRunner:
    app = create_app(node, node.home.token(), settings.api.max_upload_bytes)
    # A client that disconnects cancels its request, and so its query (as aiohttp's TestServer does).
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, settings.api.host, settings.api.port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"api.port {settings.api.port} on {settings.api.host} is in use: "
                "set another with --api-port, CAIRN_API_PORT or api.port (0 picks a free one)"
            ) from None
        raise
    host, port = runner.addresses[0][:2]
    api = f"http://{host}:{port}"
    node.listening(api=api)  # and node.json, where `cairn` finds it
    log.info("http api listening", extra={"api": api})
    print(f"cairn node {node.identity.peer_id} listening on {api}", flush=True)
    return runner


async def _drain(node: Node, signals: Signals) -> None:
    """After the first signal: refuse new queries, wait for the running ones, or cancel them on a second signal."""
    node.begin_stopping()
    n = node.running_queries()
    if not n:
        _say("stopping")
        return
    _say(f"stopping: waiting for {_queries(n)}; press Ctrl-C again to cancel them")
    done = asyncio.ensure_future(node.queries_done())
    hurry = asyncio.ensure_future(signals.hurry.wait())
    await asyncio.wait([done, hurry], return_when=asyncio.FIRST_COMPLETED)
    done.cancel()
    hurry.cancel()
    if signals.hurry.is_set() and node.running_queries():
        _say(f"cancelling {_queries(node.running_queries())} and their Spark jobs")
        await node.cancel_queries()


def _queries(n: int) -> str:
    return f"{n} running {'query' if n == 1 else 'queries'}"
