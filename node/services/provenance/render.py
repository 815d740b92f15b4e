"""A lineage answer (node.services.provenance.lineage) as Graphviz DOT, Mermaid, or SVG text: pure functions, no IO.

SVG is drawn here, not by Graphviz: a lineage is a small layered graph (start on top, one layer per step back),
which a few lines place well enough, and a node should not need a system package to answer ``Accept:
image/svg+xml`` (docs/provenance.md "Lineage").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape

FORMATS = ("json", "dot", "mermaid", "svg")


def node_text(n: Mapping[str, Any]) -> str:
    """One line for a node: what it is, who signed it, what was checked here."""
    parts = [f"{n['kind']}: {n['label']}"]
    if n.get("cid"):
        parts.append(n["cid"])
    if n.get("signer"):
        parts.append(f"signed by {n['signer']}")
    checks = n.get("checks") or {}
    if checks:
        parts.append("checked: " + ", ".join(f"{k} {v}" for k, v in checks.items()))
    if n.get("source") == "network":
        parts.append("fetched from the network")
    return " | ".join(parts)


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: Mapping[str, Any]) -> str:
    lines = ["digraph lineage {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    for n in graph["nodes"]:
        label = f"{n['kind']}\n{n['label']}" + (f"\nsigner {n['signer']}" if n.get("signer") else "")
        lines.append(f"  {_dot_str(n['id'])} [label={_dot_str(label)}];")
    for e in graph["edges"]:
        lines.append(f"  {_dot_str(e['from'])} -> {_dot_str(e['to'])} [label={_dot_str(e['label'])}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_str(text: str) -> str:
    return '"' + text.replace('"', "#quot;").replace("\n", " ") + '"'


def to_mermaid(graph: Mapping[str, Any]) -> str:
    ids = {n["id"]: f"n{i}" for i, n in enumerate(graph["nodes"])}
    lines = ["flowchart TD"]
    for n in graph["nodes"]:
        lines.append(f"  {ids[n['id']]}[{_mermaid_str(n['kind'] + ': ' + n['label'])}]")
    for e in graph["edges"]:
        lines.append(f"  {ids[e['from']]} -->|{_mermaid_str(e['label'])}| {ids[e['to']]}")
    return "\n".join(lines) + "\n"


def root(graph: Mapping[str, Any]) -> str:
    """Where a drawing starts: the walk's first node (an execution asked about is reached from its receipt,
    which the walk visits first), else the CID asked about."""
    return str(graph["nodes"][0]["id"]) if graph["nodes"] else str(graph["start"])


def layers(graph: Mapping[str, Any]) -> list[list[str]]:
    """Node ids by distance from the root (breadth first); nodes not reached from it come last."""
    out: dict[str, list[str]] = {n["id"]: [] for n in graph["nodes"]}
    for e in graph["edges"]:
        out.setdefault(e["from"], []).append(e["to"])
    depth: dict[str, int] = {}
    start = root(graph)
    todo = deque([start] if start in out else [])
    if todo:
        depth[start] = 0
    while todo:
        here = todo.popleft()
        for nxt in out.get(here, []):
            if nxt not in depth:
                depth[nxt] = depth[here] + 1
                todo.append(nxt)
    last = max(depth.values(), default=-1) + 1
    rows: list[list[str]] = [[] for _ in range(last + 1)]
    for n in graph["nodes"]:
        rows[depth.get(n["id"], last)].append(n["id"])
    return [r for r in rows if r]


BOX_W, BOX_H, GAP_X, GAP_Y = 300, 54, 30, 50


def to_svg(graph: Mapping[str, Any]) -> str:
    nodes = {n["id"]: n for n in graph["nodes"]}
    rows = layers(graph)
    width = max((len(r) for r in rows), default=1) * (BOX_W + GAP_X) + GAP_X
    height = len(rows) * (BOX_H + GAP_Y) + GAP_Y
    at: dict[str, tuple[int, int]] = {}
    for y, row in enumerate(rows):
        for x, key in enumerate(row):
            at[key] = (GAP_X + x * (BOX_W + GAP_X), GAP_Y + y * (BOX_H + GAP_Y))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="monospace" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>',
    ]
    for e in graph["edges"]:
        (x1, y1), (x2, y2) = at[e["from"]], at[e["to"]]
        a, b = (x1 + BOX_W // 2, y1 + BOX_H), (x2 + BOX_W // 2, y2)
        out.append(
            f'<line x1="{a[0]}" y1="{a[1]}" x2="{b[0]}" y2="{b[1]}" stroke="#555" marker-end="url(#arrow)">'
            f"<title>{escape(e['label'])}</title></line>"
        )
    for key, (x, y) in at.items():
        n = nodes[key]
        fill = {"missing": "#fdd", "cut": "#fed", "unreadable": "#fdd"}.get(n["kind"], "#eef")
        out.append(f"<g><title>{escape(node_text(n))}</title>")
        out.append(f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" stroke="#333"/>')
        for i, text in enumerate((n["kind"], n["label"], n.get("signer") or n.get("cid") or "")):
            out.append(f'<text x="{x + 8}" y="{y + 16 + 15 * i}">{escape(_fit(str(text)))}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _fit(text: str, width: int = 46) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
