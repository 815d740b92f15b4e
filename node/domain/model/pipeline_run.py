"""pr_0 PipelineRun: one signed run of a pipeline (docs/object-model.md "pr_0"; docs/provenance.md "Pipelines").

``{"typedVersion": "pr_0", "content": {"name", "pipeline", "previous", "status", "steps", "signer", "time", "sig"}}``

- ``pipeline``: the ``pl_0`` as run (Holium schema v0 "Pipelines": vertices holding each root dataset version and
  each step's ``qy_0``, edges holding ``cx_0`` connections with selectors).
- ``previous``: the last run of the pipeline of the same ``name`` on this node, or null: the latest run's CID
  names the whole history.
- ``steps``: one map per step in the order they ran, every key present (null where not known): ``name``, ``vertex``
  (its index in the ``pl_0``), ``source`` (local | peer | computed | failed | skipped), ``invocation`` (``iv_0``),
  ``execution`` (``ex_0``), ``receipt`` (``rc_0``), ``version`` (the ``mb_0`` head of the derivative dataset
  holding its result, which later steps read), ``error`` (why it failed or was skipped).
- ``status``: ``ok``, or ``failed`` when a step failed (its dependants are ``skipped``).
- ``sig``: ed25519 by the node key (``signer``, a did:key) over the envelope without ``sig``
(node/domain/model/signed.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from multiformats import CID

from node.domain.model._shape import Ctx, want_int, want_link, want_list, want_map, want_str
from node.domain.model.kinds import Kind, register_kind
from node.domain.model.signed import Signed

STEP_SOURCES = ("local", "peer", "computed", "failed", "skipped")
RUN_STATUSES = ("ok", "failed")
_STEP_KEYS = ("name", "vertex", "source", "invocation", "execution", "receipt", "version", "error")


@dataclass(frozen=True)
class RunStep:
    name: str
    vertex: int
    source: str
    invocation: CID | None = None
    execution: CID | None = None
    receipt: CID | None = None
    version: CID | None = None
    error: str | None = None

    def to_ipld(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _STEP_KEYS}


def _opt_link(v: Any, ctx: Ctx) -> CID | None:
    return None if v is None else want_link(v, ctx)


def _step(v: Any, ctx: Ctx) -> RunStep:
    m = want_map(v, ctx, required=_STEP_KEYS)
    source = want_str(m["source"], ctx.at("source"))
    if source not in STEP_SOURCES:
        raise ctx.at("source").fail(f"expected one of {', '.join(STEP_SOURCES)}")
    links = {k: _opt_link(m[k], ctx.at(k)) for k in ("invocation", "execution", "receipt", "version")}
    return RunStep(
        want_str(m["name"], ctx.at("name")),
        want_int(m["vertex"], ctx.at("vertex"), 0),
        source,
        links["invocation"],
        links["execution"],
        links["receipt"],
        links["version"],
        None if m["error"] is None else want_str(m["error"], ctx.at("error")),
    )


@register_kind
@dataclass(frozen=True)
class PipelineRun(Signed, Kind):
    typed_version: ClassVar[str] = "pr_0"
    name: str
    pipeline: CID  # -> pl_0
    previous: CID | None  # -> pr_0
    status: str
    steps: tuple[RunStep, ...]
    signer: str  # did:key of the node that ran it
    time: str
    sig: bytes = b""

    def _unsigned(self) -> dict[str, Any]:
        steps = [s.to_ipld() if isinstance(s, RunStep) else s for s in self.steps]
        return {
            "name": self.name,
            "pipeline": self.pipeline,
            "previous": self.previous,
            "status": self.status,
            "steps": steps,
            "signer": self.signer,
            "time": self.time,
        }

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        keys = ("name", "pipeline", "previous", "status", "steps", "signer", "time", "sig")
        m = want_map(content, ctx, required=keys)
        if not isinstance(m["sig"], bytes):
            raise ctx.at("sig").wrong("bytes", m["sig"])
        status = want_str(m["status"], ctx.at("status"))
        if status not in RUN_STATUSES:
            raise ctx.at("status").fail(f"expected one of {', '.join(RUN_STATUSES)}")
        sctx = ctx.at("steps")
        return {
            "name": want_str(m["name"], ctx.at("name")),
            "pipeline": want_link(m["pipeline"], ctx.at("pipeline")),
            "previous": _opt_link(m["previous"], ctx.at("previous")),
            "status": status,
            "steps": tuple(_step(s, sctx.at(i)) for i, s in enumerate(want_list(m["steps"], sctx))),
            "signer": want_str(m["signer"], ctx.at("signer")),
            "time": want_str(m["time"], ctx.at("time")),
            "sig": m["sig"],
        }

    def _who(self) -> str:
        return f"{self.typed_version} by {self.signer}"
