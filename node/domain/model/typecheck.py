"""Transform.Storage's required functions, Algorithms 1–4 (transform-storage-provenance.md §6.1.1–6.1.4).

``is_simple_type_normal_form``, ``normalize_type``, ``is_term`` and ``is_valid_asset`` follow the pseudocode line
by line (the comments give the line numbers) and return the spec's ``{result, code, protocol, protocol_version}``
(``normalize_type`` also ``success``). They do no IO of their own: a CID is expanded through the ``load`` of the
:class:`TypeContext` they are given (``None``: no IPFS node, the spec's "Could not expand CID" branches), so unit
tests run them on a dict of blocks and the node on its Kubo (node.services.type_checks).

Readings of the pseudocode, where its text and the tables disagree (docs/provenance.md "Types"):

* The protocol field is ``protocol_name`` with the value ``"transform.storage"`` (Tables 1–3); the pseudocode's
  ``T.protocol = "Transform.Storage"`` names the same field. Codes keep the pseudocode's words, with the spaces the
  PDF lost ("…protocol version 3.0.0 not supported by this implementation").
* The null type of §3.2 ("Type null has no terms") and Table 4 is the pseudocode's ``False``: IPLD null and
  ``false`` both take the ``T is False`` branches. ``normalize_type`` returns it unchanged (the comment of
  Algorithm 1 line 4: "False is a valid simple type"; else ``D ⊗ null`` in Table 4 would not be a type).
* Algorithm 3 line 23 (``return True``) is read after the loop, not inside it (else only index 0 is checked).
* Algorithm 4 line 38 appends ``A.payload[i]`` retrieved (the text says ``A.payload``).
* A CID the node cannot retrieve (absent, timed out) takes the "Could not expand" branches (§6.1: "best effort").

CIDs cannot form cycles, but one type can fan out to many blocks: expansion is bounded by :class:`Limits` (blocks
loaded, array elements visited, nesting depth) and past a bound the answer is ``result`` false (``success`` false)
with a code starting ``type expansion limit:``.

Unit tests: tests/unit/test_model_typecheck.py (one test per branch, mapped there).
"""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from multiformats import CID

from node.domain.model.cid import cid_str
from node.domain.model.structure import Structure
from node.domain.model.types import (
    ASSET_FIELDS,
    PROTOCOL_NAME,
    SUPPORTED_PROTOCOL_VERSIONS,
    TYPE_FIELDS,
    has_canonical_fields,
)
from node.support.errors import BlockNotRetrieved, CairnError, TypeCheckStop, TypeExpansionLimit

# Each function's own version, and the versions of the functions it calls that it accepts (§6.1.1–6.1.4:
# "Protocol implementation maintains <function>.version and an array of supported … values").
IS_SIMPLE_TYPE_NORMAL_FORM_VERSION = "2.0.0"
NORMALIZE_TYPE_VERSION = "2.0.0"
IS_TERM_VERSION = "2.0.0"
IS_VALID_ASSET_VERSION = "2.0.0"
NORMALIZE_SUPPORTS: tuple[str, ...] = ("2.0.0",)  # isSimpleTypeNormalForm versions
ASSET_SUPPORTS: tuple[str, ...] = ("2.0.0",)  # normalizeType versions

LIMIT = "type expansion limit: "
NO_STRUCTURE = "D has no Arrow structure (not a dataset version, a signed query receipt or an st_0 structure)"

Loader = Callable[[CID], Awaitable[Any] | Any]  # a CID → its decoded block; async or plain
StructureOf = Callable[[Any], Awaitable[Structure | None]]


class VerdictJson(TypedDict):
    """A verdict as JSON: the spec's ``{result, code, protocol, protocol_version}``."""

    result: bool
    code: str | None
    protocol: str
    protocol_version: str


@dataclass(frozen=True)
class Verdict:
    """``{result, code, protocol, protocol_version}`` of Algorithms 1, 3 and 4."""

    result: bool
    code: str | None
    protocol_version: str
    protocol: str = PROTOCOL_NAME

    def to_json(self) -> VerdictJson:
        return {
            "result": self.result,
            "code": self.code,
            "protocol": self.protocol,
            "protocol_version": self.protocol_version,
        }


