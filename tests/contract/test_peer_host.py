"""PeerHost contract (node.domain.ports.peer_host): real py-libp2p hosts on 127.0.0.1 (p2p.host) and the in-memory twin
(p2p.memory) answer alike. Two hosts per test at most: real ones start in a fraction of a second."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from node.domain.ports.peer_host import PeerHost
from p2p.errors import P2PBadInput, P2PError, P2PTimeout
from p2p.host import MAX_FRAME_BYTES, MAX_PUBLISH_BYTES, P2PHost
from p2p.memory import MemoryHost, MemoryNetwork, peer_id_of

TOPIC = "/cairn/executions/1"
ECHO = "/test/echo/1"
HostsOf = Callable[[int], Awaitable[list[PeerHost]]]


@pytest_asyncio.fixture(params=["libp2p", "memory"])
async def hosts(request: pytest.FixtureRequest) -> AsyncIterator[HostsOf]:
    """Makes hosts with fresh identities (started or not): real ones, or twins on one network; all stopped after."""
    network, made = MemoryNetwork(), []

    async def make(n: int, start: bool = True) -> list[PeerHost]:
        fresh: list[PeerHost] = [
            P2PHost(os.urandom(32)) if request.param == "libp2p" else MemoryHost(network, os.urandom(32))
            for _ in range(n)
        ]
        made.extend(fresh)
        if start:
            await asyncio.gather(*(h.start() for h in fresh))
        return fresh

    yield make
    await asyncio.gather(*(h.stop() for h in made))


async def _eventually(what: str, check: Callable[[], bool], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def _pair(hosts: HostsOf) -> tuple[PeerHost, PeerHost]:
    a, b = await hosts(2)
    assert await a.connect(b.addrs()[0]) == b.peer_id
    await _eventually("both sides to see the connection", lambda: b.connected_peers() == [a.peer_id])
    return a, b


def test_the_twins_peer_id_is_libp2ps() -> None:
    """The same seed, the same id as P2PHost's (tests/integration/test_p2p_host.py pins this one)."""
    assert peer_id_of(bytes(range(32))) == "12D3KooWA4Xop1JaT3MHxwYMkCepYsv4iPVopMXwCz5iHYdBfeSB"
    assert MemoryHost(MemoryNetwork(), bytes(range(32))).peer_id == P2PHost(bytes(range(32))).peer_id


async def test_a_host_lists_its_addresses_once_started_and_starts_once(hosts: HostsOf) -> None:
    (h,) = await hosts(1, start=False)
    assert h.addrs() == [] and not h.running
    assert await h.accepting() is not None
    await h.start()
    assert h.running and await h.accepting() is None
    assert h.addrs() and all(a.endswith(f"/p2p/{h.peer_id}") for a in h.addrs())
    with pytest.raises(P2PError, match="only once"):
        await h.start()
    await h.stop()
    await h.stop()  # idempotent
    assert not h.running


async def test_connecting_tells_both_sides(hosts: HostsOf) -> None:
    a, b = await hosts(2)
    told_a: list[str] = []
    told_b: list[str] = []
    a.on_peer_connected(told_a.append)
    b.on_peer_connected(told_b.append)
    await a.connect(b.addrs()[0])
    await _eventually("both callbacks", lambda: b.peer_id in told_a and a.peer_id in told_b)
    assert a.connected_peers() == [b.peer_id]
    await _eventually("b to list a", lambda: b.connected_peers() == [a.peer_id])
    listed = {p["peer_id"]: p for p in a.peers()}
    assert listed[b.peer_id]["connected"] is True and listed[b.peer_id]["source"] == "dialed"


async def test_what_cannot_be_dialled(hosts: HostsOf) -> None:
    a, b = await hosts(2)
    with pytest.raises(P2PBadInput):
        await a.connect(a.addrs()[0])  # itself
    with pytest.raises(P2PBadInput):
        await a.connect("not a multiaddr")
    gone = b.addrs()[0]
    await b.stop()
    with pytest.raises(P2PError):
        await a.connect(gone, timeout=5.0)
    assert a.connected_peers() == []


async def test_a_request_is_answered_by_the_peers_handler(hosts: HostsOf) -> None:
    a, b = await _pair(hosts)
    asked: list[str] = []

    async def echo(peer: str, data: bytes) -> bytes:
        asked.append(peer)
        return b"echo:" + data

    b.set_handler(ECHO, echo)
    b.reuse_streams(ECHO)
    a.reuse_streams(ECHO)
    assert await a.request(b.peer_id, ECHO, b"hi") == b"echo:hi"
    assert await a.request(b.peer_id, ECHO, b"again") == b"echo:again"
    assert asked == [a.peer_id, a.peer_id]  # the asker, as its connection proves it
    await a.send_direct(b.peer_id, ECHO, b"ignored")
    assert len(asked) == 3


