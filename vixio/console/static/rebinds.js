// vixio operator console, Companions pane: devices asked for by another Client-Id (a re-flashed
// board, or a claimant of the MAC); approve re-pins the device to it, dismiss drops the request.
// Uses $, el, api and since from console.js (loaded first). Texts from clients go in as textContent.
"use strict";

const REBIND_INTERVAL = 5000;
let rebindTimer = null;

function rebindButton(label, entry, action, confirmText) {
  return el("button", {type: "button", "data-action": action, onclick: async () => {
    if (confirmText && !window.confirm(confirmText)) return;
    try {
      await api(`/api/identities/${action}`, {device_id: entry.device_id, client_id: entry.client_id});
      $("rebind-error").textContent = "";
    } catch (err) {
      $("rebind-error").textContent = err.message;
    }
    loadRebinds();
  }}, label);
}

function renderRebinds(data) {
  const rebinds = data.rebinds || [];
  $("rebinds").tBodies[0].replaceChildren(...rebinds.map((r) => el("tr", {"data-device": r.device_id},
    el("td", {}, el("code", {}, r.device_id)),
    el("td", {}, el("code", {}, r.client_id), el("div", {class: "muted"}, `pinned now: ${r.pinned_client_id || "(none)"}`)),
    el("td", {}, `${r.attempts}× · last ${since(r.last)}`),
    el("td", {}, rebindButton("Approve", r, "approve",
      `Make the board with Client-Id ${r.client_id} the device ${r.device_id}? It gets its memory and history; ` +
      "the board pinned now becomes another device."), " ",
      rebindButton("Dismiss", r, "dismiss")))));
  if (!rebinds.length) $("rebinds").tBodies[0].append(el("tr", {}, el("td", {colspan: 4, class: "muted"}, "None.")));
}

async function loadRebinds() {
  try {
    renderRebinds(await api("/api/identities"));
  } catch (err) {
    $("rebind-error").textContent = err.message;
    return false;
  }
  return true;
}

function pollRebinds() {
  clearTimeout(rebindTimer);
  loadRebinds().then((ok) => { if (ok) rebindTimer = setTimeout(pollRebinds, REBIND_INTERVAL); });
}

$("tab-companions").addEventListener("click", pollRebinds);
checkAuth().then((ok) => { if (ok) pollRebinds(); }).catch(() => {});