@dataclass(frozen=True)
class Normalized:
    """``{result, success, code, protocol, protocol_version}`` of Algorithm 2."""

    result: Any
    success: bool
    code: str | None
    protocol_version: str = NORMALIZE_TYPE_VERSION
    protocol: str = PROTOCOL_NAME


@dataclass(frozen=True)
class Limits:
    blocks: int = 1000  # CIDs loaded by one call (types, schemas, payloads)
    elements: int = 100_000  # array elements visited by one call
    depth: int = 64  # arrays and CIDs nested inside each other


@dataclass
class TypeContext:
    """What the algorithms may reach: ``load`` (None: no IPFS node), the structure of a data blob for the Arrow
    checks (``structure_of``, after the st_0 case this module handles), and the budget of one call."""

    load: Loader | None = None
    structure_of: StructureOf | None = None
    limits: Limits = field(default_factory=Limits)
    blocks: int = 0
    elements: int = 0
    depth: int = 0

    async def fetch(self, cid: CID) -> Any:
        if self.load is None:
            raise BlockNotRetrieved("no IPFS node")
        self.blocks += 1
        if self.blocks > self.limits.blocks:
            raise TypeExpansionLimit(f"{LIMIT}more than {self.limits.blocks} blocks")
        try:
            value = self.load(cid)
            return await value if inspect.isawaitable(value) else value
        except CairnError:
            raise BlockNotRetrieved(f"could not expand {cid}") from None

    def count(self, n: int) -> None:
        self.elements += n
        if self.elements > self.limits.elements:
            raise TypeExpansionLimit(f"{LIMIT}more than {self.limits.elements} array elements")

    def deeper(self) -> TypeContext:
        """Enter one level of nesting (the caller calls ``shallower`` after)."""
        self.depth += 1
        if self.depth > self.limits.depth:
            self.depth -= 1
            raise TypeExpansionLimit(f"{LIMIT}nested deeper than {self.limits.depth}")
        return self

    def shallower(self) -> None:
        self.depth -= 1

    async def structure(self, data: Any) -> Structure | None:
        """The Arrow structure ``data`` has: an st_0 structure is its own; else ``structure_of`` (a dataset
        version's, node.services.type_checks), else none."""
        if isinstance(data, dict) and data.get("typedVersion") == "st_0":
            try:
                return Structure.from_ipld(data)
            except CairnError:
                return None
        return await self.structure_of(data) if self.structure_of is not None else None


def _is_false(t: Any) -> bool:
    """The pseudocode's ``False``, which is §3.2's null type (see the module docstring)."""
    return t is False or t is None


# --------------------------------------------------------------------------------------------- Algorithm 1


def is_simple_type_normal_form(t: Any) -> Verdict:
    """Algorithm 1 (§6.1.1): is ``t`` a simple type (not a series type) in the normal form?"""
    v = IS_SIMPLE_TYPE_NORMAL_FORM_VERSION  # line 1: the suffix
    if t is True:  # line 2
        return Verdict(True, None, v)
    if _is_false(t):  # line 4
        return Verdict(False, "Type T is False", v)
    if isinstance(t, dict):  # line 6
        if t.get("protocol_name") != PROTOCOL_NAME:  # line 7
            return Verdict(False, "Type T does not use the Transform.Storage protocol", v)
        if "protocol_version" not in t:  # line 9
            return Verdict(False, "Type T does not list a Transform.Storage protocol version", v)
        version = t["protocol_version"]
        if version not in SUPPORTED_PROTOCOL_VERSIONS:  # line 11
            return Verdict(False, _unsupported("Type T", version), v)
        if not has_canonical_fields(t, TYPE_FIELDS):  # line 13
            return Verdict(False, f"T does not contain required Type fields for transform.storage version {version}", v)
        return Verdict(True, None, v)  # line 15
    return Verdict(False, "T is not an object", v)  # line 19


def _unsupported(who: str, version: Any) -> str:
    shown = version if isinstance(version, str) else json.dumps(version) if isinstance(version, (int, float)) else "?"
    return f"{who} uses Transform.Storage protocol version {shown[:40]} not supported by this implementation"


# --------------------------------------------------------------------------------------------- Algorithm 2


