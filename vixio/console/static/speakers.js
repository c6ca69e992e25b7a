// vixio operator console, Memory pane: the speakers section. Voiceprints per device (who is
// speaking, docs/speakers.md): listed, deleted, and enrolled from an audio file chosen here.
// The file is decoded in the page, resampled to 16 kHz mono and sent as µ-law in pieces of
// at most 3 s (the console takes 64 KiB a request); each piece adds to the person's voiceprint.
// Uses $, el and api from console.js (loaded first). Names go in as textContent.
"use strict";

const SPEAKER_PIECE_S = 3, SPEAKER_MIN_S = 1, SPEAKER_PIECES = 6;

function mulawByte(sample) {
  let s = Math.max(-32635, Math.min(32635, Math.round(sample * 32768)));
  const sign = s < 0 ? 0x80 : 0;
  if (sign) s = -s;
  s += 0x84;
  let exponent = 7;
  for (let mask = 0x4000; (s & mask) === 0 && exponent > 0; mask >>= 1) exponent--;
  const mantissa = (s >> (exponent + 3)) & 0x0f;
  return ~(sign | (exponent << 4) | mantissa) & 0xff;
}

function mulawBase64(samples) {
  let text = "";
  for (let i = 0; i < samples.length; i++) text += String.fromCharCode(mulawByte(samples[i]));
  return btoa(text);
}

async function decode16k(file) {
  const bytes = await file.arrayBuffer();
  const decoded = await new AudioContext().decodeAudioData(bytes);
  const offline = new OfflineAudioContext(1, Math.ceil(decoded.duration * 16000), 16000);
  const source = offline.createBufferSource();
  source.buffer = decoded;
  source.connect(offline.destination);
  source.start();
  return (await offline.startRendering()).getChannelData(0);
}

async function enrolSpeaker(event) {
  event.preventDefault();
  const device = $("speaker-device").value.trim(), person = $("speaker-name").value.trim();
  const file = $("speaker-file").files[0];
  const status = $("speaker-status");
  if (!device || !person || !file) { status.textContent = "A device id, a name and a recording are needed."; return; }
  try {
    const samples = await decode16k(file);
    const step = SPEAKER_PIECE_S * 16000;
    let sent = 0, last = null;
    for (let start = 0; start < samples.length && sent < SPEAKER_PIECES; start += step) {
      const piece = samples.subarray(start, start + step);
      if (piece.length < SPEAKER_MIN_S * 16000) break;
      last = await api(`/api/devices/${encodeURIComponent(device)}/speakers/enrol`, {person, mulaw: mulawBase64(piece)});
      sent++;
      status.textContent = `${sent} piece(s) sent…`;
    }
    status.textContent = last ? `Voiceprint of ${last.person}: ${last.samples} recording(s).` : "The recording is shorter than 1 s.";
  } catch (err) { status.textContent = err.message; }
  loadSpeakers();
}

async function deleteSpeaker(device, person) {
  if (!window.confirm(`Delete the voiceprint of ${person} on ${device}?`)) return;
  try { await api(`/api/devices/${encodeURIComponent(device)}/speakers/delete`, {person}); }
  catch (err) { $("speaker-status").textContent = err.message; }
  loadSpeakers();
}

async function loadSpeakers() {
  const section = $("speakers-section");
  let data;
  try { data = await api("/api/speakers"); } catch (err) {
    section.replaceChildren(el("p", {class: "error"}, err.message));
    return;
  }
  const rows = data.speakers.map((s) => el("tr", {"data-device": s.device_id, "data-person": s.person},
    el("td", {}, el("code", {}, s.device_id)), el("td", {}, s.person), el("td", {}, s.samples),
    el("td", {}, new Date(s.at * 1000).toLocaleString()), el("td", {}, s.profile || "—"),
    el("td", {}, el("button", {type: "button", class: "speaker-delete", onclick: () => deleteSpeaker(s.device_id, s.person)}, "Delete"))));
  if (!rows.length) rows.push(el("tr", {}, el("td", {colspan: 6, class: "muted"}, "No voiceprints.")));
  section.replaceChildren(
    el("h2", {}, "Speakers"),
    el("p", {class: "muted"}, data.enabled ? `Voices recognised at cosine ${data.threshold} or more; an unknown voice gets the device's profile and household memory.`
      : "speakers.enabled is false: voices are not identified."),
    el("table", {id: "speakers-table"},
      el("thead", {}, el("tr", {}, el("th", {}, "Device"), el("th", {}, "Person"), el("th", {}, "Recordings"),
        el("th", {}, "Updated"), el("th", {}, "Profile"), el("th", {}, ""))),
      el("tbody", {}, rows)),
    el("form", {id: "speaker-enrol", class: "toolbar", onsubmit: enrolSpeaker},
      el("input", {id: "speaker-device", placeholder: "device id", size: 17, value: (typeof memoryState !== "undefined" && memoryState.device) || ""}),
      el("input", {id: "speaker-name", placeholder: "name", maxlength: 40, size: 10}),
      el("input", {id: "speaker-file", type: "file", accept: "audio/*"}),
      el("button", {type: "submit", class: "primary"}, "Enrol voice")),
    el("p", {id: "speaker-status", class: "muted"}, ""));
}

$("tab-memory").addEventListener("click", loadSpeakers);
