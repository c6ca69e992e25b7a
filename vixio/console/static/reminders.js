// vixio operator console, Reminders pane: every device's reminders (cancel), one added by hand, and
// a message said to a device now. Uses $, el and api from console.js (loaded first). Texts from
// devices go in as textContent.
"use strict";

const REMINDER_INTERVAL = 5000;
let reminderTimer = null;

function renderReminders(data) {
  const reminders = data.reminders || [];
  $("reminders").tBodies[0].replaceChildren(...reminders.map((r) => el("tr", {"data-id": r.id},
    el("td", {}, el("code", {}, r.device_id)),
    el("td", {}, r.when + (r.repeat ? ` (${r.repeat} at ${r.time_of_day})` : "")),
    el("td", {}, r.kind),
    el("td", {}, r.text),
    el("td", {}, el("button", {type: "button", "data-action": "cancel", onclick: async () => {
      try {
        await api("/api/reminders/cancel", {device_id: r.device_id, id: r.id});
        $("reminder-error").textContent = "";
      } catch (err) {
        $("reminder-error").textContent = err.message;
      }
      loadReminders();
    }}, "Cancel")))));
  if (!reminders.length) $("reminders").tBodies[0].append(el("tr", {}, el("td", {colspan: 5, class: "muted"}, "None.")));
}

async function loadReminders() {
  try {
    renderReminders(await api("/api/reminders"));
  } catch (err) {
    $("reminder-error").textContent = err.message;
    return false;
  }
  return true;
}

function pollReminders() {
  clearTimeout(reminderTimer);
  if (!$("pane-reminders").classList.contains("active")) return;
  loadReminders().then((ok) => { if (ok) reminderTimer = setTimeout(pollReminders, REMINDER_INTERVAL); });
}

$("reminder-add").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await api("/api/reminders/add", {device_id: $("reminder-device").value, text: $("reminder-text").value,
                                     in_seconds: Number($("reminder-minutes").value) * 60});
    $("reminder-error").textContent = "";
    $("reminder-text").value = "";
  } catch (err) {
    $("reminder-error").textContent = err.message;
  }
  loadReminders();
});

$("message").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const answer = await api("/api/say", {device: $("message-device").value, text: $("message-text").value});
    $("message-status").textContent = `Queued for ${answer.device_id}.`;
    $("message-text").value = "";
  } catch (err) {
    $("message-status").textContent = err.message;
  }
});

$("tab-reminders").addEventListener("click", () => setTimeout(pollReminders, 0));
