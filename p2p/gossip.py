"""Gossip: gossipsub with Cairn's settings, the node's topic handlers, and which peer delivered each message.

Messages of a topic reach the node's handlers one at a time, in arrival order (one asyncio worker per topic). Each
comes with its origin (whose signature gossipsub checked) and its forwarder (the peer whose Noise-authenticated
connection delivered it): pubsub knows the forwarder only while it validates a message, so a validator notes it by
message id (:class:`Forwarders`, IO-free and bounded) and the delivery takes it back. A malformed RPC frame from one
peer resets that peer's pubsub stream only, counted in ``refused``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import trio

from p2p.logs import tame_libp2p_logging

tame_libp2p_logging()  # before libp2p logs anything (importing it configures its logging)

from libp2p.peer.id import ID  # noqa: E402
from libp2p.pubsub.gossipsub import PROTOCOL_ID as GOSSIPSUB_V10  # noqa: E402
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11 as GOSSIPSUB_V11  # noqa: E402
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V12 as GOSSIPSUB_V12  # noqa: E402
from libp2p.pubsub.gossipsub import GossipSub  # noqa: E402
from libp2p.pubsub.pubsub import Pubsub  # noqa: E402

from node.support.errors import one_line  # noqa: E402
from p2p.bridge import TrioThread  # noqa: E402
from p2p.callbacks import LoopTasks, RelayedGossipHandler  # noqa: E402
from p2p.errors import P2PError, P2PTimeout  # noqa: E402
from p2p.guard import FrameBudget, MeteredStream  # noqa: E402
from p2p.peers import PeerTable  # noqa: E402
from p2p.streams import reset_stream, stream_peer  # noqa: E402

log = logging.getLogger("cairn.p2p")

#: Largest payload :meth:`P2PHost.publish` accepts. py-libp2p's gossipsub silently drops RPCs
#: over 1 MiB (signature, key, topic and framing ride along): announce CIDs, never data.
MAX_PUBLISH_BYTES = 1_000_000
#: Largest inbound gossipsub RPC frame: a longer length prefix resets the stream before its body is read.
MAX_INBOUND_RPC_BYTES = 1024 * 1024 + 64 * 1024
#: Messages whose forwarder is remembered between pubsub's validation and their delivery (trio side).
FORWARDERS_MAX = 4096


def new_pubsub(host: Any, heartbeat: float, max_rate: float) -> tuple[Pubsub, GossipSub]:
    """Pubsub and gossipsub on ``host`` with Cairn's settings (not yet running)."""
    gossipsub = GossipSub(
        protocols=[GOSSIPSUB_V12, GOSSIPSUB_V11, GOSSIPSUB_V10],
        degree=6,
        degree_low=4,
        degree_high=12,
        heartbeat_initial_delay=min(0.1, heartbeat),
        # libp2p types it int but sleeps that many seconds, float or not; its default is 120 s.
        heartbeat_interval=heartbeat,  # type: ignore[arg-type]  # float seconds work (see above)
        max_messages_per_topic_per_second=max_rate,
        # "Adaptive" gossip rewrites the heartbeat to 30-60 s once a mesh has fewer than
        # `degree` peers (any network under 7 nodes), 30 s after start.
        adaptive_gossip_enabled=False,
    )
    pubsub = Pubsub(host, gossipsub, strict_signing=True, max_inbound_rpc_size=MAX_INBOUND_RPC_BYTES)
    return pubsub, gossipsub


