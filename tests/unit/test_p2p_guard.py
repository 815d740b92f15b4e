"""The guards of ``p2p/guard.py`` on their own: the frame budget's arithmetic, the gate's verdicts on yamux frame
headers, and frames read through the budget (the attacks themselves: tests/integration/test_p2p_guard.py)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from libp2p.peer.id import ID
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, YamuxStream

from p2p.guard import (
    FrameBudget,
    FrameRefused,
    GuardedYamux,
    HostLimits,
    MeteredStream,
    StreamGuard,
    _Verdict,
    read_request_frame,
)

LIMITS = HostLimits(streams_per_connection=4, streams_total=6, frame_bytes_total=600, frame_bytes_per_peer=250)
DATA, WINDOW_UPDATE, PING = 0, 1, 2
SYN = 1


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 300)), max_size=60))
def test_the_frame_budget_never_holds_more_than_its_limits(frames: list[tuple[str, int]]) -> None:
    budget = FrameBudget(LIMITS)
    held: list[tuple[str, int]] = []
    for peer, n in frames:
        if budget.take(peer, n):
            held.append((peer, n))
        big = [(p, m) for p, m in held if m > budget.small]
        assert budget.used == sum(m for _, m in big) <= LIMITS.frame_bytes_total
        for p in "abc":
            assert sum(m for q, m in big if q == p) <= LIMITS.frame_bytes_per_peer
        if n <= budget.small:
            assert (peer, n) in held  # a small frame is always read
    for peer, n in held:
        budget.give(peer, n)
    assert budget.used == 0


class _Conn:
    """Enough of a secured connection for Yamux's constructor."""

    is_initiator = False

    async def read(self, n: int | None = None) -> bytes:
        return b""


def _mux(guard: StreamGuard) -> GuardedYamux:
    return GuardedYamux(_Conn(), ID(b"\x00\x01\x02"), is_initiator=False, guard=guard)


def _inbound(mux: GuardedYamux, sid: int) -> Any:
    stream = YamuxStream(sid, mux, False)
    mux.streams[sid] = stream
    return stream


def test_the_gate_refuses_streams_past_the_budgets() -> None:
    guard = StreamGuard(LIMITS)
    a, b = _mux(guard), _mux(guard)
    for sid in range(1, 9, 2):
        assert a.judge(WINDOW_UPDATE, SYN, sid, 0) is _Verdict.PASS
        _inbound(a, sid)
    assert a.judge(WINDOW_UPDATE, SYN, 9, 0) is _Verdict.REFUSE  # 4 on this connection
    _inbound(b, 1)
    assert b.judge(WINDOW_UPDATE, SYN, 3, 0) is _Verdict.PASS
    _inbound(b, 3)
    assert b.judge(DATA, SYN, 5, 10) is _Verdict.REFUSE  # 6 in all
    assert b.judge(PING, SYN, 0, 7) is _Verdict.PASS  # pings are not streams


def test_the_gate_enforces_the_window_and_drops_data_nobody_reads() -> None:
    mux = _mux(StreamGuard(LIMITS))
    assert mux.judge(DATA, SYN, 1, DEFAULT_WINDOW_SIZE + 1) is _Verdict.VIOLATION  # a new stream's first window
    stream = _inbound(mux, 1)
    stream.recv_window, stream.target_recv_window = 1000, 4 * DEFAULT_WINDOW_SIZE
    assert mux.judge(DATA, 0, 1, 1000) is _Verdict.PASS
    assert mux.judge(DATA, 0, 1, 1001) is _Verdict.VIOLATION
    assert stream.target_recv_window == DEFAULT_WINDOW_SIZE and stream._apply_autotune_epoch(0) == 0  # no growth
    stream.reset_received = stream.closed = True
    assert mux.judge(DATA, 0, 1, 10**6) is _Verdict.DROP
    assert mux.judge(DATA, 0, 99, 10**6) is _Verdict.PASS  # unknown stream: yamux reads and drops it itself


class _Stream:
    """A stream that hands out ``data`` in pieces, then ends (or stalls forever with ``stall``)."""

    def __init__(self, data: bytes, piece: int = 7, stall: bool = False) -> None:
        self.data, self.piece, self.stall = data, piece, stall

    async def read(self, n: int | None = None) -> bytes:
        if not self.data and self.stall:
            await trio.sleep_forever()
        take = min(self.piece, len(self.data), n if n is not None and n >= 0 else len(self.data))
        out, self.data = self.data[:take], self.data[take:]
        await trio.lowlevel.checkpoint()
        return out


def _framed(body: bytes) -> bytes:
    from libp2p.utils.varint import encode_varint_prefixed

    return bytes(encode_varint_prefixed(body))


def test_request_frames_are_read_within_the_budget() -> None:
    async def main() -> None:
        budget = FrameBudget(LIMITS)
        body = bytes(range(200))
        assert await read_request_frame(_Stream(_framed(body)), "a", budget, 1000, 5) == body
        assert budget.used == 0
        assert await read_request_frame(_Stream(b""), "a", budget, 1000, 5) is None  # the asker is done
        with pytest.raises(FrameRefused, match="over the 100-byte limit"):
            await read_request_frame(_Stream(_framed(body)), "a", budget, 100, 5)
        assert budget.take("a", 200)
        with pytest.raises(FrameRefused, match="budget"):
            await read_request_frame(_Stream(_framed(body)), "a", budget, 1000, 5)
        budget.give("a", 200)
        stalled = HostLimits(**{**LIMITS.__dict__, "frame_timeout": 0.05})
        slow = FrameBudget(stalled)
        with pytest.raises(trio.TooSlowError):
            await read_request_frame(_Stream(_framed(body)[:50], stall=True), "a", slow, 1000, 5)
        assert slow.used == 0  # the stalled frame's reservation is given back

    trio.run(main)


def test_a_metered_stream_hands_the_same_bytes_and_holds_one_frame_at_a_time() -> None:
    async def main() -> None:
        budget = FrameBudget(LIMITS)
        frames = [bytes([i]) * (100 + 50 * i) for i in range(3)]
        metered = MeteredStream(_Stream(b"".join(_framed(f) for f in frames)), "a", budget, 1000)
        out = b""
        while chunk := await metered.read(13):
            out += chunk
            assert budget.used <= 200  # at most the frame being read
        assert out == b"".join(_framed(f) for f in frames) and budget.used == 0
        with pytest.raises(FrameRefused):
            await MeteredStream(_Stream(_framed(bytes(300))), "a", budget, 1000).read(1)  # over 250 a peer

    trio.run(main)
