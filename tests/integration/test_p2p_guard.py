"""Hostile libp2p peers against a real node process (``p2p/guard.py``, docs/p2p.md "Limits of the host").

The attackers are raw peers (``tests/fixtures/rawp2p.py``: TCP, multistream, Noise XX and yamux written out by
hand) that do what a py-libp2p host never would; an honest peer is a real ``P2PHost`` in this process. What is
measured is the node's own: its inbound connections, its answers, its ``/healthz``, its resident memory
(``VmRSS`` of the node process, which runs the p2p host; Kubo is another process).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from libp2p.utils.varint import encode_uvarint as uvarint

from p2p.host import MAX_FRAME_BYTES, P2PHost
from tests.fixtures.nodes import NodeProcess, poll
from tests.fixtures.rawp2p import MULTISTREAM, RawPeer, line

LOOKUP = b"/cairn/lookup/1.0.0\n"
IDENTIFY = b"/ipfs/id/1.0.0\n"
MESHSUB = b"/meshsub/1.1.0\n"
INBOUND = 16  # the module node's peers.max_inbound_connections: small, so that filling it is cheap
MiB = 1024 * 1024
STREAMS_PER_PEER = 128  # peers.max_streams_per_peer's default


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {"CAIRN_SPARK_AUTOSTART": "false", "CAIRN_PEERS_MAX_INBOUND_CONNECTIONS": str(INBOUND)}
    n = NodeProcess(tmp_path_factory.mktemp("guard") / "node", env=env).start()
    yield n
    n.stop()


def p2p_addr(node: NodeProcess) -> str:
    status, info = node.get("/api/v0/node")
    assert status == 200
    return str(info["p2p_addrs"][0])


def tcp_of(node: NodeProcess) -> tuple[str, int]:
    parts = p2p_addr(node).split("/")
    return parts[2], int(parts[4])


def rss(node: NodeProcess) -> int:
    """Resident memory of the node process, in bytes."""
    assert node.proc is not None
    for text in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if text.startswith("VmRSS:"):
            return int(text.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Honest:
    """A real P2PHost connected to the node, asking lookups (a malformed CID gets an empty answer: a round trip)."""

    def __init__(self, node: NodeProcess) -> None:
        self.node = node
        self.host = P2PHost(os.urandom(32))
        self.node_id = ""

    async def __aenter__(self) -> Honest:
        await self.host.start()
        self.node_id = await self.host.connect(p2p_addr(self.node), timeout=30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.host.stop()

    async def answered(self, times: int = 3) -> None:
        for _ in range(times):
            answer = await self.host.request(self.node_id, LOOKUP.decode().strip(), os.urandom(40), timeout=15)
            assert answer == b"\x80", answer  # dag-cbor []: the node read the request and answered it


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


# ------------------------------------------------------------------------------ inbound connections


FULL = 300  # complete connections: py-libp2p 0.8.1 never gave back the inbound slot of one (250 slots)
CHEAP = 10_000 - FULL  # connections closed after the greeting: each takes a slot at accept too


def complete_connection(addr: tuple[str, int]) -> None:
    """Noise + yamux from a new identity; closed once the node has registered it (it sends its first frame)."""
    peer = RawPeer(*addr).handshake()
    try:
        peer.recv_frame()
    finally:
        peer.close()


def greeted(addr: tuple[str, int]) -> bool:
    """A TCP connection the node accepts (it sends the multistream greeting), closed at once."""
    with socket.create_connection(addr, timeout=30) as s:
        want, got = line(MULTISTREAM), b""
        while len(got) < len(want):
            chunk = s.recv(len(want) - len(got))
            if not chunk:
                return False
            got += chunk
        return got == want


async def test_a_node_that_accepted_and_closed_10000_connections_accepts_the_next(node: NodeProcess) -> None:
    addr = tcp_of(node)

    def complete_all() -> None:
        for i in range(FULL):
            try:
                complete_connection(addr)
            except ConnectionError as e:
                raise AssertionError(f"connection {i + 1} refused after {i} accepted and closed: {e}") from None

    await in_thread(complete_all)
    with ThreadPoolExecutor(8) as pool:
        accepted = await in_thread(lambda: sum(pool.map(greeted, [addr] * CHEAP)))
    assert accepted == CHEAP
    async with Honest(node) as honest:  # the next one: `cairn connect`'s dial, then a request answered
        await honest.answered()
    status, health = node.get("/healthz")
    assert status == 200 and health["p2p"]["accepting"] is True


async def test_healthz_says_when_p2p_cannot_accept(node: NodeProcess) -> None:
    addr = tcp_of(node)
    assert poll(lambda: node.get("/healthz")[1]["p2p"]["ready"], 30, 0.2, what="p2p ready")
    held: list[RawPeer] = []
    try:
        while len(held) < 300:  # connections kept open until one is refused: every slot taken (250 at most before)
            try:
                held.append(RawPeer(*addr).handshake().start_reader())
            except ConnectionError:
                break

        def deaf() -> dict[str, Any] | None:
            status, health = node.get("/healthz")
            assert status == 200  # Kubo serves: the node is ok, not ready
            return health if health["p2p"].get("accepting") is False else None

        health = poll(deaf, 30, 0.2, what="/healthz to say p2p accepts no connection")
        assert health["ready"] is False and health["p2p"]["ready"] is False
        assert "no inbound connection slot free" in health["p2p"]["error"]
    finally:
        for peer in held:
            peer.close()
    poll(lambda: node.get("/healthz")[1]["p2p"].get("accepting") is True, 30, 0.2, what="p2p accepting again")


# ------------------------------------------------------------------------------ streams and frames


async def test_data_past_the_receive_window_is_not_buffered(node: NodeProcess) -> None:
    """Two ways the probe grew the node without limit: DATA pushed on a lookup stream the node had given up on
    (a 64 MiB frame announced), and DATA on a stream whose reader reads nothing (identify only writes)."""
    addr, pushed = tcp_of(node), 128 * MiB
    async with Honest(node) as honest:
        before = rss(node)
        given_up, unread = RawPeer(*addr).handshake().start_reader(), RawPeer(*addr).handshake().start_reader()
        given_up.open_stream(1, LOOKUP)
        given_up.data(1, uvarint(64 * MiB))
        await in_thread(given_up.wait_ended, 1)  # the node gave the frame up: nobody reads stream 1 any more
        unread.open_stream(1, IDENTIFY)

        def push(peer: RawPeer) -> bool:
            chunk = os.urandom(64 * 1024 - 12)
            try:
                for _ in range(pushed // len(chunk)):
                    peer.data(1, chunk)
            except OSError:
                return False  # the node closed the connection
            return peer.settled()

        await asyncio.gather(in_thread(push, given_up), in_thread(push, unread), honest.answered())
        grown = rss(node) - before
        print(f"window: node grew {grown / MiB:.1f} MiB for {2 * pushed / MiB:.0f} MiB pushed")  # shown with -s
        await honest.answered()
        assert grown < 64 * MiB, f"the node grew by {grown / MiB:.0f} MiB for {2 * pushed / MiB:.0f} MiB pushed"
        assert unread.closed.wait(30), "DATA past the window did not close the connection"
        given_up.close()


async def test_one_peer_cannot_take_every_stream_slot(node: NodeProcess) -> None:
    addr, count = tcp_of(node), 10_500
    async with Honest(node) as honest:
        peer = RawPeer(*addr).handshake().start_reader()
        try:
            await in_thread(peer.open_streams, range(1, 2 * count, 2), MESHSUB)
            assert await in_thread(peer.settled)  # the node read every SYN
            await honest.answered(5)
            print(f"streams: {len(peer.resets)} of {count} reset")  # shown with -s
            assert len(peer.resets) >= count - STREAMS_PER_PEER, f"{len(peer.resets)} of {count} streams reset"
        finally:
            peer.close()


def all_but_the_last_byte(length: int) -> bytes:
    """A uvarint-prefixed frame of ``length`` bytes, cut one byte short: the receiver waits for the rest."""
    return (uvarint(length) + bytes(length))[:-1]


async def test_stalled_partial_frames_are_bounded_in_total(node: NodeProcess) -> None:
    """8 peers, each on 8 gossip streams (a 1 MiB RPC frame) and 8 lookup streams (a 4 MiB request frame), each
    frame sent but its last byte, then stalled: py-libp2p and the old request reader held every byte (about
    320 MiB here; the probe's 600 lookup streams held 2.35 GB) until each stream's timeout; here the frame budget
    (8 MiB a peer, 64 MiB in all) refuses what does not fit before its body is read."""
    addr, peers, streams = tcp_of(node), 8, 8
    frames = [(MESHSUB, all_but_the_last_byte(MiB))] * streams + [
        (LOOKUP, all_but_the_last_byte(MAX_FRAME_BYTES))
    ] * streams
    async with Honest(node) as honest:
        before = rss(node)
        attackers = [RawPeer(*addr).handshake().start_reader() for _ in range(peers)]
        try:

            def stall(peer: RawPeer) -> int:
                sent = 0
                for sid, (protocol, frame) in zip(range(1, 4 * streams, 2), frames):
                    peer.open_stream(sid, protocol)
                    sent += peer.send_within_window(sid, frame)
                peer.settled()
                return sent

            sent = await asyncio.gather(*(in_thread(stall, p) for p in attackers))
            grown = rss(node) - before
            print(f"frames: node grew {grown / MiB:.1f} MiB, {sum(sent)} of {len(frames) * peers} frames in")  # -s
            await honest.answered()
            assert grown < 160 * MiB, f"the node grew by {grown / MiB:.0f} MiB while {sum(sent)} frames stalled"
            assert sum(sent) < len(frames) * peers  # the budget refused some before their body was read
        finally:
            for p in attackers:
                p.close()
