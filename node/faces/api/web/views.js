// The datasets (list, upload, one dataset's chain of blocks) and the network (peers, trust, announcements).

import { getJson, q, request } from "./api.js";
import { cidLink, cidText, errorBox, h, replace, table, when } from "./dom.js";
import { lineageView } from "./lineage.js";

function eventKind(event) {
  if (!event || typeof event !== "object") return String(event);
  return event.kind || event.type || Object.keys(event)[0] || "";
}

async function upload(form, out) {
  const file = form.file.files[0];
  const name = form.name.value.trim() || (file ? file.name.replace(/\..*$/, "") : "");
  if (!file) return replace(out, errorBox("choose a file to ingest"));
  replace(out, h("p.muted", {}, `ingesting ${file.name}…`));
  try {
    const path = `/api/v0/datasets?name=${q(name)}&filename=${q(file.name)}`;
    const added = await (await request("POST", path, { body: file, write: true })).json();
    replace(out, h("p.ok", { id: "ingested" }, `${added.name}: ${added.rows_added} rows added, head `, cidText(added.head)));
    await renderList(document.getElementById("datasets"));
  } catch (err) {
    replace(out, errorBox(err));
  }
}

async function renderList(el) {
  const { datasets } = await getJson("/api/v0/datasets");
  const row = (d) =>
    h(
      "tr",
      { dataset: { name: d.name } },
      h("td", {}, h("a", { href: `#/dataset/${encodeURIComponent(d.name)}` }, d.name)),
      h("td.num", {}, d.rows),
      h("td.num", {}, d.slices),
      h("td", {}, cidText(d.head)),
      h("td", {}, d.owned ? "ours" : "pulled"),
      h("td", {}, when(d.updated)),
      h("td", {}, h("a", { href: `#/query?dataset=${encodeURIComponent(d.name)}` }, "query")),
    );
  const head = ["name", "rows", "slices", "head", "", "updated", ""];
  replace(
    el,
    datasets.length
      ? h("table", {}, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), h("tbody", {}, datasets.map(row)))
      : h("p.muted", {}, "No dataset yet: add one below."),
  );
}

export async function datasetsView(main) {
  const list = h("div", { id: "datasets" });
  const file = h("input", { type: "file", id: "file", accept: ".csv,.tsv,.json,.jsonl,.ndjson,.parquet,.gz,.zst" });
  const name = h("input", { type: "text", id: "dataset-name", placeholder: "name (default: the file's)" });
  const out = h("div", { id: "upload-result" });
  replace(
    main,
    h("h2", {}, "Datasets"),
    list,
    h("h3", {}, "Add a dataset"),
    h("div.row", {}, file, name, h("button", { id: "upload", onclick: () => upload({ file, name }, out) }, "Ingest")),
    out,
  );
  await renderList(list);
}

export async function datasetView(main, ref) {
  const [d, log] = await Promise.all([getJson(`/api/v0/datasets/${q(ref)}`), getJson(`/api/v0/datasets/${q(ref)}/log`)]);
  const blocks = log.blocks.map((b) => [b.seq, b.cid, eventKind(b.event), b.time == null ? "" : String(b.time)]);
  const lineage = h("div");
  replace(
    main,
    h("h2", {}, `Dataset ${d.name || d.id}`),
    h("p", {}, `${d.rows} rows · id `, h("code", {}, d.id), " · head ", cidText(d.head), " · ", h("a", { href: `#/query?dataset=${encodeURIComponent(ref)}` }, "query it")),
    h("h3", {}, "Schema"),
    table(["column", "type"], d.schema),
    h("h3", {}, "Chain (newest first)"),
    table(["seq", "block", "event", "time"], blocks, { id: "chain" }), // as the log gives them
    h("h3", {}, "Lineage"),
    lineage,
  );
  await lineageView(lineage, d.head);
}

function claimRow(c) {
  return h(
    "tr",
    { dataset: { status: c.status } },
    h("td", {}, h("span.badge", { dataset: { source: c.status } }, c.status)),
    h("td", {}, c.reason || ""),
    h("td", {}, cidLink(c.execution, "execution")),
    h("td", {}, h("code", { title: c.signer }, c.signer.slice(0, 24) + "…")),
    h("td", {}, c.peer || ""),
    h("td.num", {}, c.rows),
    h("td", {}, `${c.signer_score.accepted} accepted / ${c.signer_score.refused} refused`),
    h("td", {}, when(c.received)),
  );
}

export async function peersView(main) {
  // a node with peers off answers /api/v0/peers with 409: the page says so instead of asking
  const health = await (await fetch("/healthz")).json();
  const off = health.p2p && health.p2p.state === "disabled";
  const peers = off ? new Error("Peers are off on this node (peers.enabled = false).") : await getJson("/api/v0/peers").catch((e) => e);
  const [trust, ann] = await Promise.all([getJson("/api/v0/trust"), getJson("/api/v0/announcements")]);
  const peerRows = peers instanceof Error ? [] : peers.peers.map((p) => [p.peer_id, p.connected ? "connected" : "seen", p.source, p.addrs.join(" "), when(p.last_seen)]);
  const claimHead = ["status", "why", "execution", "signer", "peer", "rows", "signer's record", "received"];
  replace(
    main,
    h("h2", {}, "Peers"),
    peers instanceof Error ? errorBox(peers) : table(["peer", "state", "found by", "addresses", "last seen"], peerRows),
    h("h2", {}, "Trusted signers"),
    table(["key", "community"], trust.trusted.map((t) => [t.key, t.community])),
    h("h2", { id: "announcements" }, "Announcements received"),
    ann.claims.length
      ? h("table", { id: "claims" }, h("thead", {}, h("tr", {}, claimHead.map((c) => h("th", {}, c)))), h("tbody", {}, ann.claims.map(claimRow)))
      : h("p.muted", {}, "No announcement received yet."),
    h("h3", {}, "Refused messages"),
    table(["peer", "why", "received"], ann.refused_messages.map((m) => [m.peer || "", m.reason, when(m.received)])),
  );
}