async def normalize_type(t: Any, ctx: TypeContext | None = None) -> Normalized:
    """Algorithm 2 (§6.1.2): the normal form of ``t`` (a simple type, or a flat array of simple types)."""
    ctx = ctx if ctx is not None else TypeContext()
    try:
        return await _normalize(t, ctx)
    except TypeExpansionLimit as e:
        return Normalized(None, False, e.code)


async def _normalize(t: Any, ctx: TypeContext) -> Normalized:
    simple = is_simple_type_normal_form(t)  # line 2
    if simple.protocol_version not in NORMALIZE_SUPPORTS:  # line 3
        code = (
            f"isSimpleTypeNormalForm version {simple.protocol_version} not supported by normalizeType version "
            f"{NORMALIZE_TYPE_VERSION}"
        )
        return Normalized(None, False, code)
    if simple.result or _is_false(t):  # line 5 (and the null type: see the module docstring)
        return Normalized(t, True, None)
    if isinstance(t, CID):  # line 7
        try:
            expanded = await ctx.fetch(t)  # line 9
        except BlockNotRetrieved:
            return Normalized(None, False, "Could not expand CID")  # line 12
        ctx.deeper()
        try:
            return await _normalize(expanded, ctx)  # line 10
        finally:
            ctx.shallower()
    if isinstance(t, list):  # line 14
        return await _normalize_array(t, ctx)
    return Normalized(None, False, "T is not a type")  # line 30


async def _normalize_array(t: list[Any], ctx: TypeContext) -> Normalized:
    ctx.count(len(t))
    ctx.deeper()
    try:
        out: list[Any] = []  # line 15
        for item in t:  # line 16
            elem = await _normalize(item, ctx)  # line 17
            if not elem.success:  # line 18
                return elem  # line 19
            if isinstance(elem.result, list):  # line 21
                out.extend(elem.result)  # line 22
            else:
                out.append(elem.result)  # line 24
        return Normalized(out, True, None)  # line 28
    finally:
        ctx.shallower()


# --------------------------------------------------------------------------------------------- Algorithm 3


async def is_term(t: Any, d: Any, ctx: TypeContext | None = None) -> Verdict:
    """Algorithm 3 (§6.1.3): is the data blob ``d`` a term of the type ``t`` (in normal form)?"""
    ctx = ctx if ctx is not None else TypeContext()
    try:
        return await _is_term(t, d, ctx)
    except TypeExpansionLimit as e:
        return Verdict(False, e.code, IS_TERM_VERSION)


async def _is_term(t: Any, d: Any, ctx: TypeContext) -> Verdict:
    v = IS_TERM_VERSION
    if t is True:  # line 2
        return Verdict(True, None, v)
    if _is_false(t):  # line 4
        return Verdict(False, "Type T is False", v)
    if isinstance(t, dict):  # line 6
        if t.get("protocol_name") != PROTOCOL_NAME:  # line 7
            return Verdict(False, "Type T does not use the Transform.Storage protocol", v)
        if t.get("protocol_version") not in SUPPORTED_PROTOCOL_VERSIONS:  # line 10
            return Verdict(False, _unsupported("Type T", t.get("protocol_version")), v)
        checking = t.get("type_checking")  # line 13: the table of T.protocol_version (one version today)
        f_check = TYPE_CHECKING.get(checking) if isinstance(checking, str) else None
        if f_check is None:
            return Verdict(False, unknown_type_checking(checking), v)
        result, code = await f_check(t, d, ctx)  # line 14
        return Verdict(result, code, v)
    if isinstance(t, list):  # line 15
        if not isinstance(d, list) or len(d) != len(t):  # line 16
            return Verdict(False, "D and T length mismatch", v)
        ctx.count(len(t))
        ctx.deeper()
        try:
            for i, (ti, di) in enumerate(zip(t, d, strict=True)):  # line 19
                if not (await _is_term(ti, di, ctx)).result:  # line 20
                    return Verdict(False, f"D and T mismatch at index {i}", v)
        finally:
            ctx.shallower()
        return Verdict(True, None, v)  # line 23, after the loop
    return Verdict(False, "T is not the normal form of a transform.storage type", v)  # line 26


