"""``ep_0`` Engine profile (DESIGN.md "Engine profile"): everything about the engine that can change an answer.

Content: ``{"engine": "spark", "versions": {name: version}, "jvm": {property: value},
"settings": {key: effective value}}``, all strings. The worker reports it (``spark_worker.session.engine_profile``),
the node writes it once as a block and every ``rc_0`` it signs links it (``profile``). Two peers running the same
engine build the same ``ep_0`` CID; it names no host, path or process, only what decides results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from node.domain.model._shape import Ctx, want_map, want_str
from node.domain.model.kinds import Kind, register_kind

_PARTS = ("versions", "jvm", "settings")


def _str_map(v: Any, ctx: Ctx) -> dict[str, str]:
    m = want_map(v, ctx, optional=None)
    return {want_str(k, ctx): want_str(x, ctx.at(k)) for k, x in m.items()}


@register_kind
@dataclass(frozen=True)
class EngineProfile(Kind):
    typed_version: ClassVar[str] = "ep_0"
    engine: str
    versions: dict[str, str]
    jvm: dict[str, str]
    settings: dict[str, str]

    def _content(self) -> Any:
        return {
            "engine": self.engine,
            "versions": dict(self.versions),
            "jvm": dict(self.jvm),
            "settings": dict(self.settings),
        }

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        m = want_map(content, ctx, required=("engine", *_PARTS))
        return {
            "engine": want_str(m["engine"], ctx.at("engine")),
            **{part: _str_map(m[part], ctx.at(part)) for part in _PARTS},
        }

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> EngineProfile:
        """The profile a worker reported (its ping answer's ``profile``); InvalidObject if malformed."""
        return cls.from_ipld({"typedVersion": cls.typed_version, "content": dict(report)})
