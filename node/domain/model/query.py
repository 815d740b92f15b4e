"""Cairn's query kinds (DESIGN.md "Deterministic queries"): qy_0 Query, iv_0 Invocation, rc_0 Receipt.

- ``qy_0`` {syntax, dialect, canonicalizer, statement, inputs: [abstract structure links]}: computable
  before anything runs; same question over same-shaped data → same CID.
- ``iv_0`` {query, inputs: [{structure, logicalHash, rows}]}: the cache key. An input's identity is the
  content of the data asked for, not who published it, so independent peers build the same key.
- ``rc_0`` a signed receipt: who computed which execution (``ex_0``) for which invocation, on which dataset
  versions, with which engine (``profile``: link to the ``ep_0``, node/domain/model/engine.py), giving which logical
  hash and row count, in how long.
- A recorded failure (docs/queries.md "Recorded failures"): an ``ex_0`` whose exitStatus is
  true (Holium: ``false`` = success) and has no output, a receipt with ``failure`` (Spark's error class, its
  SQLSTATE, its one-line message), an empty logical hash, 0 rows and the structure of no columns, and an
  announcement with ``failure`` (the class). Receipts and announcements of results have no ``failure`` key and
  keep their bytes and CIDs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from multiformats import CID

from node.domain.model._shape import Ctx, want_int, want_link, want_list, want_map, want_str
from node.domain.model.kinds import Kind, register_kind
from node.domain.model.signed import Signed


@register_kind
@dataclass(frozen=True)
class Query(Kind):
    typed_version: ClassVar[str] = "qy_0"
    memo_blocks: ClassVar[bool] = True  # str and CID fields only: node.domain.model.codec.block_of remembers its block
    syntax: str
    dialect: str
    canonicalizer: str
    statement: str
    inputs: tuple[CID, ...]  # abstract structures, in the statement's input order (a, b, …)

    def _content(self) -> Any:
        return {
            "syntax": self.syntax,
            "dialect": self.dialect,
            "canonicalizer": self.canonicalizer,
            "statement": self.statement,
            "inputs": list(self.inputs),
        }

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        m = want_map(content, ctx, required=("syntax", "dialect", "canonicalizer", "statement", "inputs"))
        return {
            **{k: want_str(m[k], ctx.at(k)) for k in ("syntax", "dialect", "canonicalizer", "statement")},
            "inputs": tuple(
                want_link(v, ctx.at("inputs").at(i)) for i, v in enumerate(want_list(m["inputs"], ctx.at("inputs")))
            ),
        }


@dataclass(frozen=True)
class InputIdentity:
    structure: CID  # abstract structure
    logical_hash: str
    rows: int

    def to_ipld(self) -> dict[str, Any]:
        return {"structure": self.structure, "logicalHash": self.logical_hash, "rows": self.rows}


@register_kind
@dataclass(frozen=True)
class Invocation(Kind):
    typed_version: ClassVar[str] = "iv_0"
    memo_blocks: ClassVar[bool] = True  # str, int and CID fields only (InputIdentity too): block_of remembers it
    query: CID
    inputs: tuple[InputIdentity, ...]

    def _content(self) -> Any:
        return {"query": self.query, "inputs": [i.to_ipld() for i in self.inputs]}

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        m = want_map(content, ctx, required=("query", "inputs"))
        ins = []
        for i, v in enumerate(want_list(m["inputs"], ctx.at("inputs"))):
            c = ctx.at("inputs").at(i)
            im = want_map(v, c, required=("structure", "logicalHash", "rows"))
            ins.append(
                InputIdentity(
                    want_link(im["structure"], c.at("structure")),
                    want_str(im["logicalHash"], c.at("logicalHash")),
                    want_int(im["rows"], c.at("rows"), 0),
                )
            )
        return {"query": want_link(m["query"], ctx.at("query")), "inputs": tuple(ins)}


@dataclass(frozen=True)
class Failure:
    """Why an execution failed, in a receipt: Spark's error class (condition), SQLSTATE and message."""

    error_class: str
    sqlstate: str
    message: str

    def to_ipld(self) -> dict[str, Any]:
        return {"class": self.error_class, "sqlstate": self.sqlstate, "message": self.message}

    @classmethod
    def parse(cls, v: Any, ctx: Ctx) -> Failure:
        m = want_map(v, ctx, required=("class", "sqlstate", "message"))
        return cls(*(want_str(m[k], ctx.at(k)) for k in ("class", "sqlstate", "message")))


