"""Shape checks for typed objects, with error messages that name the field.

A message reads ``<kind>: <path> (<field>): <problem>``, e.g.
``ex_0: content[3] (exitStatus): expected bool, got int``, so the sender can find the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from multiformats import CID

from node.domain.model.codec import kind_name
from node.support.errors import InvalidObject

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Ctx:
    """Where a value sits inside an object of some kind."""

    __slots__ = ("kind", "name", "path")

    def __init__(self, kind: str, path: str = "", name: str | None = None) -> None:
        self.kind, self.path, self.name = kind, path, name

    def at(self, key: int | str, name: str | None = None) -> Ctx:
        if isinstance(key, int):
            seg = f"[{key}]"
        elif _IDENT.match(key):
            seg = f".{key}" if self.path else key
        else:
            seg = f"[{json.dumps(key, ensure_ascii=False)}]"
        return Ctx(self.kind, self.path + seg, name)

    def fail(self, problem: str) -> InvalidObject:
        where = self.path + (f" ({self.name})" if self.name else "")
        return InvalidObject(f"{self.kind}: {where}: {problem}" if where else f"{self.kind}: {problem}")

    def wrong(self, expected: str, value: Any) -> InvalidObject:
        return self.fail(f"expected {expected}, got {kind_name(value)}")


def want_link(v: Any, ctx: Ctx) -> CID:
    if not isinstance(v, CID):
        raise ctx.wrong("link", v)
    return v


def want_str(v: Any, ctx: Ctx) -> str:
    if not isinstance(v, str):
        raise ctx.wrong("string", v)
    return v


def want_bool(v: Any, ctx: Ctx) -> bool:
    if not isinstance(v, bool):
        raise ctx.wrong("bool", v)
    return v


def want_int(v: Any, ctx: Ctx, minimum: int | None = None) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise ctx.wrong("int", v)
    if minimum is not None and v < minimum:
        raise ctx.fail(f"must be ≥ {minimum}, got {v}")
    return v


def want_list(v: Any, ctx: Ctx, length: int | None = None) -> list[Any]:
    if not isinstance(v, list):
        raise ctx.wrong("list" if length is None else f"list of {length}", v)
    if length is not None and len(v) != length:
        raise ctx.fail(f"expected a list of {length} elements, got {len(v)}")
    return v


def want_map(v: Any, ctx: Ctx, required: Iterable[str] = (), optional: Iterable[str] | None = ()) -> dict[str, Any]:
    """A map with all ``required`` keys; other keys must be in ``optional`` (None: any key)."""
    if not isinstance(v, dict):
        raise ctx.wrong("map", v)
    required = tuple(required)
    for key in required:
        if key not in v:
            raise ctx.fail(f"missing key {json.dumps(key, ensure_ascii=False)}")
    if optional is not None:
        allowed = set(required) | set(optional)
        extra = sorted(k for k in v if k not in allowed)
        if extra:
            raise ctx.fail(f"unexpected key {json.dumps(str(extra[0]), ensure_ascii=False)}")
    return v


def links_in(value: Any) -> list[CID]:
    """Every CID in an IPLD value, in document order."""
    out: list[CID] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, CID):
            out.append(v)
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
    return out