def unknown_type_checking(value: Any) -> str:
    """The code for a ``type_checking`` the table does not hold (the spec names none: Cairn's own)."""
    shown = value[:60] if isinstance(value, str) else "a non-string value"
    return f"type_checking {shown!r} is not in the type checking table (known: {', '.join(sorted(TYPE_CHECKING))})"


# --------------------------------------------------------------------------------------------- Algorithm 4


async def is_valid_asset(a: Any, ctx: TypeContext | None = None) -> Verdict:
    """Algorithm 4 (§6.1.4): is ``a`` (an Asset or its CID) valid: is its payload a term of its template?"""
    ctx = ctx if ctx is not None else TypeContext()
    try:
        return await _is_valid_asset(a, ctx)
    except TypeExpansionLimit as e:
        return Verdict(False, e.code, IS_VALID_ASSET_VERSION)


async def _is_valid_asset(a: Any, ctx: TypeContext) -> Verdict:
    v = IS_VALID_ASSET_VERSION
    if isinstance(a, CID):  # line 2
        try:
            expanded = await ctx.fetch(a)  # line 4
        except BlockNotRetrieved:
            return Verdict(False, "Could not expand CID", v)  # line 7
        ctx.deeper()
        try:
            return await _is_valid_asset(expanded, ctx)  # line 5
        finally:
            ctx.shallower()
    if not isinstance(a, dict):  # line 52
        return Verdict(False, "A is not an object", v)
    problem = _asset_fields_problem(a)  # lines 10–17
    if problem is not None:
        return Verdict(False, problem, v)
    template = await _normalize(a["template"], ctx)  # line 19
    if template.protocol_version not in ASSET_SUPPORTS:  # line 20
        code = (
            f"normalizeType version {template.protocol_version} not supported by isValidAsset version "
            f"{IS_VALID_ASSET_VERSION}"
        )
        return Verdict(False, code, v)
    if not template.success:  # line 22
        return Verdict(False, template.code, v)
    try:
        d = await _asset_data(a["payload"], template.result, ctx)  # lines 26–48
    except TypeCheckStop as e:
        return Verdict(False, e.code, v)
    term = await _is_term(template.result, d, ctx)  # line 50
    return Verdict(term.result, term.code, v)  # line 51


def _asset_fields_problem(a: dict[str, Any]) -> str | None:
    """Lines 10–17 of Algorithm 4: the code, or None when the asset has what its version requires."""
    if a.get("protocol_name") != PROTOCOL_NAME:  # line 10
        return "Asset A does not use the Transform.Storage protocol"
    if "protocol_version" not in a:  # line 12
        return "Asset A does not list a Transform.Storage protocol version"
    version = a["protocol_version"]
    if version not in SUPPORTED_PROTOCOL_VERSIONS:  # line 14
        return _unsupported("Asset A", version)
    if not has_canonical_fields(a, ASSET_FIELDS):  # line 16
        return f"A does not contain required Asset fields for transform.storage version {version}"
    return None


async def _asset_data(payload: Any, t: Any, ctx: TypeContext) -> Any:
    """Lines 26–48: the data D the payload names, its CIDs retrieved once, never recursively (§3.3)."""
    if isinstance(payload, CID):  # line 27
        try:
            return await ctx.fetch(payload)  # line 29
        except BlockNotRetrieved:
            raise TypeCheckStop("Could not expand A.payload CID") from None  # line 31
    if isinstance(payload, list) and isinstance(t, list):  # line 33
        ctx.count(len(payload))
        d: list[Any] = []  # line 34
        for i, item in enumerate(payload):  # line 35
            if isinstance(item, CID):  # line 36
                try:
                    d.append(await ctx.fetch(item))  # line 38
                except BlockNotRetrieved:
                    raise TypeCheckStop(f"Could not expand A.payload[{i}] CID") from None  # line 40
            else:
                d.append(item)  # line 43
        return d
    return payload  # line 47


# --------------------------------------------------------------------------------------------- the table

FCheck = Callable[[dict[str, Any], Any, TypeContext], Awaitable[tuple[bool, str | None]]]


async def _schema_of(t: dict[str, Any], ctx: TypeContext, what: str) -> Any:
    """The value ``T.cid`` names, or the code saying why there is none (as ``TypeCheckStop``)."""
    if not isinstance(t.get("cid"), CID):
        raise TypeCheckStop(f"T.cid is not the CID of {what}")
    try:
        return await ctx.fetch(t["cid"])
    except BlockNotRetrieved:
        raise TypeCheckStop("Could not expand T.cid") from None