def _derived(value: Any, ctx: Ctx) -> dict[str, Any]:
    """A receipt's optional ``derived: {execution, rule}`` as Receipt fields."""
    if value is None:
        return {}
    m = want_map(value, ctx, required=("execution", "rule"))
    return {
        "derived_from": want_link(m["execution"], ctx.at("execution")),
        "rewrite": want_str(m["rule"], ctx.at("rule")),
    }


@register_kind
@dataclass(frozen=True)
class Receipt(Signed, Kind):
    typed_version: ClassVar[str] = "rc_0"
    execution: CID
    invocation: CID
    signer: str  # did:key of the node that computed it
    time: str
    engine: dict[str, str]
    logical_hash: str
    rows: int
    structure: CID  # of the result (names as the engine gave them)
    versions: tuple[CID, ...]  # dataset versions (mb_0 block CIDs) actually read, in input order
    timings: dict[str, float]
    sig: bytes = b""
    # ep_0 of the engine that computed it (DESIGN.md "Engine profile"); None only in receipts written
    # before profiles existed, which keep their CIDs (the key is then absent).
    profile: CID | None = None
    # A verification receipt (docs/provenance.md "Verify (recompute)"): the rc_0 of another
    # signer this node recomputed and agreed with. Absent in every other receipt, which keep their CIDs.
    verifies: CID | None = None
    # A recorded deterministic failure (docs/queries.md "Recorded failures"): absent in receipts of results, which
    # keep their CIDs.
    failure: Failure | None = None
    # An answer from a superset (docs/queries.md "Answers from supersets"): the ex_0 whose result
    # the statement was computed from, and the node.domain.sql.rewrite rule that proved it. Absent otherwise.
    derived_from: CID | None = None
    rewrite: str | None = None

    def _unsigned(self) -> dict[str, Any]:
        out = {
            "execution": self.execution,
            "invocation": self.invocation,
            "signer": self.signer,
            "time": self.time,
            "engine": dict(self.engine),
            "logicalHash": self.logical_hash,
            "rows": self.rows,
            "structure": self.structure,
            "versions": list(self.versions),
            "timings": dict(self.timings),
        }
        if self.profile is not None:
            out["profile"] = self.profile
        if self.verifies is not None:
            out["verifies"] = self.verifies
        if self.failure is not None:
            out["failure"] = self.failure.to_ipld()
        if self.derived_from is not None:
            out["derived"] = {"execution": self.derived_from, "rule": self.rewrite or ""}
        return out

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        keys = (
            "execution",
            "invocation",
            "signer",
            "time",
            "engine",
            "logicalHash",
            "rows",
            "structure",
            "versions",
            "timings",
            "sig",
        )
        m = want_map(content, ctx, required=keys, optional=("profile", "verifies", "failure", "derived"))
        if not isinstance(m["sig"], bytes):
            raise ctx.at("sig").wrong("bytes", m["sig"])
        engine = want_map(m["engine"], ctx.at("engine"), optional=None)
        for k, v in engine.items():
            want_str(v, ctx.at("engine").at(k))
        profile, verifies = m.get("profile"), m.get("verifies")
        timings = want_map(m["timings"], ctx.at("timings"), optional=None)
        for k, v in timings.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ctx.at("timings").at(k).wrong("number", v)
        return {
            "execution": want_link(m["execution"], ctx.at("execution")),
            "invocation": want_link(m["invocation"], ctx.at("invocation")),
            "signer": want_str(m["signer"], ctx.at("signer")),
            "time": want_str(m["time"], ctx.at("time")),
            "engine": dict(engine),
            "logical_hash": want_str(m["logicalHash"], ctx.at("logicalHash")),
            "rows": want_int(m["rows"], ctx.at("rows"), 0),
            "structure": want_link(m["structure"], ctx.at("structure")),
            "versions": tuple(
                want_link(v, ctx.at("versions").at(i))
                for i, v in enumerate(want_list(m["versions"], ctx.at("versions")))
            ),
            "timings": {k: float(v) for k, v in timings.items()},
            "sig": m["sig"],
            "profile": None if profile is None else want_link(profile, ctx.at("profile")),
            "verifies": None if verifies is None else want_link(verifies, ctx.at("verifies")),
            "failure": None if "failure" not in m else Failure.parse(m["failure"], ctx.at("failure")),
            **_derived(m.get("derived"), ctx.at("derived")),
        }

    def _who(self) -> str:
        return f"{self.typed_version} by {self.signer}"