async def test_failed_requests(hosts: HostsOf) -> None:
    a, b = await _pair(hosts)

    async def broken(peer: str, data: bytes) -> bytes:
        raise RuntimeError("the handler broke")

    async def slow(peer: str, data: bytes) -> bytes:
        await asyncio.sleep(60)
        return b""

    b.set_handler("/test/broken/1", broken)
    b.set_handler("/test/slow/1", slow)
    with pytest.raises(P2PError, match="does not speak that protocol"):
        await a.request(b.peer_id, "/test/nobody/1", b"x")
    with pytest.raises(P2PError) as err:
        await a.request(b.peer_id, "/test/broken/1", b"x")
    assert not isinstance(err.value, P2PTimeout) and "the handler broke" not in str(err.value)  # no internals
    with pytest.raises(P2PTimeout):
        await a.request(b.peer_id, "/test/slow/1", b"x", timeout=1.0)
    with pytest.raises(P2PError, match="over"):
        await a.request(b.peer_id, ECHO, b"x" * (MAX_FRAME_BYTES + 1))


async def test_ask_all_gives_each_peers_answer_or_failure_by_the_deadline(hosts: HostsOf) -> None:
    a, b, c = await hosts(3)
    for other in (b, c):
        await a.connect(other.addrs()[0])

    async def answer(peer: str, data: bytes) -> bytes:
        return b"b:" + data

    async def slow(peer: str, data: bytes) -> bytes:
        await asyncio.sleep(60)
        return b""

    b.set_handler(ECHO, answer)
    c.set_handler(ECHO, slow)
    got = await a.ask_all(ECHO, b"q", timeout=2.0)
    assert set(got) == {b.peer_id, c.peer_id}
    assert got[b.peer_id] == b"b:q" and isinstance(got[c.peer_id], P2PTimeout)
    got = await a.ask_all("/test/nobody/1", b"q", timeout=5.0, peers=[b.peer_id, a.peer_id])
    assert set(got) == {b.peer_id} and "does not speak that protocol" in str(got[b.peer_id])
    assert await a.ask_all(ECHO, b"q", timeout=1.0, peers=[]) == {}


Heard = list[tuple[str, str, bytes]]


def _listen(host: PeerHost) -> Heard:
    heard: Heard = []
    host.subscribe_relayed(TOPIC, lambda origin, forwarder, data: heard.append((origin, forwarder, data)))
    return heard


async def _meshed(publisher: PeerHost, *heard: Heard) -> None:
    """Real gossipsub forms its mesh on a heartbeat and may lose what is sent before: publish a warm-up until every
    listener heard one, then forget the warm-ups (the twin delivers the first)."""
    deadline = time.monotonic() + 20.0
    while not all(any(d == b"warm-up" for _, _, d in h) for h in heard):
        assert time.monotonic() < deadline, "gossip never reached every listener"
        await publisher.publish(TOPIC, b"warm-up")
        await asyncio.sleep(0.1)  # between warm-ups, not a wait for an event
    for h in heard:
        h.clear()


async def test_gossip_reaches_a_subscribed_peer_in_order_never_its_origin(hosts: HostsOf) -> None:
    a, b = await hosts(2)
    heard_a, heard_b = _listen(a), _listen(b)
    await a.connect(b.addrs()[0])
    await _meshed(a, heard_b)
    for i in range(3):
        await a.publish(TOPIC, b"an_0 #%d" % i)
    await _eventually("three messages", lambda: sum(d != b"warm-up" for _, _, d in heard_b) == 3)
    assert [d for _, _, d in heard_b if d != b"warm-up"] == [b"an_0 #0", b"an_0 #1", b"an_0 #2"]
    assert {(o, f) for o, f, _ in heard_b} == {(a.peer_id, a.peer_id)}
    assert heard_a == []  # a does not hear itself
    with pytest.raises(P2PError, match="over"):
        await a.publish(TOPIC, b"x" * (MAX_PUBLISH_BYTES + 1))


async def test_gossip_is_relayed_and_names_who_passed_it_on(hosts: HostsOf) -> None:
    """A line c - b - a: c hears a only through b, once."""
    a, b, c = await hosts(3)
    heard_b, heard_c = _listen(b), _listen(c)
    _listen(a)
    await b.connect(a.addrs()[0])
    await c.connect(b.addrs()[0])
    await _meshed(a, heard_b, heard_c)
    await a.publish(TOPIC, b"from a")
    await _eventually("a's message at c", lambda: any(d == b"from a" for _, _, d in heard_c))
    assert [(o, f) for o, f, d in heard_c if d == b"from a"] == [(a.peer_id, b.peer_id)]
    assert [(o, f) for o, f, d in heard_b if d == b"from a"] == [(a.peer_id, a.peer_id)]


async def test_a_forgotten_peer_is_disconnected_and_unlisted(hosts: HostsOf) -> None:
    a, b = await _pair(hosts)
    await a.forget(b.peer_id)
    await _eventually("the connection to close", lambda: b.peer_id not in a.connected_peers())
    assert b.peer_id not in {p["peer_id"] for p in a.peers()}
