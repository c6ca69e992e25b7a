// vixio operator console, Companions pane: who asks to pair with a device, approve, unpair, revoke.
// Uses $, el, api and since from console.js (loaded first). Texts from clients go in as textContent.
"use strict";

const PAIRING_INTERVAL = 3000;
let pairingTimer = null;

function companionCell(entry) {
  return el("td", {title: `Client-Id ${entry.client_id || "(none)"} · pairing id ${entry.id}`},
    el("code", {}, entry.companion), el("div", {class: "muted"}, entry.id));
}

function pairingButton(label, id, path, confirmText) {
  return el("button", {type: "button", "data-id": id, "data-action": path.split("/").pop(), onclick: async () => {
    if (confirmText && !window.confirm(confirmText)) return;
    try {
      await api(path, {id});
      $("pairing-error").textContent = "";
    } catch (err) {
      $("pairing-error").textContent = err.message;
    }
    loadPairing();
  }}, label);
}

function renderPairing(data) {
  const pending = data.pending || [];
  $("pairing-count").textContent = pending.length ? String(pending.length) : "";
  $("pairing-pending").tBodies[0].replaceChildren(...pending.map((e) => el("tr", {"data-id": e.id},
    companionCell(e), el("td", {}, el("code", {}, e.mac)),
    el("td", {}, e.tools.join(", ") || "-", e.refusal ? el("div", {class: "error"}, `token refused: ${e.refusal}`) : null),
    el("td", {}, since(e.since)),
    el("td", {}, pairingButton("Approve", e.id, "/api/pairing/approve")))));
  if (!pending.length) $("pairing-pending").tBodies[0].append(el("tr", {}, el("td", {colspan: 5, class: "muted"}, "No companion is waiting.")));
  const companions = data.companions || [];
  $("pairing-companions").tBodies[0].replaceChildren(...companions.map((e) => el("tr", {"data-id": e.id},
    companionCell(e), el("td", {}, el("code", {}, e.mac)),
    el("td", {class: e.paired ? "ok" : "muted"}, e.paired ? "paired" : "waiting for the device"),
    el("td", {}, e.grant), el("td", {}, e.tools.join(", ") || "-"),
    el("td", {}, pairingButton("Unpair", e.id, "/api/pairing/revoke",
      `Unpair ${e.companion} from ${e.mac}? Its tools leave the device's assistant and it stops receiving its messages.`)))));
  if (!companions.length) $("pairing-companions").tBodies[0].append(el("tr", {}, el("td", {colspan: 6, class: "muted"}, "No companion is paired.")));
  const approved = data.approved || [];
  $("pairing-approved").tBodies[0].replaceChildren(...approved.map((a) => el("tr", {"data-id": a.id},
    companionCell(a), el("td", {}, el("code", {}, a.mac)), el("td", {}, new Date(a.approved_at * 1000).toLocaleString()),
    el("td", {}, pairingButton("Revoke", a.id, "/api/pairing/revoke")))));
  if (!approved.length) $("pairing-approved").tBodies[0].append(el("tr", {}, el("td", {colspan: 4, class: "muted"}, "None.")));
}

async function loadPairing() {
  try {
    renderPairing(await api("/api/pairing"));
  } catch (err) {
    $("pairing-error").textContent = err.message;
    return false;
  }
  return true;
}

function pollPairing() {
  clearTimeout(pairingTimer);
  loadPairing().then((ok) => { if (ok) pairingTimer = setTimeout(pollPairing, PAIRING_INTERVAL); });
}

$("tab-companions").addEventListener("click", pollPairing);
checkAuth().then((ok) => { if (ok) pollPairing(); }).catch(() => {});
