// vixio operator console: plain JavaScript, no build step, nothing loaded from elsewhere.
// Every text that came from a device or a model is put in the page with textContent, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const state = {
  sessions: [], selected: "", chosen: false, versions: {}, tools: [], toolsKey: null, tool: null,
  mode: "form", values: {}, schema: null, runs: [],
};
const RUNS_KEY = "vixio.console.runs";
const NOT_OFFERED = "tools: not offered to this model";  // vixio.voice.agent_model.NOT_OFFERED_LABEL
const MARK_ORDER = ["speech_pause", "asr_draft", "preemptive_start", "agent_start", "speech_end", "asr_final",
  "turn_confirmed", "llm_first_token", "tts_first_audio", "first_frame_sent"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path, body) {
  const init = body === undefined ? {credentials: "same-origin"} : {
    method: "POST", credentials: "same-origin", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  let data = {};
  try { data = await response.json(); } catch (err) { data = {error: response.statusText}; }
  if (response.status === 401 || response.status === 403) showAuth(data.error);
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

function short(id) { return id ? id.slice(0, 8) : ""; }
function json(value) { return JSON.stringify(value); }
function since(epoch) { return new Date(epoch * 1000).toLocaleTimeString(); }

// --- auth ----------------------------------------------------------------------------------------

function showAuth(message, canLogin) {
  $("auth-note").textContent = message || "";
  if (canLogin !== undefined) $("login").hidden = !canLogin;
}

async function checkAuth() {
  const info = await api("/api/console");
  showAuth(info.operator && info.token_configured ? "" : info.message, info.token_configured && !info.operator);
  return info.operator;
}

$("login").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await api("/api/login", {token: $("login-token").value});
    $("login-token").value = "";
    if (await checkAuth()) start();
  } catch (err) { showAuth(err.message, true); }
});

// --- tabs and the session picker -----------------------------------------------------------------

for (const button of document.querySelectorAll("#tabs button")) {
  button.addEventListener("click", () => showPane(button.dataset.pane));
}

function showPane(name) {
  for (const button of document.querySelectorAll("#tabs button")) button.classList.toggle("active", button.dataset.pane === name);
  for (const pane of document.querySelectorAll(".pane")) pane.classList.toggle("active", pane.id === `pane-${name}`);
  if (name === "discovery" || name === "executor") loadTools();
}

$("session-select").addEventListener("change", () => { state.chosen = true; selectSession($("session-select").value); });

function selectSession(id) {
  state.selected = id;
  $("session-select").value = id;
  renderSessionList();
  loadDetail();
  loadTools();
}

// --- sessions ------------------------------------------------------------------------------------

function onSessions(sessions) {
  state.sessions = sessions;
  const select = $("session-select");
  const keep = state.selected;
  select.replaceChildren(el("option", {value: ""}, "process-wide (no session)"),
    ...sessions.map((s) => el("option", {value: s.session_id}, `${s.device_id} · ${short(s.session_id)}`)));
  if (keep && !sessions.some((s) => s.session_id === keep)) {
    state.selected = "";
    state.chosen = false;
    $("session-detail").replaceChildren(el("p", {class: "muted"}, "That session has ended."));
  }
  // Follow the first device until the operator picks something (process-wide included).
  if (!state.selected && !state.chosen && sessions.length) state.selected = sessions[0].session_id;
  select.value = state.selected;
  renderSessionList();
  const current = sessions.find((s) => s.session_id === state.selected);
  if (current && state.versions[current.session_id] !== current.version) {
    state.versions[current.session_id] = current.version;
    loadDetail();
  }
  const key = `${state.selected}:${current ? current.tools : ""}`;
  if (key !== state.toolsKey) loadTools();
}

function renderSessionList() {
  $("no-sessions").hidden = state.sessions.length > 0;
  $("session-list").tBodies[0].replaceChildren(...state.sessions.map((s) => el("tr", {
    class: s.session_id === state.selected ? "selected" : "", "data-session": s.session_id,
    onclick: () => { state.chosen = true; selectSession(s.session_id); },
  }, el("td", {title: s.instance ? `on instance ${s.instance}, worker ${s.worker}` : ""},
        s.instance ? `${s.device_id} @ ${s.instance}` : s.device_id),
     el("td", {title: s.session_id}, short(s.session_id)), el("td", {}, since(s.connected_at)),
     el("td", {}, s.mode), el("td", {class: `state-${s.state}`}, s.state), el("td", {}, s.turns),
     el("td", {class: "profile"}, profileLabel(s)))));
}

