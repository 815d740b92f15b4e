"""Typed objects ("kinds") in Holium's envelope form, and the registry that decodes them.

DESIGN.md "Object rules": a typed kind is ``{"typedVersion": "<kind>_<ver>", "content": …}``
(Holium schema v0, "Versioning strategy": the discriminant names both structure and version).
This module defines Holium's kinds; Cairn's own kinds (st_0, qy_0, iv_0, mb_0, rc_0, an_0, ep_0) live
in their own modules and join the registry with ``@register_kind``::

    @register_kind
    @dataclass(frozen=True)
    class Structure(Kind):
        typed_version: ClassVar[str] = "st_0"
        ...  # fields, then _content() and _parse()
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from multiformats import CID

from node.domain.model._shape import Ctx, links_in, want_bool, want_int, want_link, want_list, want_map, want_str
from node.domain.model.codec import Block, block_of, check_ipld, kind_name
from node.domain.model.selectors import SelectorEnvelope
from node.support.errors import InvalidObject, UnknownKind, quote

__all__ = [
    "KINDS",
    "Connection",
    "DryTransformation",
    "Execution",
    "Kind",
    "ModuleBytecodeEnvelope",
    "Pipeline",
    "PipelineEdge",
    "RecursiveDataEnvelope",
    "ScalarDataEnvelope",
    "decode_object",
    "register_kind",
    "validate",
]

_TYPED_VERSION = re.compile(r"[a-z][a-z0-9]*_[0-9]+\Z")


class Kind:
    """Base of every typed kind.

    A subclass is a frozen dataclass with a ``typed_version`` class attribute and two methods:
    ``_content()`` (the IPLD ``content`` built from the fields) and ``_parse(content, ctx)``
    (check an IPLD ``content`` and return the field values). Objects built in code and
    objects decoded from blocks go through the same ``_parse``, so both are validated alike.
    """

    typed_version: ClassVar[str]

    def _content(self) -> Any:
        raise NotImplementedError

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        raise NotImplementedError

    def __post_init__(self) -> None:
        values = self._parse(self._content(), Ctx(self.typed_version).at("content"))
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def to_ipld(self) -> dict[str, Any]:
        """The envelope ``{"typedVersion": …, "content": …}`` ready for DAG-CBOR."""
        return {"typedVersion": self.typed_version, "content": self._content()}

    @classmethod
    def from_ipld(cls, obj: Any) -> Self:
        """Check an envelope of this kind and build the object (InvalidObject names the field)."""
        ctx = Ctx(cls.typed_version)
        m = want_map(obj, ctx, required=("typedVersion", "content"))
        if m["typedVersion"] != cls.typed_version:
            raise ctx.at("typedVersion").fail(f"expected {quote(cls.typed_version)}, got {quote(m['typedVersion'])}")
        return cls(**cls._parse(m["content"], ctx.at("content")))

    def links(self) -> list[CID]:
        """Every CID the object links to, in the order they appear."""
        return links_in(self._content())

    def block(self) -> Block:
        """The object's DAG-CBOR block (its CID is the object's identity)."""
        return block_of(self)


KINDS: dict[str, type[Kind]] = {}


def register_kind(cls: type[Kind]) -> type[Kind]:
    """Class decorator: make ``decode_object`` recognise ``cls.typed_version``."""
    tv = getattr(cls, "typed_version", None)
    if not isinstance(tv, str) or not _TYPED_VERSION.match(tv):
        raise TypeError(f"{cls.__name__}.typed_version must look like 'ex_0', got {tv!r}")
    old = KINDS.get(tv)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"typedVersion {tv} is already registered by {old.__module__}.{old.__qualname__}")
    KINDS[tv] = cls
    return cls


def decode_object(obj: Any) -> Kind | SelectorEnvelope | None:
    """The typed object an IPLD value holds, or None for plain data (no ``typedVersion``).

    A map whose only key is ``"selector"`` is read as a SelectorEnvelope (Holium stores
    selectors that way, without a ``typedVersion``).
    """
    if not isinstance(obj, dict):
        return None
    if "typedVersion" in obj:
        tv = obj["typedVersion"]
        if not isinstance(tv, str):
            raise InvalidObject(f"typedVersion: expected string, got {kind_name(tv)}")
        cls = KINDS.get(tv)
        if cls is None:
            raise UnknownKind(f"unknown kind {quote(tv, 40)}: known kinds are {', '.join(sorted(KINDS))}")
        return cls.from_ipld(obj)
    if list(obj) == ["selector"]:
        return SelectorEnvelope.from_ipld(obj)
    return None


def validate(obj: Any) -> None:
    """Raise unless ``obj`` is valid IPLD and, if typed, a valid object of its kind."""
    if isinstance(obj, (Kind, SelectorEnvelope)):
        return
    check_ipld(obj)
    decode_object(obj)


# --------------------------------------------------------------------------- Holium kinds
# Holium schema v0 ("Reference schema"): links are to typed envelopes or data blocks.


@dataclass(frozen=True)
class _LinkEnvelope(Kind):
    """An envelope whose content is one link."""

    content: CID

    def _content(self) -> Any:
        return self.content

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        return {"content": want_link(content, ctx)}


@register_kind
@dataclass(frozen=True)
class ScalarDataEnvelope(_LinkEnvelope):
    """sde_0: points to a scalar data block (schema "Data": ``&ScalarData_v0``)."""

    typed_version: ClassVar[str] = "sde_0"


@register_kind
@dataclass(frozen=True)
class RecursiveDataEnvelope(_LinkEnvelope):
    """rde_0: points to a recursive data block, a list of links (schema "Data")."""

    typed_version: ClassVar[str] = "rde_0"


@register_kind
@dataclass(frozen=True)
class ModuleBytecodeEnvelope(_LinkEnvelope):
    """mbe_0: points to module bytecode (schema "Execution": ``&ModuleBytecode_v0``)."""

    typed_version: ClassVar[str] = "mbe_0"


@register_kind
@dataclass(frozen=True)
class Execution(Kind):
    """ex_0: one run of ``handle`` in a module on an input (schema "Execution").

    ``exit_status`` False means success (a 0 exit code); only a failed run may have no output.
    """

    typed_version: ClassVar[str] = "ex_0"
    bytecode: CID  # -> mbe_0
    handle: str
    input: CID  # -> rde_0
    exit_status: bool
    output: CID | None  # -> rde_0

    def _content(self) -> Any:
        return [self.bytecode, self.handle, self.input, self.exit_status, self.output]

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        c = want_list(content, ctx, 5)
        exit_status = want_bool(c[3], ctx.at(3, "exitStatus"))
        if c[4] is None and not exit_status:
            raise ctx.at(4, "output").fail("a successful execution (exitStatus false) needs an output link")
        return {
            "bytecode": want_link(c[0], ctx.at(0, "bytecode")),
            "handle": want_str(c[1], ctx.at(1, "handle")),
            "input": want_link(c[2], ctx.at(2, "input")),
            "exit_status": exit_status,
            "output": None if c[4] is None else want_link(c[4], ctx.at(4, "output")),
        }


@register_kind
@dataclass(frozen=True)
class DryTransformation(Kind):
    """dt_0: a module and handle without data (schema "Dry transformation")."""

    typed_version: ClassVar[str] = "dt_0"
    bytecode: CID  # -> mbe_0
    handle: str

    def _content(self) -> Any:
        return [self.bytecode, self.handle]

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        c = want_list(content, ctx, 2)
        return {"bytecode": want_link(c[0], ctx.at(0, "bytecode")), "handle": want_str(c[1], ctx.at(1, "handle"))}


@register_kind
@dataclass(frozen=True)
class Connection(Kind):
    """cx_0: wires a tail (output) selector to a head (input) selector (schema "Pipelines")."""

    typed_version: ClassVar[str] = "cx_0"
    tail_selector: CID  # -> SelectorEnvelope
    head_selector: CID  # -> SelectorEnvelope

    def _content(self) -> Any:
        return [self.tail_selector, self.head_selector]

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        c = want_list(content, ctx, 2)
        return {
            "tail_selector": want_link(c[0], ctx.at(0, "tailSelector")),
            "head_selector": want_link(c[1], ctx.at(1, "headSelector")),
        }


@dataclass(frozen=True)
class PipelineEdge:
    """``[tailIndex, headIndex, connection]``: output of vertex tail feeds input of vertex head."""

    tail_index: int
    head_index: int
    connection: CID  # -> cx_0

    def to_ipld(self) -> list[Any]:
        return [self.tail_index, self.head_index, self.connection]


@register_kind
@dataclass(frozen=True)
class Pipeline(Kind):
    """pl_0: a DAG of vertices (maps of short descriptor → link) and edges (schema "Pipelines")."""

    typed_version: ClassVar[str] = "pl_0"
    vertices: tuple[dict[str, CID], ...]
    edges: tuple[PipelineEdge, ...]

    def _content(self) -> Any:
        vertices = (
            [dict(v) if isinstance(v, Mapping) else v for v in self.vertices]
            if isinstance(self.vertices, (list, tuple))
            else self.vertices
        )
        edges = (
            [e.to_ipld() if isinstance(e, PipelineEdge) else list(e) if isinstance(e, tuple) else e for e in self.edges]
            if isinstance(self.edges, (list, tuple))
            else self.edges
        )
        return [vertices, edges]

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        c = want_list(content, ctx, 2)
        vctx, ectx = ctx.at(0, "vertices"), ctx.at(1, "edges")
        vertices = []
        for i, v in enumerate(want_list(c[0], vctx)):
            vertex = want_map(v, vctx.at(i), optional=None)
            vertices.append({k: want_link(link, vctx.at(i).at(k)) for k, link in vertex.items()})
        edges = []
        for i, e in enumerate(want_list(c[1], ectx)):
            here = ectx.at(i)
            t, h, cx = want_list(e, here, 3)
            tail = want_int(t, here.at(0, "tailIndex"), minimum=0)
            head = want_int(h, here.at(1, "headIndex"), minimum=0)
            for idx, j, name in ((tail, 0, "tailIndex"), (head, 1, "headIndex")):
                if idx >= len(vertices):
                    raise here.at(j, name).fail(f"vertex {idx} does not exist (the pipeline has {len(vertices)})")
            edges.append(PipelineEdge(tail, head, want_link(cx, here.at(2, "connection"))))
        return {"vertices": tuple(vertices), "edges": tuple(edges)}
