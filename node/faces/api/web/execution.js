// A shareable page per execution (#/execution/CID) that explains and checks it, as Kamu's query explainer does:
// the query, its input versions, the signer, the offline checks (signature, hashes, logical hashes), sample rows,
// the lineage, and a button that verifies it by recomputing it here.

import { getJson, postJson, q, request, token } from "./api.js";
import { cidText, errorBox, h, replace, table } from "./dom.js";
import { lineageView } from "./lineage.js";
import { follow } from "./query.js";

const SAMPLE = 20;
const BADGE = { computed: "computed", local: "hit", peer: "peer" };

// The first SAMPLE rows of the result (JSON lines), reading no more of the stream than that.
async function sampleRows(cid) {
  const resp = await request("GET", `/api/v0/executions/${q(cid)}/data?format=jsonl`);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (value) text += value;
    if (done || text.split("\n").length > SAMPLE) break;
  }
  await reader.cancel();
  return text.split("\n").filter(Boolean).slice(0, SAMPLE).map((line) => JSON.parse(line));
}

function facts(ex, statement) {
  const rows = [
    ["query (canonical SQL)", h("pre.sql", {}, statement)],
    ["execution", cidText(ex.execution)],
    ["invocation", cidText(ex.invocation)],
    ["receipt", cidText(ex.receipt)],
    ["signer", h("code", {}, ex.signer)],
    ["signed at", ex.time],
    ["answered here as", h("span.badge", { dataset: { source: BADGE[ex.source] || ex.source } }, BADGE[ex.source] || ex.source)],
    ["trust", ex.trust],
    ["rows", String(ex.rows)],
    ["logical hash", h("code", {}, ex.logicalHash)],
    ["input versions", h("ul", {}, ex.versions.map((v) => h("li", {}, cidText(v))))],
    ["engine", Object.entries(ex.engine).map(([k, v]) => `${k} ${v}`).join(", ")],
    ["timings", Object.entries(ex.timings).map(([k, v]) => `${k} ${Math.round(v)} ms`).join(", ")],
  ];
  return h("table.facts", {}, h("tbody", {}, rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))));
}

function checksTable(report) {
  const s = report.summary;
  const rows = report.executions.flatMap((e) => e.checks.map((c) => [c.status, c.check, c.subject, c.detail]));
  return h(
    "div",
    { id: "checks" },
    h("p", {}, h("span.badge", { dataset: { source: report.ok ? "ok" : "failed" } }, report.ok ? "checks pass" : "checks fail"), ` ${s.ok} ok, ${s.failed} failed, ${s.unchecked} could not be checked`),
    table(["status", "check", "subject", "detail"], rows, { class: "checks" }),
  );
}

async function offlineChecks(el, receipt) {
  replace(el, h("p.muted", {}, "checking (offline: nothing computed, nothing fetched)…"));
  try {
    replace(el, checksTable(await postJson("/api/v0/verify", { cid: receipt, offline: true })));
  } catch (err) {
    replace(el, errorBox(err), h("button", { onclick: () => offlineChecks(el, receipt) }, "Check again"));
  }
}

async function recompute(el, receipt) {
  replace(el, h("p.muted", {}, "recomputing on this node's Spark worker…"));
  try {
    const report = await follow(await postJson("/api/v0/verify", { cid: receipt }), "verify");
    const s = report.summary;
    const rows = report.executions.map((e) => [e.status, e.receipt, e.reason || "", e.same_execution === undefined ? "" : String(e.same_execution)]);
    replace(el, h("p", { id: "verified" }, `${s.reproduced} reproduced, ${s.diverged} diverged, ${s["could not run"]} could not run`), table(["status", "receipt", "why", "same execution"], rows));
  } catch (err) {
    replace(el, errorBox(err));
  }
}

async function samples(el, cid) {
  try {
    const rows = await sampleRows(cid);
    const columns = rows.length ? Object.keys(rows[0]) : [];
    replace(el, table(columns, rows.map((r) => columns.map((c) => r[c])), { class: "result" }));
  } catch (err) {
    replace(el, errorBox(err));
  }
}

// The qy_0 block as DAG-JSON is {typedVersion, content: {statement, …}} (docs/object-model.md).
function statementOf(query) {
  const statement = (query.content || query).statement;
  return typeof statement === "string" ? statement : JSON.stringify(statement ?? "(the query block is not held here)");
}

export async function executionView(main, cid) {
  const ex = await getJson(`/api/v0/executions/${q(cid)}`);
  const query = await getJson(`/api/v0/dag/${q(ex.query)}`).catch(() => ({}));
  const checks = h("div", {}, h("button", { id: "check", onclick: () => offlineChecks(checks, ex.receipt) }, "Run the offline checks (token)"));
  const verify = h("div", {}, h("button", { id: "verify", onclick: () => recompute(verify, ex.receipt) }, "Verify by recomputing here (token)"));
  const rows = h("div", {}, h("p.muted", {}, "reading…"));
  const lineage = h("div");
  replace(
    main,
    h("h2", { id: "execution-title" }, "Execution ", h("code", {}, ex.execution)),
    h("p.muted", {}, "This page's address can be shared: it shows the same execution on any node that holds it."),
    facts(ex, statementOf(query)),
    h("h3", {}, "Checks"),
    checks,
    h("h3", {}, "Sample rows"),
    rows,
    h("h3", {}, "Verify"),
    verify,
    h("h3", {}, "Lineage"),
    lineage,
  );
  if (token()) offlineChecks(checks, ex.receipt);
  await Promise.all([samples(rows, ex.execution), lineageView(lineage, ex.execution)]);
}
