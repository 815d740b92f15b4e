// The query box, its answer (table, hit / peer / computed badge, timings) and the jobs this page started, each
// followed live over its server-sent events (GET /api/v0/jobs/{id}/events) with a cancel button.

import { ApiError, askToken, postJson, request } from "./api.js";
import { cidLink, errorBox, h, replace, table } from "./dom.js";

const BADGE = { computed: "computed", local: "hit", peer: "peer" }; // the answer's `source`, as the page says it
const jobs = new Map(); // id -> {id, what, state, stages: [[kind, ms, data]], t0}
const ROWS_SHOWN = 100;

// The events of a job as they come: (kind, data) for each "event:/data:" block of the text/event-stream.
async function readEvents(path, onEvent) {
  const resp = await request("GET", path);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let kind = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      if (data) onEvent(kind, JSON.parse(data));
    }
  }
}

// Follow a started job ({job, events}) to its end: resolves with its result, rejects with its error.
export function follow(started, what) {
  const job = { id: started.job, what, state: "running", stages: [], t0: performance.now() };
  jobs.set(job.id, job);
  renderJobs();
  return new Promise((resolve, reject) => {
    let settled = false;
    const end = (state, fn, value) => {
      job.state = state;
      renderJobs();
      settled = true;
      fn(value);
    };
    readEvents(started.events, (kind, data) => {
      if (kind === "result") return end("done", resolve, data);
      if (kind === "failed") return end(data.type === "Cancelled" ? "cancelled" : "failed", reject, new ApiError(data.status, data.type, data.message));
      job.stages.push([kind, Math.round(performance.now() - job.t0), data]);
      renderJobs();
    })
      .then(() => settled || end("failed", reject, new Error(`the node ended job ${job.id}'s events early`)))
      .catch((err) => settled || end("failed", reject, err));
  });
}

async function cancel(id) {
  try {
    await request("DELETE", `/api/v0/jobs/${encodeURIComponent(id)}`, { write: true });
  } catch (err) {
    jobs.get(id).cancelError = err.message;
    renderJobs();
  }
}

function stageText(kind, data) {
  if (kind === "spark") {
    const stage = Math.min((data.stages_done || 0) + 1, data.stages || 0); // as the CLI says it (node/faces/cli/progress.py)
    return `spark: stage ${stage}/${data.stages}, tasks ${data.tasks_done}/${data.tasks}`;
  }
  if (kind === "step") return `step ${data.step}: ${data.state}`;
  return kind;
}

function jobRow(job) {
  const last = job.stages[job.stages.length - 1];
  return h(
    "li.job",
    { dataset: { state: job.state, job: job.id } },
    h("span.state", {}, job.state),
    ` ${job.what} `,
    h("code", {}, job.id),
    last ? ` · ${stageText(last[0], last[2])} (${last[1]} ms)` : "",
    job.state === "running" ? h("button.cancel", { onclick: () => cancel(job.id) }, "Cancel") : "",
    job.cancelError ? h("span.error", {}, ` ${job.cancelError}`) : "",
  );
}

export function renderJobs() {
  const el = document.getElementById("jobs");
  if (!el) return;
  const list = [...jobs.values()].reverse();
  replace(el, list.length ? h("ul.jobs", {}, list.map(jobRow)) : h("p.muted", {}, "No job started from this page yet."));
}

// "alias = dataset" lines (or a bare dataset name, bound under its own name) -> the query's inputs map.
function parseInputs(text) {
  const inputs = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const [alias, ...rest] = line.split("=");
    const dataset = rest.join("=").trim() || alias.trim();
    inputs[alias.trim()] = dataset;
  }
  return inputs;
}

function timings(answer, job) {
  const stages = job ? job.stages.map(([kind, ms]) => `${kind} ${ms} ms`).join(" · ") : "";
  return h("p.timings", {}, `answered in ${Math.round(answer.elapsed_ms)} ms by the node`, stages ? ` — ${stages}` : "");
}

export function renderAnswer(answer, job) {
  const badge = BADGE[answer.source] || answer.source;
  return h(
    "section.answer",
    {},
    h("p", {}, h("span.badge", { dataset: { source: badge } }, badge), ` ${answer.row_count} rows · execution `, cidLink(answer.execution, "execution"), answer.peer ? ` · from peer ${answer.peer}` : ""),
    timings(answer, job),
    table(answer.columns, answer.rows.slice(0, ROWS_SHOWN), { class: "result" }),
    answer.truncated || answer.rows.length > ROWS_SHOWN ? h("p.muted", {}, "first rows only") : "",
  );
}

async function run(form, out, retried = false) {
  const body = { sql: form.sql.value, inputs: parseInputs(form.inputs.value), wait: false };
  replace(out, h("p.muted", {}, "running…"));
  try {
    const started = await postJson("/api/v0/query", body, false);
    const answer = await follow(started, "query");
    replace(out, renderAnswer(answer, jobs.get(started.job)));
  } catch (err) {
    // a miss is computed only with the token: ask for it once, then run again
    if (err.status === 401 && !retried && (await askToken("Computing this query needs the node's API token."))) {
      return run(form, out, true);
    }
    replace(out, errorBox(err));
  }
}

export function queryView(main, params) {
  const sql = h("textarea", { id: "sql", rows: 4, spellcheck: "false", placeholder: "SELECT … FROM t" });
  const inputs = h("textarea", { id: "inputs", rows: 2, spellcheck: "false", placeholder: "t = my-dataset" });
  if (params.get("dataset")) {
    sql.value = "SELECT * FROM t LIMIT 10";
    inputs.value = `t = ${params.get("dataset")}`;
  }
  const out = h("div", { id: "result" });
  const form = { sql, inputs };
  replace(
    main,
    h("h2", {}, "Query"),
    h("label", {}, "SQL", sql),
    h("label", {}, "Inputs (one per line: alias = dataset name, id or block CID)", inputs),
    h("button", { id: "run", onclick: () => run(form, out) }, "Run"),
    out,
    h("h2", {}, "Jobs"),
    h("div", { id: "jobs" }),
  );
  renderJobs();
}