class Forwarders:
    """Pubsub message id -> the peer whose connection delivered it, from validation until delivery. A message
    validated but never delivered (a full subscription queue) is forgotten: past ``limit``, the oldest half goes."""

    def __init__(self, limit: int = FORWARDERS_MAX) -> None:
        self._limit = limit
        self._by_id: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def note(self, message_id: bytes, forwarder: str) -> None:
        if len(self._by_id) >= self._limit:
            for old in list(self._by_id)[: self._limit // 2]:  # insertion order: the oldest first
                del self._by_id[old]
        self._by_id[message_id] = forwarder

    def take(self, message_id: bytes) -> str | None:
        return self._by_id.pop(message_id, None)


class Gossip:
    """Topics, their handlers and workers (asyncio side); pubsub, subscriptions and forwarders (trio side)."""

    def __init__(
        self, bridge: TrioThread, table: PeerTable, frames: FrameBudget, self_id: str, tasks: LoopTasks
    ) -> None:
        self._bridge = bridge
        self._table = table
        self._frames = frames
        self._self_id = self_id
        self._tasks = tasks
        # asyncio side
        self._topics: dict[str, list[RelayedGossipHandler]] = {}
        self._topic_queues: dict[str, asyncio.Queue[tuple[str, str, bytes]]] = {}
        # trio side
        self.pubsub: Pubsub | None = None
        self._subscribed: set[str] = set()
        self._forwarders = Forwarders()
        #: Inbound gossip RPC frames refused (malformed, cut short or oversized): each resets that peer's stream.
        self.refused = 0

    def attach(self, host: Any, pubsub: Pubsub, gossipsub: GossipSub) -> None:
        """Trio side, while the libp2p host is built: pubsub registered its own stream handler; it is replaced by
        the guarded one."""
        for gossip_protocol in gossipsub.protocols:
            host.set_stream_handler(gossip_protocol, self._guarded_pubsub_handler(pubsub))
        self.pubsub = pubsub

    def topics(self) -> list[str]:
        return list(self._topics)

    def start_workers(self) -> None:
        """On the loop, at start: one worker per topic subscribed before."""
        for topic in self._topics:
            self._ensure_topic_worker(topic)

    def subscribe_relayed(self, topic: str, handler: RelayedGossipHandler) -> None:
        first = topic not in self._topics
        self._topics.setdefault(topic, []).append(handler)
        if first and self._bridge.running:
            self._ensure_topic_worker(topic)
            self._bridge.run_soon(self.trio_subscribe, topic)

    async def publish(self, topic: str, data: bytes) -> None:
        data = bytes(data)
        if len(data) > MAX_PUBLISH_BYTES:
            raise P2PError(f"gossip message of {len(data)} bytes is over {MAX_PUBLISH_BYTES}: announce CIDs, not data")

        async def pub() -> None:
            if self.pubsub is None:  # the bridge runs nothing before the host is built
                raise P2PError("the p2p host is not running")
            await self.pubsub.publish(topic, data)

        await self._bridge.run(pub)

    def topic_peers(self, topic: str) -> list[str]:
        pubsub = self.pubsub
        if pubsub is None:
            return []
        for _ in range(3):  # the trio thread may change the set while we copy it
            try:
                return sorted(p.to_base58() for p in list(pubsub.peer_topics.get(topic, ())))
            except RuntimeError:
                continue
        return []

    async def wait_for_topic_peers(self, topic: str, count: int, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            peers = self.topic_peers(topic)
            if len(peers) >= count:
                return peers
            if time.monotonic() >= deadline:
                raise P2PTimeout(f"{len(peers)} of {count} peers on {topic} after {timeout:g} s")
            await asyncio.sleep(0.02)

    # ---------------------------------------------------------------- asyncio side

    def _ensure_topic_worker(self, topic: str) -> None:
        if topic in self._topic_queues:
            return
        queue: asyncio.Queue[tuple[str, str, bytes]] = asyncio.Queue()
        self._topic_queues[topic] = queue
        loop = self._bridge.loop or asyncio.get_running_loop()
        self._tasks.keep(loop.create_task(self._topic_worker(topic, queue)))

    async def _topic_worker(self, topic: str, queue: asyncio.Queue[tuple[str, str, bytes]]) -> None:
        while True:
            origin, forwarder, data = await queue.get()
            for handler in list(self._topics.get(topic, ())):
                try:
                    result = handler(origin, forwarder, data)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    log.exception("gossip handler for %s failed", topic)

    def _enqueue(self, topic: str, origin: str, forwarder: str, data: bytes) -> None:
        queue = self._topic_queues.get(topic)
        if queue is not None:
            queue.put_nowait((origin, forwarder, data))

    # ---------------------------------------------------------------- trio side

    async def trio_subscribe(self, topic: str) -> None:
        if topic in self._subscribed or self.pubsub is None:
            return
        self._subscribed.add(topic)
        pubsub = self.pubsub
        # Pubsub knows which connection a message came on only while it validates it, and delivers the message
        # without it: a validator notes it by message id, the delivery below takes it back.
        pubsub.set_topic_validator(topic, self._note_forwarder, False)
        subscription = await pubsub.subscribe(topic)
        while True:
            msg = await subscription.get()
            forwarder = self._forwarders.take(pubsub.get_message_id(msg))
            try:
                origin = ID(msg.from_id).to_base58()
            except Exception as e:  # noqa: BLE001  a malformed origin (strict signing makes it rare): drop
                log.debug("gossip on %s with an unreadable origin dropped: %s", topic, one_line(e))
                continue
            if origin == self._self_id or forwarder is None:
                # Our own publications come back to us. No forwarder: validation was skipped, because pubsub
                # validated this very message (origin and seqno) within minutes: it was delivered then.
                continue
            self._table.touch(forwarder)
            self._bridge.to_loop(self._enqueue, topic, origin, forwarder, bytes(msg.data))

    def _note_forwarder(self, forwarder: ID, msg: Any) -> bool:
        """Pubsub's validator (trio): remember whose connection ``msg`` came on; it judges nothing (the node does)."""
        if self.pubsub is not None:
            self._forwarders.note(self.pubsub.get_message_id(msg), forwarder.to_base58())
        return True

    def _guarded_pubsub_handler(self, pubsub: Pubsub) -> Callable[[Any], Awaitable[None]]:
        """py-libp2p's pubsub reader lets a protobuf DecodeError (a malformed RPC frame, such as one cut short)
        escape into the swarm's nursery, which stops the whole host (NOTES.md). Here such a frame ends that
        peer's pubsub stream only: it is reset, the peer dropped from pubsub and counted."""

        async def handle(stream: Any) -> None:
            # Each RPC frame reserved against the frame budget before its body is read (p2p/guard.py).
            metered = MeteredStream(stream, stream_peer(stream), self._frames, MAX_INBOUND_RPC_BYTES)
            try:
                await pubsub.stream_handler(cast(Any, metered))  # duck-typed: the stream, its reads metered
            except trio.Cancelled:
                raise
            except Exception as e:  # noqa: BLE001  any error from one peer's frames must not stop the host
                self.refused += 1
                peer = stream_peer(stream)
                log.warning("malformed gossip RPC from %s refused: %s", peer, one_line(e))
                await reset_stream(stream)
                try:
                    pubsub._handle_dead_peer(stream.muxed_conn.peer_id)
                except Exception as e2:  # noqa: BLE001  already gone: nothing to clean up
                    log.debug("pubsub peer cleanup: %s", one_line(e2))
            finally:
                metered.release()

        return handle
