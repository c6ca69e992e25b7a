// vixio operator console, Memory pane: each device's facts, long-term memory and stored turns, from
// the state store (connected or not); edit or delete a fact, add one, edit the memory, delete a
// turn, clear the history, forget all.
// Uses $, el, api and since from console.js (loaded first). Stored texts go in as textContent.
"use strict";

const MEMORY_PAGE = 50;
const memoryState = {offset: 0, device: "", more: false};

function when(epoch) { return epoch ? new Date(epoch * 1000).toLocaleString() : "—"; }
function path(device, tail) { return `/api/devices/${encodeURIComponent(device)}${tail || ""}`; }

async function loadMemoryDevices() {
  try {
    const data = await api(`/api/devices?limit=${MEMORY_PAGE}&offset=${memoryState.offset}`);
    memoryState.more = data.more;
    // A connected device with nothing stored yet is listed too (first page): its memory can be written.
    const stored = new Set(data.devices.map((d) => d.device_id));
    const unstored = memoryState.offset ? [] : data.live.filter((l) => !stored.has(l.device_id))
      .map((l) => ({device_id: l.device_id, turns: 0, last_turn: null, memory_chars: 0, live: l.sessions}));
    const rows = [...unstored, ...data.devices].map((d) => el("tr", {
      "data-device": d.device_id, class: d.device_id === memoryState.device ? "selected" : "",
      onclick: () => loadMemoryDetail(d.device_id),
    }, el("td", {}, el("code", {}, d.device_id)), el("td", {}, d.turns), el("td", {}, when(d.last_turn)),
       el("td", {}, d.facts || "—"), el("td", {}, d.memory_chars ? `${d.memory_chars} chars` : "—"),
       el("td", {}, d.live.length ? el("span", {class: "badge on"}, "connected") : "")));
    if (!rows.length) rows.push(el("tr", {}, el("td", {colspan: 6, class: "muted"}, "Nothing stored yet, and no device connected.")));
    $("memory-devices").tBodies[0].replaceChildren(...rows);
    $("memory-prev").disabled = memoryState.offset === 0;
    $("memory-next").disabled = !data.more;
    $("memory-page").textContent = `${memoryState.offset + 1}–${memoryState.offset + unstored.length + data.devices.length}`;
    $("memory-error").textContent = data.enabled ? "" : "memory.enabled is false: nothing new is stored.";
  } catch (err) { $("memory-error").textContent = err.message; }
}

async function memoryAction(device, tail, body, confirmText) {
  if (confirmText && !window.confirm(confirmText)) return;
  try {
    const done = await api(path(device, tail), body || {});
    const live = done.live_sessions_updated ? ` (${done.live_sessions_updated} live session${done.live_sessions_updated > 1 ? "s" : ""} follow)` : "";
    await loadMemoryDetail(device, `Done${live}.`);
  } catch (err) { $("memory-status").textContent = err.message; }
  loadMemoryDevices();
}