async function loadDetail() {
  const id = state.selected;
  if (!id) return;
  try {
    const detail = await api(`/api/sessions/${encodeURIComponent(id)}`);
    if (id === state.selected) renderDetail(detail);
  } catch (err) {
    $("session-detail").replaceChildren(el("p", {class: "error"}, err.message));
  }
}

function renderDetail(d) {
  const head = el("div", {}, el("h2", {}, `Device ${d.device_id}`), el("dl", {},
    el("dt", {}, "session"), el("dd", {}, d.session_id),
    el("dt", {}, "connected since"), el("dd", {}, `${since(d.connected_at)} (${Math.round(d.connected_seconds)} s)`),
    el("dt", {}, "listening mode"), el("dd", {}, d.mode),
    el("dt", {}, "state"), el("dd", {id: "detail-state"}, d.state),
    el("dt", {}, "interruptions"), el("dd", {id: "detail-interruptions"},
      d.interruptions ? `${d.interruptions.real} real, ${d.interruptions.false} false (reply resumed)` : "-"),
    el("dt", {}, "echo cancelled"), el("dd", {id: "detail-erle"},
      d.echo_erle_db == null ? "no (device without features.aec)" : `ERLE ${d.echo_erle_db} dB`),
    el("dt", {}, "tools"), el("dd", {id: "detail-tools"}, d.tools_offered === false ? `${d.tools} (${NOT_OFFERED})` : d.tools),
    el("dt", {}, "profile"), el("dd", {id: "detail-profile"}, profileControls(d))));
  const turns = d.conversation.length ? d.conversation.slice().reverse().map(renderTurn)
    : [el("p", {class: "muted"}, "Nothing said yet.")];
  const runs = d.console_calls.slice().reverse().map(renderCall);
  $("session-detail").replaceChildren(head, el("h2", {}, "Conversation (newest first)"), el("div", {id: "conversation"}, turns),
    // replaceChildren prints a null argument as the word "null": pass only the nodes there are.
    ...(runs.length ? [el("h2", {}, "Run from the console (newest first)")] : []), el("div", {id: "console-calls"}, runs));
}

function renderCall(call) {
  const outcome = call.success ? call.result : call.error;
  return el("div", {class: "call"}, `${call.by} → ${call.tool}(${json(call.arguments)})`,
    el("span", {class: call.success ? "ok" : "error"}, ` ${call.status}`), ` ${call.ms} ms: `, outcome || "");
}

function renderTurn(t) {
  const lines = [];
  for (const text of t.heard) lines.push(el("div", {class: "line heard"}, el("span", {class: "who"}, "heard"), text));
  for (const call of t.tools) lines.push(renderCall(call));
  for (const text of t.said) {
    lines.push(el("div", {class: "line said"}, el("span", {class: "who"}, t.interrupted ? "said (cut)" : "said"), text));
  }
  const marks = Object.entries(t.marks).sort((a, b) => a[1] - b[1] || MARK_ORDER.indexOf(a[0]) - MARK_ORDER.indexOf(b[0]));
  return el("div", {class: "turn", "data-turn": t.turn}, el("div", {class: "head"}, `turn ${t.turn}`), lines,
    marks.length ? el("div", {class: "marks", title: "ms from the turn's first mark (+ms since the step before)"},
      marks.map(([name, ms], i) => el("span", {class: "mark", "data-mark": name},
        i === 0 ? `${name} 0 ms` : `${name} ${ms} ms (+${Math.round((ms - marks[i - 1][1]) * 10) / 10})`))) : null,
    Object.keys(t.notes || {}).length ? el("div", {class: "marks notes", title: "preemptive turn: time saved, attempts cancelled, what confirmed it"},
      Object.entries(t.notes).map(([name, value]) => el("span", {class: "mark", "data-note": name}, `${name} ${value}`))) : null);
}

