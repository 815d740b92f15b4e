// Building the page's elements. Data is only ever set as text (textContent, attributes): never as HTML, so
// nothing a dataset, a peer or a query holds can run in the page (the CSP in node/faces/api/webui.py is the backstop).

// h("tag.class", {attr: value, onclick: fn}, child, …): children are elements or strings (text nodes).
export function h(spec, attrs = {}, ...children) {
  const [tag, ...classes] = spec.split(".");
  const el = document.createElement(tag || "div");
  if (classes.length) el.className = classes.join(" ");
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

// An SVG element (the lineage graph): the same rules, in the SVG namespace.
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  return append(el, children);
}

// A table of rows (arrays) under column names; cells as text, JSON for what is not a string.
export function table(columns, rows, attrs = {}) {
  const cell = (v) => (v === null ? h("td.null", {}, "null") : h("td", {}, typeof v === "string" ? v : JSON.stringify(v)));
  return h(
    "table",
    attrs,
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map(cell)))),
  );
}

export function shortCid(cid) {
  return cid && cid.length > 20 ? `${cid.slice(0, 10)}…${cid.slice(-6)}` : cid || "";
}

// A link to a CID's page in this app (execution) with the full CID as its title.
export function cidLink(cid, route) {
  return h("a.cid", { href: `#/${route}/${encodeURIComponent(cid)}`, title: cid }, shortCid(cid));
}

export function cidText(cid) {
  return h("code.cid", { title: cid || "" }, shortCid(cid));
}

export function when(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "";
}

export function errorBox(err) {
  return h("p.error", { role: "alert" }, err && err.message ? err.message : String(err));
}
