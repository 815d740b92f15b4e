"""The calls of the Flight face (node.faces.api.flight_rpc.Calls): result streams bounded in number and in the memory
they reserve, both given back when gRPC says a call ended; a call that waits on its client past the idle timeout
is cancelled, one that waits on the node is not."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from node.faces.api.flight_rpc import Calls, Limits, Refused


class Context:
    """What Calls uses of a gRPC servicer context: its done-callbacks, cancel, peer."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], None]] = []
        self.cancelled = False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self.callbacks.append(callback)
        return True

    def cancel(self) -> None:
        self.cancelled = True

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def end(self) -> None:
        for callback in self.callbacks:
            callback()


def test_streams_are_bounded_in_number_and_memory_and_given_back() -> None:
    calls = Calls(Limits(max_streams=2, stream_bytes=100, idle_timeout=60))
    a, b, c = Context(), Context(), Context()
    wa, wb = calls.enter(a, stream=True), calls.enter(b, stream=True)
    with pytest.raises(Refused) as e:
        calls.enter(c, stream=True)
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "api.flight_max_streams" in e.value.message
    calls.enter(Context())  # a call that is not a stream is not counted against them
    calls.reserve(wa, 60)
    with pytest.raises(Refused, match="try again when one ends"):
        calls.reserve(wb, 50)
    with pytest.raises(Refused, match="more than all streams may hold"):
        calls.reserve(wb, 101)
    assert calls.count() == (3, 2, 60)
    a.end()  # gRPC says the call ended: its slot and its memory are free
    assert calls.count() == (2, 1, 0)
    calls.reserve(wb, 100)
    calls.enter(c, stream=True)


def test_a_call_waiting_on_its_client_past_the_idle_timeout_is_cancelled() -> None:
    calls = Calls(Limits(idle_timeout=5))
    waiting, working, fresh = Context(), Context(), Context()
    w1, calls_working, w3 = calls.enter(waiting), calls.enter(working), calls.enter(fresh)
    now = 1000.0  # a clock reading given to the sweep: the test owns time, the machine's load cannot move it
    w1.since = now - 6  # its client has owed it something for 6 s
    w3.since = now - 1  # and this one for 1 s
    assert calls_working.since is None  # waiting on the node (a query, a slice): never the client's fault
    assert calls.sweep(now) == 1
    assert waiting.cancelled and not working.cancelled and not fresh.cancelled
    assert calls.sweep(now) == 0  # cancelled once
    assert calls.sweep(now + 4.5) == 1 and fresh.cancelled  # 5.5 s: past the timeout too
    with w3.waiting():
        pass
    assert w3.since is None