async def _wanted_structure(t: dict[str, Any], ctx: TypeContext) -> Structure:
    value = await _schema_of(t, ctx, "an st_0 structure")
    try:
        return Structure.from_ipld(value)
    except CairnError:
        raise TypeCheckStop("T.cid is not an st_0 structure") from None


async def check_arrow_schema(t: dict[str, Any], d: Any, ctx: TypeContext) -> tuple[bool, str | None]:
    """``arrow-schema``: D (a dataset version, or an st_0 structure) has exactly T.cid's columns: the same names
    and types (docs/hashing.md type strings), in the same order. The format (Parquet) is not compared."""
    return await _compare_structures(t, d, ctx, by_name=True)


async def check_arrow_schema_positional(t: dict[str, Any], d: Any, ctx: TypeContext) -> tuple[bool, str | None]:
    """``arrow-schema-positional``: the abstract structure (DESIGN.md "Datasets"): the same column types in the same
    order, whatever the names (T.cid may be an abstract ``col_N`` structure or a named one)."""
    return await _compare_structures(t, d, ctx, by_name=False)


async def _compare_structures(t: dict[str, Any], d: Any, ctx: TypeContext, by_name: bool) -> tuple[bool, str | None]:
    try:
        want = await _wanted_structure(t, ctx)
    except TypeCheckStop as e:
        return False, e.code
    got = await ctx.structure(d)
    if got is None:
        return False, NO_STRUCTURE
    if len(got.schema) != len(want.schema):
        return False, f"structure mismatch: D has {len(got.schema)} columns, T has {len(want.schema)}"
    for i, (g, w) in enumerate(zip(got.schema, want.schema, strict=True)):
        if g[1] != w[1] or (by_name and g[0] != w[0]):
            shown = (lambda c: f"{c[0]} {c[1]}") if by_name else (lambda c: c[1])
            return False, f"structure mismatch at column {i}: D has {shown(g)}, T has {shown(w)}"
    return True, None


def as_json(value: Any) -> Any:
    """An IPLD value as JSON, in the DAG-JSON forms of links (``{"/": "<cid>"}``) and bytes
    (``{"/": {"bytes": "<base64>"}}``); maps keep any ``"/"`` key (a schema may describe links that way)."""
    if isinstance(value, CID):
        return {"/": cid_str(value)}
    if isinstance(value, bytes):
        return {"/": {"bytes": base64.b64encode(value).decode().rstrip("=")}}
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value


async def check_json_schema(t: dict[str, Any], d: Any, ctx: TypeContext) -> tuple[bool, str | None]:
    """``json-schema``: T.cid is a JSON Schema document (stored as a DAG-CBOR block); D, read as JSON (its DAG-JSON
    form), must be valid under it. Remote ``$ref``s are refused: a check reads nothing but blocks."""
    import jsonschema_rs  # a compiled extension: loaded only by nodes that check JSON Schema types

    try:
        schema = as_json(await _schema_of(t, ctx, "a JSON Schema document"))
    except TypeCheckStop as e:
        return False, e.code
    try:
        validator = jsonschema_rs.validator_for(schema, retriever=_no_remote_refs)
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as e:
        return False, f"T.cid is not a valid JSON Schema: {_first_line(str(e))}"
    instance = as_json(d)
    for error in validator.iter_errors(instance):
        where = "".join(f"[{json.dumps(p)}]" for p in error.instance_path) or "the top level"
        return False, f"D does not match the JSON Schema at {where}: {_first_line(error.message)}"
    return True, None


def _no_remote_refs(uri: str) -> Any:
    raise ValueError(f"remote $ref {uri[:100]} refused")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else "invalid"


# The type checking table (§3.2: ``type_checking`` → f_check). The spec's table is to be maintained at
# spec.transform.storage and is not published: these values are Cairn's (docs/provenance.md "Types").
TYPE_CHECKING: dict[str, FCheck] = {
    "arrow-schema": check_arrow_schema,
    "arrow-schema-positional": check_arrow_schema_positional,
    "json-schema": check_json_schema,
}