def _shape_digest(value: Any, ctx: Ctx) -> str:
    """An announcement's ``shape``: 64 lowercase hex digits (a SHA-256 digest), nothing else."""
    v = want_str(value, ctx)
    if len(v) != 64 or v.strip("0123456789abcdef"):
        raise ctx.wrong("a SHA-256 hex digest", v)
    return v


@register_kind
@dataclass(frozen=True)
class Announcement(Signed, Kind):
    """an_0: a signed claim that ``signer`` computed ``execution`` for ``invocation`` (gossiped, looked up).

    It carries CIDs, never data (gossip drops messages over 1 MiB): where to fetch (``providers``, Kubo
    multiaddrs) and what the result must hash to (``logicalHash``, ``rows``) so a receiver can check the data
    it fetches against the claim before it uses any of it.
    """

    typed_version: ClassVar[str] = "an_0"
    invocation: CID
    execution: CID
    receipt: CID
    logical_hash: str
    rows: int
    engine: dict[str, str]
    providers: tuple[str, ...]
    signer: str
    time: str
    sig: bytes = b""
    failure: str | None = None  # a recorded failure's error class; absent for a result
    # The result's abstract query shape (node.services.resolve.supersets.public_shape: a SHA-256 hex digest of its
    # inputs'
    # content identities and types, selection and projection stripped), so that peers find it as a candidate
    # superset of their queries. Absent for failures and results no rule can use; signed if present.
    shape: str | None = None

    def _unsigned(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "invocation": self.invocation,
            "execution": self.execution,
            "receipt": self.receipt,
            "logicalHash": self.logical_hash,
            "rows": self.rows,
            "engine": dict(self.engine),
            "providers": list(self.providers),
            "signer": self.signer,
            "time": self.time,
        }
        if self.failure is not None:
            out["failure"] = self.failure
        if self.shape is not None:
            out["shape"] = self.shape
        return out

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        keys = (
            "invocation",
            "execution",
            "receipt",
            "logicalHash",
            "rows",
            "engine",
            "providers",
            "signer",
            "time",
            "sig",
        )
        m = want_map(content, ctx, required=keys, optional=("failure", "shape"))
        if not isinstance(m["sig"], bytes):
            raise ctx.at("sig").wrong("bytes", m["sig"])
        engine = want_map(m["engine"], ctx.at("engine"), optional=None)
        for k, v in engine.items():
            want_str(v, ctx.at("engine").at(k))
        return {
            "failure": None if "failure" not in m else want_str(m["failure"], ctx.at("failure")),
            "shape": None if "shape" not in m else _shape_digest(m["shape"], ctx.at("shape")),
            "invocation": want_link(m["invocation"], ctx.at("invocation")),
            "execution": want_link(m["execution"], ctx.at("execution")),
            "receipt": want_link(m["receipt"], ctx.at("receipt")),
            "logical_hash": want_str(m["logicalHash"], ctx.at("logicalHash")),
            "rows": want_int(m["rows"], ctx.at("rows"), 0),
            "engine": dict(engine),
            "providers": tuple(
                want_str(p, ctx.at("providers").at(i))
                for i, p in enumerate(want_list(m["providers"], ctx.at("providers")))
            ),
            "signer": want_str(m["signer"], ctx.at("signer")),
            "time": want_str(m["time"], ctx.at("time")),
            "sig": m["sig"],
        }

    def _who(self) -> str:
        return f"{self.typed_version} by {self.signer}"
