"""Every error of the node's one error tree (node/support/errors.py) has its gRPC status
(node.faces.api.flight_rpc.refusal),
chosen by the HTTP status it carries: a client error is never a server fault, and the message is the node's one
line. And the LIKE matcher of the catalog filters (node.faces.api.flight.Like) agrees with SQL LIKE without
backtracking."""

from __future__ import annotations

import functools

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.faces.api.flight import Like
from node.faces.api.flight_rpc import refusal
from node.support import errors


def _tree(cls: type[errors.CairnError]) -> list[type[errors.CairnError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _tree(sub))]


EXPECTED = {
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    429: grpc.StatusCode.UNAVAILABLE,
    501: grpc.StatusCode.UNIMPLEMENTED,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
    507: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


@pytest.mark.parametrize("cls", sorted(set(_tree(errors.CairnError)), key=lambda c: c.__name__))
def test_every_error_has_its_grpc_status(cls: type[errors.CairnError]) -> None:
    e = cls.__new__(cls)
    errors.CairnError.__init__(e, "one line")
    status = e.status
    out = refusal(e)
    assert out.message == "one line"
    default = grpc.StatusCode.INVALID_ARGUMENT if status < 500 else grpc.StatusCode.INTERNAL
    assert out.code == EXPECTED.get(status, default), (cls.__name__, status, out.code)


# -- LIKE ------------------------------------------------------------------------------------------------------


def like_reference(name: str, pattern: str) -> bool:
    """SQL LIKE by its definition, memoized on (name position, pattern position): obviously right, slow."""

    @functools.cache
    def at(i: int, j: int) -> bool:
        if j == len(pattern):
            return i == len(name)
        if pattern[j] == "%":
            return at(i, j + 1) or (i < len(name) and at(i + 1, j))
        return i < len(name) and pattern[j] in ("_", name[i]) and at(i + 1, j + 1)

    return at(0, 0)


@settings(max_examples=2000, deadline=None)
@given(st.text("ab%_.\\*", max_size=8), st.text("ab.\\*\n", max_size=10))
def test_like_agrees_with_its_definition(pattern: str, name: str) -> None:
    assert Like(pattern).match(name) == like_reference(name, pattern), (pattern, name)


def test_like_on_long_names_and_many_percents() -> None:
    """``%`` × 200 then ``#``: a regex translation tries every way to share the name among 200 ``.*`` (hours for
    a short name); here each piece between two ``%`` is looked for once, left to right."""
    like = Like("%" * 200 + "#")
    assert not like.match("s" * 10_000)
    assert len(like.middle) == 199 and all(p.pattern == "" for p in like.middle)
    assert Like("%a%b%").match("x" * 5000 + "a" + "y" * 5000 + "b")
    assert not Like("%a%b%").match("b" * 5000 + "a" * 5000)
