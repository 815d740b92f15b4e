// The page's router: views by the address's hash (#/, #/dataset/NAME, #/query, #/peers, #/execution/CID), so
// every view has an address to share and the node needs no route per view.

import { askToken, forgetToken, getJson, token } from "./api.js";
import { errorBox, h, replace } from "./dom.js";
import { executionView } from "./execution.js";
import { queryView } from "./query.js";
import { datasetView, datasetsView, peersView } from "./views.js";

const ROUTES = [
  [/^#?\/?$/, (main) => datasetsView(main)],
  [/^#\/dataset\/(.+)$/, (main, m) => datasetView(main, decodeURIComponent(m[1]))],
  [/^#\/query$/, (main, m, params) => queryView(main, params)],
  [/^#\/peers$/, (main) => peersView(main)],
  [/^#\/execution\/(.+)$/, (main, m) => executionView(main, decodeURIComponent(m[1]))],
];

async function route() {
  const main = document.getElementById("main");
  const [path, query = ""] = location.hash.split("?");
  const params = new URLSearchParams(query);
  for (const [pattern, view] of ROUTES) {
    const m = path.match(pattern);
    if (!m) continue;
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("here", a.getAttribute("href") === (path || "#/"));
    try {
      await view(main, m, params);
    } catch (err) {
      replace(main, errorBox(err));
    }
    return;
  }
  replace(main, errorBox(`no view for ${location.hash}`));
}

function showToken() {
  const button = document.getElementById("token-button");
  button.textContent = token() ? "Forget the token" : "Enter the token";
}

async function nodeInfo() {
  try {
    const info = await getJson("/api/v0/node");
    document.getElementById("node-info").textContent = `v${info.version} · peer ${info.peer_id.slice(0, 12)}…`;
  } catch (err) {
    document.getElementById("node-info").textContent = err.message;
  }
}

document.getElementById("token-button").addEventListener("click", () => (token() ? forgetToken() : askToken()));
document.addEventListener("cairn-token", showToken);
window.addEventListener("hashchange", route);
showToken();
nodeInfo();
route();
