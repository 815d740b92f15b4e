"""Transform.Storage objects: ``Type``, ``Asset`` and ``Function`` (transform-storage-provenance.md §3.2–3.4).

They are **not** Holium envelopes (``{"typedVersion", "content"}``): the spec defines them as IPLD maps with
canonical field names at the top level (Tables 1–3), Algorithms 1 and 4 read those fields there, and any other
Transform.Storage implementation must be able to read a Cairn type and compute the same CID. So each is one plain
DAG-CBOR map (DESIGN.md "Object rules": DAG-CBOR, BLAKE3, CIDv1), told apart from Cairn/Holium kinds by having no
``typedVersion`` and a ``protocol_name`` of ``"transform.storage"``; ``decode_object`` reads them as plain data.

Field presence follows the tables: every canonical field is present (its value may be null where the table says
so: ``Type.cid``, ``creator``, ``Function.fn``/``reference``/``environment``/``env_params``), ``creator_id_format``
is required when ``creator`` is non-null, ``name`` and ``description`` are optional, and other keys are kept as the
implementation's optional fields (§3.2 "Individual implementations may add optional fields"), so a decoded object
re-encodes to its own CID.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self

from multiformats import CID

from node.domain.model._shape import Ctx, want_map, want_str
from node.domain.model.codec import Block, block_of
from node.support.errors import InvalidObject

PROTOCOL_NAME = "transform.storage"  # Table 1: protocol_name "Must be "transform.storage""
PROTOCOL_VERSION = "2.0.0"
SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = (PROTOCOL_VERSION,)

COMMON_FIELDS = ("creator", "protocol_name", "protocol_version")
OPTIONAL_FIELDS = ("creator_id_format", "name", "description")
# The canonical fields each table requires, per protocol version (Algorithms 1 and 4, "for the given protocol version").
TYPE_FIELDS: dict[str, tuple[str, ...]] = {"2.0.0": ("cid", "type_checking", *COMMON_FIELDS)}
ASSET_FIELDS: dict[str, tuple[str, ...]] = {"2.0.0": ("payload", "template", *COMMON_FIELDS)}
FUNCTION_FIELDS: dict[str, tuple[str, ...]] = {
    "2.0.0": ("execution", "fn", "reference", "in", "out", "environment", "env_params", *COMMON_FIELDS)
}


def has_canonical_fields(obj: dict[str, Any], table: dict[str, tuple[str, ...]]) -> bool:
    """Every field the table requires for ``obj``'s protocol version, and ``creator_id_format`` when ``creator``
    is non-null (Tables 1–3: "required if creator is non-null")."""
    version = obj.get("protocol_version")
    required = table.get(version, ()) if isinstance(version, str) else ()
    if not required or any(k not in obj for k in required):
        return False
    return obj.get("creator") is None or "creator_id_format" in obj


def _nullable_str(v: Any, ctx: Ctx) -> str | None:
    return None if v is None else want_str(v, ctx)


@dataclass(frozen=True)
class _Object:
    """Common fields and the map form; subclasses name their own canonical fields."""

    what: ClassVar[str]
    fields: ClassVar[dict[str, tuple[str, ...]]]
    creator: str | None = None
    creator_id_format: str | None = None
    name: str | None = None
    description: str | None = None
    protocol_version: str = PROTOCOL_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # an implementation's optional fields, kept as given

    def _own(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_ipld(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.extra, **self._own()}
        out.update(creator=self.creator, protocol_name=PROTOCOL_NAME, protocol_version=self.protocol_version)
        for key in OPTIONAL_FIELDS:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    def block(self) -> Block:
        return block_of(self.to_ipld())

    @property
    def cid(self) -> CID:
        return self.block().cid

    @classmethod
    def _common(cls, obj: Any) -> tuple[dict[str, Any], Ctx, dict[str, Any]]:
        """Check the fields every object has; the map, its context, and the common field values."""
        ctx = Ctx(cls.what)
        m = want_map(obj, ctx, required=cls.fields[PROTOCOL_VERSION], optional=None)
        if m["protocol_name"] != PROTOCOL_NAME:
            raise ctx.at("protocol_name").fail(f'must be "{PROTOCOL_NAME}"')
        version = want_str(m["protocol_version"], ctx.at("protocol_version"))
        if version not in SUPPORTED_PROTOCOL_VERSIONS:
            raise ctx.at("protocol_version").fail(f"version {version[:40]!r} is not supported (supported: 2.0.0)")
        creator = _nullable_str(m["creator"], ctx.at("creator"))
        if creator is not None and m.get("creator_id_format") is None:
            raise ctx.fail('missing key "creator_id_format" (required when creator is non-null)')
        known = {*cls.fields[PROTOCOL_VERSION], *OPTIONAL_FIELDS}
        common = {
            "creator": creator,
            "protocol_version": version,
            "extra": {k: v for k, v in m.items() if k not in known},
            **{k: _nullable_str(m.get(k), ctx.at(k)) for k in OPTIONAL_FIELDS},
        }
        return m, ctx, common


@dataclass(frozen=True)
class Type(_Object):
    """Table 1. ``cid``: the data defining the type (a schema), or null; ``type_checking``: a value of the type
    checking table (node.domain.model.typecheck.TYPE_CHECKING) naming f_check."""

    what: ClassVar[str] = "Type"
    fields: ClassVar[dict[str, tuple[str, ...]]] = TYPE_FIELDS
    type_checking: str = ""
    schema: CID | None = None  # the Type.cid field (``cid`` is the object's own CID here)

    def _own(self) -> dict[str, Any]:
        return {"cid": self.schema, "type_checking": self.type_checking}

    @classmethod
    def from_ipld(cls, obj: Any) -> Self:
        m, ctx, common = cls._common(obj)
        if m["cid"] is not None and not isinstance(m["cid"], CID):
            raise ctx.at("cid").wrong("link or null", m["cid"])
        return cls(type_checking=want_str(m["type_checking"], ctx.at("type_checking")), schema=m["cid"], **common)


@dataclass(frozen=True)
class Asset(_Object):
    """Table 2: ``payload`` (a CID, an array of CIDs, or the raw data) is a term of ``template`` (a type)."""

    what: ClassVar[str] = "Asset"
    fields: ClassVar[dict[str, tuple[str, ...]]] = ASSET_FIELDS
    payload: Any = None
    template: Any = None

    def _own(self) -> dict[str, Any]:
        return {"payload": self.payload, "template": self.template}

    @classmethod
    def from_ipld(cls, obj: Any) -> Self:
        m, _, common = cls._common(obj)
        return cls(payload=m["payload"], template=m["template"], **common)


@dataclass(frozen=True)
class Function(_Object):
    """Table 3. ``execution`` names how ``fn`` is read (Table 4); ``in``/``out`` are types (a CID, a Type map or
    an array); ``reference``, ``environment`` and ``env_params`` are strings or null."""

    what: ClassVar[str] = "Function"
    fields: ClassVar[dict[str, tuple[str, ...]]] = FUNCTION_FIELDS
    execution: str = ""
    fn: Any = None
    reference: str | None = None
    input: Any = None  # the ``in`` field (a Python keyword)
    output: Any = None  # the ``out`` field
    environment: str | None = None
    env_params: str | None = None

    def _own(self) -> dict[str, Any]:
        return {
            "execution": self.execution,
            "fn": self.fn,
            "reference": self.reference,
            "in": self.input,
            "out": self.output,
            "environment": self.environment,
            "env_params": self.env_params,
        }

    @classmethod
    def from_ipld(cls, obj: Any) -> Self:
        m, ctx, common = cls._common(obj)
        return cls(
            execution=want_str(m["execution"], ctx.at("execution")),
            fn=m["fn"],
            reference=_nullable_str(m["reference"], ctx.at("reference")),
            input=m["in"],
            output=m["out"],
            environment=_nullable_str(m["environment"], ctx.at("environment")),
            env_params=_nullable_str(m["env_params"], ctx.at("env_params")),
            **common,
        )


OBJECTS: dict[str, type[Type] | type[Asset] | type[Function]] = {"Type": Type, "Asset": Asset, "Function": Function}


ObjectKind = Literal["Type", "Asset", "Function"]
_KIND_FIELDS: tuple[tuple[str, ObjectKind], ...] = (
    ("type_checking", "Type"),
    ("template", "Asset"),
    ("execution", "Function"),
)


def object_kind(obj: Any) -> ObjectKind:
    """Which Transform.Storage object a map is, by its distinguishing canonical field; InvalidObject if none."""
    if isinstance(obj, dict):
        for key, kind in _KIND_FIELDS:
            if key in obj:
                return kind
    raise InvalidObject(
        "not a Transform.Storage object: a Type has type_checking, an Asset template, a Function execution"
    )


def parse_object(obj: Any) -> Type | Asset | Function:
    """The checked Type, Asset or Function a map holds (InvalidObject names the field)."""
    return OBJECTS[object_kind(obj)].from_ipld(obj)