$("say").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("say-text").value.trim();
  if (!state.selected) { $("say-status").textContent = "Select a live session first."; return; }
  if (!text) return;
  try {
    await api("/api/say", {session: state.selected, text});
    $("say-status").textContent = `Sent: ${text}`;
    $("say-text").value = "";
  } catch (err) { $("say-status").textContent = err.message; }
});

// --- discovery -----------------------------------------------------------------------------------

async function loadTools() {
  const current = state.sessions.find((s) => s.session_id === state.selected);
  state.toolsKey = `${state.selected}:${current ? current.tools : ""}`;
  const selected = state.selected;
  try {
    const query = selected ? `?session=${encodeURIComponent(selected)}` : "";
    const data = await api(`/api/tools${query}`);
    if (selected !== state.selected) return;  // an answer for a session no longer picked
    state.tools = data.tools;
    state.toolsOffered = data.tools_offered !== false;
  } catch (err) {
    if (selected !== state.selected) return;
    state.tools = [];
    renderTools();
    $("discovery-scope").textContent = err.message;
    return;
  }
  renderTools();
}

function renderTools() {
  const needle = $("discovery-search").value.trim().toLowerCase();
  const sort = $("discovery-sort").value;
  let tools = state.tools.filter((t) => !needle || [t.name, t.original_name, t.description, t.source]
    .some((v) => String(v).toLowerCase().includes(needle)));
  const byName = (a, b) => a.name.localeCompare(b.name);
  tools = tools.sort(sort === "source" ? (a, b) => a.source.localeCompare(b.source) || byName(a, b)
    : sort === "params" ? (a, b) => b.parameter_count - a.parameter_count || byName(a, b) : byName);
  const where = state.selected ? `session ${short(state.selected)} (its own tools and the process-wide ones)`
    : "process-wide tools (no session selected)";
  $("discovery-scope").textContent = `${tools.length} of ${state.tools.length} tools · ${where}`
    + (state.toolsOffered === false ? ` · ${NOT_OFFERED}` : "");
  $("tool-list").replaceChildren(...tools.map((t) => el("li", {
    class: `${t.enabled ? "" : "disabled"} ${state.tool && state.tool.name === t.name ? "selected" : ""}`,
    "data-name": t.name, onclick: () => { state.tool = t; renderTools(); renderToolDetail(t); },
  }, el("span", {class: "name"}, t.name), el("span", {class: "src"}, t.source), el("span", {class: "muted"}, `${t.parameter_count} params`))));
  $("exec-tools").replaceChildren(...state.tools.filter((t) => t.enabled).map((t) => el("option", {value: t.name})));
}

function renderToolDetail(t) {
  $("tool-detail").replaceChildren(el("h2", {}, t.name), el("p", {}, t.description || "(no description)"), el("dl", {},
    el("dt", {}, "public name"), el("dd", {}, t.name),
    el("dt", {}, "original name"), el("dd", {}, t.original_name),
    el("dt", {}, "source"), el("dd", {}, `${t.source} (${t.source_key}${t.origin ? `, ${t.origin}` : ""}; ${t.scope})`),
    el("dt", {}, "enabled"), el("dd", {}, t.enabled ? "yes" : "no (turned off by policy)"),
    el("dt", {}, "kind"), el("dd", {}, `${t.sub_type}${t.async ? ", async" : ""}`),
    el("dt", {}, "timeout"), el("dd", {}, `${t.timeout} s`),
    el("dt", {}, "confirmation"), el("dd", {}, t.confirmation ? "asks the user first" : "no")),
  el("h2", {}, "JSON schema"), el("pre", {}, JSON.stringify(t.parameters, null, 2)),
  el("button", {type: "button", id: "load-into-executor", class: "primary", disabled: !t.enabled,
    onclick: () => { loadIntoExecutor(t.name, {}); showPane("executor"); }}, "Load into executor"));
}

$("discovery-search").addEventListener("input", renderTools);
$("discovery-sort").addEventListener("change", renderTools);

// --- executor ------------------------------------------------------------------------------------

function findTool(name) { return state.tools.find((t) => t.name === name || t.original_name === name); }

function loadIntoExecutor(name, values) {
  $("exec-tool").value = name;
  state.values = {...values};
  setSchema();
}

