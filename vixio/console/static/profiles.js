// vixio operator console, each session's profile: shown in the list, assigned or cleared in the detail.
// Uses $, el and api from console.js (loaded first); profileLabel and profileControls are called there.
"use strict";

let profileNames = null;  // from GET /api/profiles, once per page

function profileLabel(s) {
  if (!s.profile) return "";
  const label = s.profile_source === "assigned" ? `${s.profile} (assigned)` : s.profile;
  return s.profile_pending ? `${label} → ${s.profile_pending} at the next turn` : label;
}

async function profileChoices() {
  if (profileNames === null) {
    try { profileNames = (await api("/api/profiles")).profiles.map((p) => p.name); }
    catch (err) { return []; }
  }
  return profileNames;
}

function profileControls(d) {
  const status = el("span", {id: "profile-status", class: "muted"}, ` ${profileLabel(d)}`);
  if (!d.profile) return [status];
  const select = el("select", {id: "profile-select", "aria-label": "profile"});
  const assign = async (profile) => {
    try {
      const done = await api(profile === null ? "/api/profiles/clear" : "/api/profiles/assign",
                             {device: d.device_id, profile});
      status.textContent = ` ${done.profile} (${done.profile_source}) from the next turn`;
    } catch (err) { status.textContent = ` ${err.message}`; }
  };
  profileChoices().then((names) => {
    select.replaceChildren(...names.map((name) => el("option", {value: name}, name)));
    select.value = d.profile_pending || d.profile;
  });
  return [select,
    el("button", {type: "button", id: "profile-assign", onclick: () => assign(select.value)}, "Assign"),
    el("button", {type: "button", id: "profile-clear", title: "the config decides again (devices:)",
                  onclick: () => assign(null)}, "Clear"),
    status];
}
