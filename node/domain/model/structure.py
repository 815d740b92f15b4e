"""st_0 Structure: a dataset's format and schema (Qri "structure", DESIGN.md "Datasets").

``{"typedVersion": "st_0", "content": {"format": "parquet", "schema": [[name, type], …]}}``.
Types are the canonical type strings of the logical hash (docs/hashing.md), so encodings of one
logical type (string/large_string, dictionary/plain) give one structure. The **abstract** structure
renames every column ``col_<i>``: two datasets of the same shape collide on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from node.domain.model._shape import Ctx, want_list, want_map, want_str
from node.domain.model.kinds import Kind, register_kind

_ABSTRACT_NAME = re.compile(r"col_(0|[1-9][0-9]*)\Z")


@register_kind
@dataclass(frozen=True)
class Structure(Kind):
    typed_version: ClassVar[str] = "st_0"
    memo_blocks: ClassVar[bool] = True  # str fields only: node.domain.model.codec.block_of remembers its block
    format: str
    schema: tuple[tuple[str, str], ...]

    def _content(self) -> Any:
        return {"format": self.format, "schema": [[n, t] for n, t in self.schema]}

    @classmethod
    def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
        m = want_map(content, ctx, required=("format", "schema"))
        fmt = want_str(m["format"], ctx.at("format"))
        cols = want_list(m["schema"], ctx.at("schema"))
        schema: list[tuple[str, str]] = []
        seen: set[str] = set()
        for i, col in enumerate(cols):
            c = want_list(col, ctx.at("schema").at(i), 2)
            name = want_str(c[0], ctx.at("schema").at(i).at(0, "name"))
            typ = want_str(c[1], ctx.at("schema").at(i).at(1, "type"))
            if not name or name in seen:
                raise ctx.at("schema").at(i).fail(f"column names must be unique and non-empty, got {name!r}")
            seen.add(name)
            schema.append((name, typ))
        return {"format": fmt, "schema": tuple(schema)}

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.schema]

    def abstract(self) -> Structure:
        return Structure(self.format, tuple((f"col_{i}", t) for i, (_, t) in enumerate(self.schema)))