function setSchema() {
  const tool = findTool($("exec-tool").value.trim());
  state.schema = tool ? tool.parameters : null;
  renderInputs();
}

$("exec-tool").addEventListener("change", setSchema);

function kindOf(spec) {
  if (Array.isArray(spec.enum)) return "enum";
  const type = Array.isArray(spec.type) ? spec.type.find((t) => t !== "null") : spec.type;
  return ["string", "number", "integer", "boolean"].includes(type) ? type : "json";
}

function renderInputs() {
  $("exec-json").value = JSON.stringify(state.values, null, 2);
  const props = (state.schema && state.schema.properties) || {};
  const required = new Set((state.schema && state.schema.required) || []);
  const names = Object.keys(props);
  if (!names.length) {
    const picked = $("exec-tool").value.trim();
    $("exec-form").replaceChildren(el("p", {class: "muted"}, !picked ? "Pick a tool: its arguments appear here."
      : state.schema ? "This tool takes no arguments." : "Unknown tool here: use JSON mode for its arguments."));
  } else {
    $("exec-form").replaceChildren(...names.map((name) => field(name, props[name] || {}, required.has(name))));
  }
  $("exec-input-error").textContent = "";
}

function field(name, spec, required) {
  const kind = kindOf(spec);
  const value = state.values[name];
  const attrs = {"data-arg": name, "data-kind": kind, name};
  let input;
  if (kind === "enum" || kind === "boolean") {
    const options = kind === "boolean" ? [true, false] : spec.enum;
    input = el("select", attrs, el("option", {value: ""}, "—"),
      options.map((option) => el("option", {value: json(option), selected: value !== undefined && json(value) === json(option)}, String(option))));
  } else if (kind === "json") {
    input = el("textarea", {...attrs, rows: 3, spellcheck: "false"});
    input.value = value === undefined ? "" : JSON.stringify(value);
  } else {
    input = el("input", {...attrs, type: kind === "string" ? "text" : "number", step: kind === "integer" ? "1" : kind === "number" ? "any" : null,
      min: spec.minimum, max: spec.maximum});
    input.value = value === undefined ? "" : String(value);
  }
  input.addEventListener("input", readForm);
  input.addEventListener("change", readForm);
  const type = kind === "enum" ? "enum" : kind === "json" ? `${spec.type || "any"} as JSON` : kind;
  const range = spec.minimum !== undefined || spec.maximum !== undefined ? ` ${spec.minimum ?? ""}…${spec.maximum ?? ""}` : "";
  return el("label", {}, el("span", {}, `${name}${required ? " *" : ""}`,
    el("span", {class: "type"}, `${type}${range}${spec.description ? ` · ${spec.description}` : ""}`)), input);
}

function readForm() {
  const errors = [];
  for (const input of $("exec-form").querySelectorAll("[data-arg]")) {
    const name = input.dataset.arg;
    const raw = input.value.trim();
    if (raw === "") { delete state.values[name]; continue; }
    const kind = input.dataset.kind;
    if (kind === "integer" || kind === "number") {
      const number = Number(raw);
      state.values[name] = Number.isFinite(number) ? number : raw;  // the executor explains a bad number
    } else if (kind === "enum" || kind === "boolean") {
      state.values[name] = JSON.parse(raw);
    } else if (kind === "json") {
      try { state.values[name] = JSON.parse(raw); } catch (err) { errors.push(`${name}: not JSON`); }
    } else {
      state.values[name] = input.value;
    }
  }
  $("exec-input-error").textContent = errors.join("; ");
  return errors.length === 0;
}

function readJson() {
  try {
    const value = JSON.parse($("exec-json").value || "{}");
    if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("arguments must be a JSON object");
    state.values = value;
    $("exec-input-error").textContent = "";
    return true;
  } catch (err) {
    $("exec-input-error").textContent = `JSON: ${err.message}`;
    return false;
  }
}

function setMode(mode) {
  if (mode === state.mode) return;
  if (state.mode === "json" && !readJson()) return;  // keep the typed JSON until it parses
  if (state.mode === "form") readForm();
  state.mode = mode;
  renderInputs();
  $("exec-form").hidden = mode !== "form";
  $("exec-json").hidden = mode !== "json";
  $("exec-mode-form").classList.toggle("active", mode === "form");
  $("exec-mode-json").classList.toggle("active", mode === "json");
}

