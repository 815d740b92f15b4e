// Calls to the node's API (docs/api.md), with its token asked once: kept in sessionStorage for the tab's life,
// sent as "Authorization: Bearer …" (node/faces/api/access.py). Without a token the read-only views still work.

const KEY = "cairn.api-token";
let asking = null; // the dialog's answer while it is open: one dialog for every action that waits on it

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export function token() {
  return sessionStorage.getItem(KEY) || "";
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
  document.dispatchEvent(new Event("cairn-token"));
}

// Opens the token dialog (once, however many actions wait); resolves with the token, or "" if cancelled.
export function askToken(why = "") {
  if (asking) return asking;
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  document.getElementById("token-why").textContent = why;
  input.value = "";
  asking = new Promise((resolve) => {
    const done = (value) => {
      dialog.close();
      save.removeEventListener("click", onSave);
      cancel.removeEventListener("click", onCancel);
      asking = null;
      if (value) sessionStorage.setItem(KEY, value);
      document.dispatchEvent(new Event("cairn-token"));
      resolve(value);
    };
    const save = document.getElementById("token-save");
    const cancel = document.getElementById("token-cancel");
    const onSave = () => done(input.value.trim());
    const onCancel = () => done("");
    save.addEventListener("click", onSave);
    cancel.addEventListener("click", onCancel);
    dialog.showModal();
    input.focus();
  });
  return asking;
}

function send(method, path, body, headers) {
  const all = { ...headers };
  if (token()) all.Authorization = `Bearer ${token()}`;
  return fetch(path, { method, body, headers: all });
}

async function failure(resp) {
  let type = "Error";
  let message = `${resp.status} ${resp.statusText}`;
  try {
    const err = (await resp.json()).error;
    type = err.type;
    message = err.message;
  } catch {
    // not the API's JSON error: the status line says it
  }
  return new ApiError(resp.status, type, message);
}

// One API call; answers the response (ok) or throws ApiError. `write`: the route needs the token (asked first);
// any 401 asks for it again once (a wrong or missing token), then retries.
export async function request(method, path, { json, body, headers = {}, write = false } = {}) {
  if (json !== undefined) {
    body = JSON.stringify(json);
    headers = { ...headers, "Content-Type": "application/json" };
  }
  if (write && !token() && !(await askToken("This action needs the node's API token."))) {
    throw new ApiError(401, "Unauthorized", "this action needs the node's API token");
  }
  let resp = await send(method, path, body, headers);
  if (resp.status === 401 && (await askToken(token() ? "The node refused this token." : "This needs the token."))) {
    resp = await send(method, path, body, headers);
  }
  if (!resp.ok) throw await failure(resp);
  return resp;
}

export async function getJson(path) {
  return (await request("GET", path)).json();
}

export async function postJson(path, json, write = true) {
  return (await request("POST", path, { json, write })).json();
}

export function q(value) {
  return encodeURIComponent(value);
}
