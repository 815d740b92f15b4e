"""Holium selectors: the subset of IPLD selectors Holium uses to wire pipelines.

Holium schema v0, "Selectors and connections": a ``SelectorEnvelope`` ``{"selector": sel}`` is
a top-level object, and ``Selector`` is a keyed union of Matcher ``"."``, ExploreIndex ``"i"``,
ExploreRange ``"r"`` and ExploreUnion ``"|"``. Indexes are unsigned (holium-rs 1.0.2, "Selectors
indexes should be unsigned"), a range's start is at most its end (the end is exclusive, as in
IPLD selectors), and a union holds at least one selector.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Self, TypeAlias

from multiformats import CID

from node.domain.model._shape import Ctx, want_int, want_list, want_map, want_str
from node.domain.model.codec import Block, block_of

__all__ = [
    "ExploreIndex",
    "ExploreRange",
    "ExploreUnion",
    "Matcher",
    "Selector",
    "SelectorEnvelope",
    "selector_from_ipld",
]

_ROOT = Ctx("selector")


def _ipld(sel: Any) -> Any:
    to_ipld = getattr(sel, "to_ipld", None)
    return to_ipld() if callable(to_ipld) else sel


class _Validated:
    """Selectors built in code are checked the same way as decoded ones."""

    def __post_init__(self) -> None:
        selector_from_ipld(self.to_ipld(), _ROOT)

    def to_ipld(self) -> Any:  # each selector class defines its own
        raise NotImplementedError


@dataclass(frozen=True)
class Matcher(_Validated):
    """``{".": {}}`` or ``{".": {"label": s}}``: the reached node is part of the result."""

    label: str | None = None

    def to_ipld(self) -> dict[str, Any]:
        return {".": {} if self.label is None else {"label": self.label}}


@dataclass(frozen=True)
class ExploreIndex(_Validated):
    """``{"i": {"i": n, ">": next}}``: go to list index ``n`` and apply ``next``."""

    index: int
    next: Selector

    def to_ipld(self) -> dict[str, Any]:
        return {"i": {"i": self.index, ">": _ipld(self.next)}}


@dataclass(frozen=True)
class ExploreRange(_Validated):
    """``{"r": {"^": start, "$": end, ">": next}}``: apply ``next`` to indexes start ≤ i < end."""

    start: int
    end: int
    next: Selector

    def to_ipld(self) -> dict[str, Any]:
        return {"r": {"^": self.start, "$": self.end, ">": _ipld(self.next)}}


@dataclass(frozen=True)
class ExploreUnion(_Validated):
    """``{"|": [sel, …]}``: apply several selectors to the same node."""

    members: tuple[Selector, ...]

    def __post_init__(self) -> None:
        if isinstance(self.members, list):
            object.__setattr__(self, "members", tuple(self.members))
        super().__post_init__()

    def to_ipld(self) -> dict[str, Any]:
        members = self.members
        return {"|": [_ipld(m) for m in members] if isinstance(members, (tuple, list)) else members}


Selector: TypeAlias = Matcher | ExploreIndex | ExploreRange | ExploreUnion
_KEYS = ".", "i", "r", "|"


def selector_from_ipld(obj: Any, ctx: Ctx = _ROOT) -> Selector:
    """Parse the keyed-union form of a selector; InvalidObject names the bad field."""
    m = want_map(obj, ctx, optional=_KEYS)
    if len(m) != 1:
        raise ctx.fail(
            'expected exactly one of the keys ".", "i", "r", "|"'
            if m
            else 'empty map: expected one of the keys ".", "i", "r", "|"'
        )
    ((key, body),) = m.items()
    here = ctx.at(key)
    if key == ".":
        b = want_map(body, here, optional=("label",))
        label = want_str(b["label"], here.at("label")) if "label" in b else None
        return _build(Matcher, label)
    if key == "i":
        b = want_map(body, here, required=("i", ">"))
        index = want_int(b["i"], here.at("i", "index"), minimum=0)
        return _build(ExploreIndex, index, selector_from_ipld(b[">"], here.at(">", "next")))
    if key == "r":
        b = want_map(body, here, required=("^", "$", ">"))
        start = want_int(b["^"], here.at("^", "start"), minimum=0)
        end = want_int(b["$"], here.at("$", "end"), minimum=0)
        if start > end:
            raise here.fail(f"range start {start} is greater than its end {end}")
        return _build(ExploreRange, start, end, selector_from_ipld(b[">"], here.at(">", "next")))
    items = want_list(body, here)
    if not items:
        raise here.fail("a union needs at least one selector")
    return _build(ExploreUnion, tuple(selector_from_ipld(x, here.at(i)) for i, x in enumerate(items)))


def _build(cls: type[Any], *args: Any) -> Any:
    """Construct without re-validating (the parser already checked every field)."""
    obj = object.__new__(cls)
    for field, value in zip(fields(cls), args):
        object.__setattr__(obj, field.name, value)
    return obj


@dataclass(frozen=True)
class SelectorEnvelope:
    """``{"selector": sel}``: a selector stored as its own object (linked from ``cx_0``)."""

    selector: Selector

    def __post_init__(self) -> None:
        self.from_ipld(self.to_ipld())

    def to_ipld(self) -> dict[str, Any]:
        return {"selector": _ipld(self.selector)}

    @classmethod
    def from_ipld(cls, obj: Any) -> Self:
        m = want_map(obj, _ROOT, required=("selector",))
        return _build(cls, selector_from_ipld(m["selector"], _ROOT.at("selector")))

    def links(self) -> list[CID]:
        return []

    def block(self) -> Block:
        return block_of(self)