async function loadMemoryDetail(device, status) {
  memoryState.device = device;
  for (const row of $("memory-devices").tBodies[0].rows) row.classList.toggle("selected", row.dataset.device === device);
  let d;
  try { d = await api(path(device)); } catch (err) {
    $("memory-detail").replaceChildren(el("p", {class: "error"}, err.message));
    return;
  }
  if (device !== memoryState.device) return;
  const text = el("textarea", {id: "memory-text", rows: 6, maxlength: d.max_chars, spellcheck: "false",
    placeholder: "Nothing remembered about this device yet: write here what the assistant should know."});
  text.value = d.memory ? d.memory.text : "";
  const count = el("span", {id: "memory-count", class: "muted"}, `${text.value.length} / ${d.max_chars}`);
  text.addEventListener("input", () => { count.textContent = `${text.value.length} / ${d.max_chars}`; });
  const note = d.long_term === "off" ? "memory.long_term is off: the memory is kept but not given to the model."
    : `Updated ${when(d.memory && d.memory.at)} (memory.long_term: ${d.long_term}).`;
  const facts = d.facts.map((f) => {
    const value = el("input", {type: "text", class: "fact-value", maxlength: 120, value: f.value});
    value.value = f.value;
    return el("tr", {class: "fact", "data-key": f.key, "data-person": f.person},
      el("td", {}, f.kind), el("td", {}, value), el("td", {class: "muted"}, `${when(f.at)} · ${f.source}${f.person ? " · " + f.person : ""}`),
      el("td", {}, el("button", {type: "button", class: "fact-save",
        onclick: () => memoryAction(device, "/facts/edit", {person: f.person, key: f.key, value: value.value})}, "Save"),
      el("button", {type: "button", class: "fact-delete", title: "delete this fact and the turns that said it",
        onclick: () => memoryAction(device, "/facts/delete", {person: f.person, key: f.key})}, "Delete")));
  });
  const kind = el("select", {id: "fact-kind"}, ...["name", "home", "birthday", "family", "like", "dislike", "date", "note"].map((k) => el("option", {value: k}, k)));
  const added = el("input", {type: "text", id: "fact-new", maxlength: 120, placeholder: "a new fact's value"});
  const empty = !d.facts.length && !d.turns.length && !d.memory;
  const turns = d.turns.slice().reverse().map((t) => el("div", {class: "turn", "data-conversation": t.conversation, "data-seq": t.seq},
    el("div", {class: "head"}, `${when(t.at)} · ${t.conversation}#${t.seq} `,
      el("button", {type: "button", class: "turn-delete", title: "delete this turn",
        onclick: () => memoryAction(device, "/turns/delete", {conversation: t.conversation, seq: t.seq})}, "Delete")),
    t.user ? el("div", {class: "line heard"}, el("span", {class: "who"}, "user"), t.user) : null,
    el("div", {class: "line said"}, el("span", {class: "who"}, t.interrupted ? "reply (cut)" : "reply"), t.assistant)));
  $("memory-detail").replaceChildren(
    el("h2", {}, `Device ${d.device_id}`, d.live.length ? el("span", {class: "badge on"}, " connected") : ""),
    empty ? el("p", {id: "memory-empty", class: "muted"}, d.live.length
      ? "Connected; nothing stored about it yet. What its user says is kept and learnt as they talk."
      : "Nothing is stored about this device.") : null,
    el("h2", {}, `Facts (${d.facts.length})`),
    el("p", {class: "muted"}, "Learnt from what the user said (identity first). Deleting a fact deletes the stored turns that said it."),
    el("table", {id: "memory-facts"}, el("tbody", {}, ...(facts.length ? facts : [el("tr", {}, el("td", {colspan: 4, class: "muted"}, "No facts yet."))]))),
    el("div", {class: "toolbar"}, kind, added,
      el("button", {type: "button", id: "fact-add", onclick: () => memoryAction(device, "/facts/add", {kind: kind.value, value: added.value})}, "Add fact")),
    el("h2", {}, "Long-term memory"), el("p", {class: "muted"}, note), text,
    el("div", {class: "toolbar"},
      el("button", {type: "button", id: "memory-save", class: "primary",
        onclick: () => memoryAction(device, "/memory", {text: text.value})}, "Save memory"), count,
      el("button", {type: "button", id: "memory-clear-text",
        onclick: () => memoryAction(device, "/memory", {text: ""}, "Clear this device's long-term memory?")}, "Clear memory")),
    el("p", {id: "memory-status", class: "muted"}, status || ""),
    el("h2", {}, `Stored turns (newest first, at most ${d.turn_limit})`),
    el("div", {class: "toolbar"},
      el("button", {type: "button", id: "memory-clear-history",
        onclick: () => memoryAction(device, "/history/clear", {}, "Delete every stored turn of this device?")}, "Clear history"),
      el("button", {type: "button", id: "memory-forget",
        onclick: () => memoryAction(device, "/forget", {}, "Forget everything about this device (turns, facts, memory, profile assignment, held results)?")},
        "Forget everything")),
    el("div", {id: "memory-turns"}, turns.length ? turns : [el("p", {class: "muted"}, "No stored turns.")]));
}

$("memory-prev").addEventListener("click", () => { memoryState.offset = Math.max(0, memoryState.offset - MEMORY_PAGE); loadMemoryDevices(); });
$("memory-next").addEventListener("click", () => { if (memoryState.more) { memoryState.offset += MEMORY_PAGE; loadMemoryDevices(); } });
$("tab-memory").addEventListener("click", loadMemoryDevices);