$("exec-mode-form").addEventListener("click", () => setMode("form"));
$("exec-mode-json").addEventListener("click", () => setMode("json"));

$("exec-run").addEventListener("click", async () => {
  const ok = state.mode === "json" ? readJson() : readForm();
  const tool = $("exec-tool").value.trim();
  if (!ok || !tool) { if (!tool) $("exec-input-error").textContent = "Name a tool."; return; }
  const run = {tool, session: state.selected, arguments: {...state.values}};
  $("exec-result").replaceChildren(el("p", {class: "muted"}, `Running ${tool}…`));
  try {
    const out = await api("/api/execute", {session: state.selected || null, tool, arguments: run.arguments});
    Object.assign(run, {status: out.status, success: out.success, ms: out.ms, output: out.success ? out.result : out.error});
  } catch (err) {
    Object.assign(run, {status: "refused", success: false, ms: null, output: err.message});
  }
  renderResult(run);
  state.runs = [run, ...state.runs].slice(0, 10);
  sessionStorage.setItem(RUNS_KEY, JSON.stringify(state.runs));
  renderHistory();
});

function renderResult(run) {
  $("exec-result").replaceChildren(el("div", {id: "exec-outcome", class: run.success ? "ok" : "error", "data-status": run.status},
    `${run.status}`, run.ms === null ? "" : el("span", {id: "exec-duration"}, ` in ${run.ms} ms`)),
  el("pre", {id: "exec-output"}, run.output || ""));
}

function renderHistory() {
  $("exec-history").replaceChildren(...state.runs.map((run) => el("li", {
    onclick: () => { loadIntoExecutor(run.tool, run.arguments); renderResult(run); },
  }, el("code", {}, `${run.tool}(${json(run.arguments)})`), " ",
     el("span", {class: run.success ? "ok" : "error"}, run.status), run.ms === null ? "" : ` ${run.ms} ms`,
     run.session ? el("span", {class: "muted"}, ` · ${short(run.session)}`) : "")));
}

// --- parser --------------------------------------------------------------------------------------

$("parse-run").addEventListener("click", async () => {
  try {
    const out = await api("/api/parse", {text: $("parse-text").value, protocol: $("parse-protocol").value});
    $("parse-requests").tBodies[0].replaceChildren(...(out.requests.length ? out.requests.map((r) => el("tr", {class: "parsed"},
      el("td", {}, r.protocol), el("td", {class: "parsed-tool"}, r.tool || "?"),
      el("td", {}, el("code", {class: "parsed-args"}, json(r.arguments))), el("td", {}, r.request_id || "—")))
      : [el("tr", {}, el("td", {colspan: 4, class: "muted"}, "No tool request found."))]));
    $("parse-errors").replaceChildren(...(out.errors.length ? out.errors.map((e) => el("li", {class: "error"}, e))
      : [el("li", {class: "muted"}, "none")]));
    $("parse-speech").textContent = out.speech || "(nothing would be spoken)";
  } catch (err) {
    $("parse-errors").replaceChildren(el("li", {class: "error"}, err.message));
  }
});

// --- live updates --------------------------------------------------------------------------------

let source = null;
function start() {
  if (source) source.close();
  source = new EventSource("/api/events");
  source.addEventListener("sessions", (event) => {
    $("live").textContent = "live";
    $("live").className = "badge on";
    onSessions(JSON.parse(event.data).sessions);
  });
  source.addEventListener("error", () => {
    $("live").textContent = "reconnecting";
    $("live").className = "badge off";
    if (source.readyState === EventSource.CLOSED) checkAuth().then((ok) => { if (ok) setTimeout(start, 2000); });
  });
  loadTools();
}

try { state.runs = JSON.parse(sessionStorage.getItem(RUNS_KEY) || "[]").slice(0, 10); } catch (err) { state.runs = []; }
renderHistory();
renderInputs();
checkAuth().then((ok) => { if (ok) start(); }).catch((err) => showAuth(err.message));
