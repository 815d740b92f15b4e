// The lineage of a result or a dataset (GET /api/v0/lineage/{cid}) drawn as an SVG graph by hand: nodes in
// layers by their distance from where the walk started (as node/services/provenance/render.py lays out its SVG).

import { getJson, q } from "./api.js";
import { errorBox, h, replace, svg } from "./dom.js";

const W = 260;
const H = 54;
const GX = 24;
const GY = 44;
const FILL = { missing: "#fdd", unreadable: "#fdd", cut: "#fed", receipt: "#efe", execution: "#eef", dataset: "#ffe" };

// Node ids by breadth-first distance from the first node; those it does not reach come last.
export function layers(graph) {
  const next = new Map(graph.nodes.map((n) => [n.id, []]));
  for (const e of graph.edges) (next.get(e.from) || next.set(e.from, []).get(e.from)).push(e.to);
  const start = graph.nodes.length ? graph.nodes[0].id : graph.start;
  const depth = new Map([[start, 0]]);
  const todo = [start];
  while (todo.length) {
    const here = todo.shift();
    for (const to of next.get(here) || []) {
      if (!depth.has(to)) {
        depth.set(to, depth.get(here) + 1);
        todo.push(to);
      }
    }
  }
  const last = Math.max(-1, ...depth.values()) + 1;
  const rows = Array.from({ length: last + 1 }, () => []);
  for (const n of graph.nodes) rows[depth.has(n.id) ? depth.get(n.id) : last].push(n.id);
  return rows.filter((r) => r.length);
}

const fit = (text, n = 38) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

function box(n, x, y) {
  const link = n.cid && (n.kind === "execution" || n.kind === "receipt") ? `#/execution/${encodeURIComponent(n.cid)}` : null;
  const checks = Object.entries(n.checks || {}).map(([k, v]) => `${k}: ${v}`).join(", ");
  const g = svg(
    "g",
    { class: "lineage-node", "data-kind": n.kind },
    svg("title", {}, [n.kind, n.label, n.cid || "", n.signer || "", checks].filter(Boolean).join("\n")),
    svg("rect", { x, y, width: W, height: H, rx: 6, fill: FILL[n.kind] || "#eef", stroke: "#333" }),
    svg("text", { x: x + 8, y: y + 16, "font-weight": "bold" }, fit(n.kind)),
    svg("text", { x: x + 8, y: y + 31 }, fit(String(n.label))),
    svg("text", { x: x + 8, y: y + 46 }, fit(String(n.signer || n.cid || ""))),
  );
  return link ? svg("a", { href: link }, g) : g;
}

export function drawLineage(graph) {
  const rows = layers(graph);
  const at = new Map();
  rows.forEach((row, r) => row.forEach((id, c) => at.set(id, [GX + c * (W + GX), GY / 2 + r * (H + GY)])));
  const width = Math.max(1, ...rows.map((r) => r.length)) * (W + GX) + GX;
  const height = rows.length * (H + GY);
  const arrow = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" }, svg("path", { d: "M0,0 L10,5 L0,10 z" }));
  const lines = graph.edges
    .filter((e) => at.has(e.from) && at.has(e.to))
    .map((e) => {
      const [x1, y1] = at.get(e.from);
      const [x2, y2] = at.get(e.to);
      return svg("line", { x1: x1 + W / 2, y1: y1 + H, x2: x2 + W / 2, y2, stroke: "#555", "marker-end": "url(#arrow)" }, svg("title", {}, e.label));
    });
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  const boxes = [...at].map(([id, [x, y]]) => box(byId.get(id), x, y));
  return svg("svg", { class: "lineage", width, height, viewBox: `0 0 ${width} ${height}`, "font-size": 11, "font-family": "monospace" }, svg("defs", {}, arrow), lines, boxes);
}

export async function lineageView(el, cid) {
  replace(el, h("p.muted", {}, "walking the lineage…"));
  try {
    const graph = await getJson(`/api/v0/lineage/${q(cid)}`);
    const note = graph.complete ? "complete: every block was read and re-hashed" : `incomplete${graph.cut ? `: ${graph.cut}` : ""}`;
    replace(el, h("p.muted", {}, `${graph.nodes.length} node${graph.nodes.length === 1 ? "" : "s"}, ${note}`), h("div.graph", {}, drawLineage(graph)));
  } catch (err) {
    replace(el, errorBox(err));
  }
}
