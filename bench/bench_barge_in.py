"""Barge-in on a single-microphone board that hears its own reply: today, then with server AEC.

Run: .venv/bin/python bench/bench_barge_in.py [--replies 200] [--barge-ins 200] [--echo-db -12]

Each reply is a trial of `vixio.testing.barge_in.Harness` (read its docstring: simulated board,
Piper replies in one voice and users in another, firmware-style v2 stamps and Opus uplink, vixio's
decoder, canceller, Silero VAD and interruption logic on the audio's clock). Five replies share a
board (one session: the canceller converges once). Rows:

- false interruptions: replies with no user that paused or stopped at least once (and events in all),
  and of those, replies the echo cancelled outright (today every stop cancels; paused ones resume);
- missed interruptions: user questions over a reply that did not stop it within 1.5 s, or that a
  reply had already stopped itself before (today's rule cancels the reply at its first echo); a
  question spoken into a reply its own echo had already paused, whose speech cancelled the reply
  within 1.5 s, is heard (it became the turn) and counted apart, with no latency (there was no
  `tts stop` after its onset);
- onset → `tts stop`: from the user's first voiced sample to the frame at which the server stops
  the reply (the pause); p50 / p95;
- ERLE: echo-only replies, from 2 s into each reply, microphone as decoded over canceller output;
- coughs, backchannels ("Okay.", "Uh-huh.", "Mm-hmm.", "Yeah.") and commands ("Stop.", "Wait.")
  over a reply (`--short N` trials of each): how many cancelled the reply (a cough or a
  backchannel must not; a command should, though it is shorter than `confirm_ms`);
- CPU: the canceller's thread CPU per 60 ms uplink frame over every frame fed (reply playing or
  not) and per frame it worked on (a reply playing or its 1 s tail), beside the in-run floor (the
  same run's Opus decode + Silero VAD per frame), on the CPU model printed.

- transcribed as (modes with `+ words`: held speech transcribed by the session's ASR, faster-whisper
  tiny.en, and judged by its words, `vad.barge_in_words`): per kind of trial, what the arbiter's
  last transcript of it was judged (command / new / echo / backchannel / unsure; "-": never
  transcribed: no pause, or a verdict before the first transcript), and the ASR's process CPU per
  transcription; the transcripts reach the arbiter `--asr-latency-ms` of audio after they are
  asked for (a model, so that the run is the same everywhere: vixio.testing.held_words);
- missed, by cause (`--why-missed`: every frame traced, the verdicts unchanged): echo cancelled /
  echo paused / no start / resumed / late (vixio.testing.barge_in_misses), each with the median
  dimming of the user by the canceller, the user's level over the echo's, and the VAD's peak
  probability.

Needs vixio[aec] and vixio[silero], and vixio[piper] for the short sounds (`--short 0` without it),
and vixio[whisper] for the `+ words` modes.
Not run by the tests (tests/bench/test_barge_in.py runs a small one).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vixio.providers.vad.silero_onnx import SileroOnnxVAD
from vixio.testing.barge_in import KINDS, Harness, Trial, Voices
from vixio.testing.barge_in_misses import CAUSES, spoke_into_pause, why_missed


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _share(hits: int, of: int) -> str:
    return f"{hits}/{of} ({100 * hits / max(of, 1):.1f} %)" if of else "-"


def summarise(
    name: str, harness: Harness, echo: list[Trial], barge: list[Trial], short: list[Trial] = ()
) -> dict[str, object]:  # type: ignore[assignment]
    false_replies = sum(1 for t in echo if t.false_events)
    events = sum(t.false_events for t in echo)
    cancelled = sum(1 for t in echo if t.false_cancels)
    late = [
        t
        for t in barge
        if t.stopped_s is not None
        and t.onset_s is not None
        and t.stopped_s - t.onset_s <= 1.5
        and t.confirmed
        and (harness.arbiter or t.false_events == 0)
    ]
    latencies = [1000 * (t.stopped_s - t.onset_s) for t in late]  # type: ignore[operator]
    into_pause = [t for t in barge if harness.arbiter and spoke_into_pause(t)]
    heard = len(late) + len(into_pause)
    erles = [t.erle_db for t in echo if t.erle_db is not None]
    c = harness.costs
    verdicts = {}
    for kind in KINDS:
        told: dict[str, int] = {}
        for t in (*echo, *barge, *short):
            if t.kind == kind:
                last = t.heard[-1][1] if t.heard else "-"
                told[last] = told.get(last, 0) + 1
        verdicts[kind] = ", ".join(f"{k} {n}" for k, n in sorted(told.items(), key=lambda kv: -kv[1]))
    texts: dict[str, dict[str, int]] = {}
    for t in (*echo, *barge, *short):
        if t.heard:
            said = f"{t.heard[-1][0]!r} ({t.heard[-1][1]})"
            texts.setdefault(t.kind, {})[said] = texts.setdefault(t.kind, {}).get(said, 0) + 1
    cancelled_by = {kind: [t for t in short if t.kind == kind] for kind in ("cough", "backchannel", "command")}
    return {
        "cough": _share(
            sum(1 for t in cancelled_by["cough"] if t.confirmed or t.false_cancels), len(cancelled_by["cough"])
        ),
        "backchannel": _share(
            sum(1 for t in cancelled_by["backchannel"] if t.confirmed or t.false_cancels),
            len(cancelled_by["backchannel"]),
        ),
        "command": _share(
            sum(
                1
                for t in cancelled_by["command"]
                if t.confirmed and t.stopped_s is not None and t.stopped_s - t.onset_s <= 1.5
            ),
            len(cancelled_by["command"]),
        ),  # type: ignore[operator]
        "mode": name,
        "examples": {k: sorted(v.items(), key=lambda kv: -kv[1])[:6] for k, v in texts.items()},
        "heard": (
            "; ".join(f"{kind}: {v}" for kind, v in verdicts.items() if v)
            + f" (ASR {1000 * c.asr_s / c.asr_calls:.0f} ms CPU per transcription, {c.asr_calls} of them)"
            if harness.asr is not None and c.asr_calls
            else "-"
        ),
        "false": f"{false_replies}/{len(echo)} replies ({100 * false_replies / max(len(echo), 1):.1f} %), {events} events",
        "cancelled": f"{cancelled}/{len(echo)} replies ({100 * cancelled / max(len(echo), 1):.1f} %)",
        "missed": f"{len(barge) - heard}/{len(barge)} ({100 * (len(barge) - heard) / max(len(barge), 1):.1f} %)"
        + (f"; of the heard, {len(into_pause)} spoke into a reply its echo had paused" if into_pause else ""),
        "onset_to_stop": f"{pct(latencies, 50):.0f} / {pct(latencies, 95):.0f} ms",
        "erle": f"{statistics.median(erles):.1f} dB median, {pct(erles, 10):.1f} dB p10"
        if harness.aec and erles
        else "-",
        "cpu": (
            f"{1000 * c.aec_s / max(c.frames, 1):.3f} ms per frame fed"
            + (
                f", {1000 * c.aec_s / c.aec_frames:.3f} ms per frame cancelled "
                f"({100 * c.aec_frames / max(c.frames, 1):.0f} % of frames)"
                if c.aec_frames
                else ""
            )
            + f"; floor {1000 * (c.decode_s + c.vad_s) / max(c.frames, 1):.3f} ms per frame"
        ),
    }


def run(
    vad: SileroOnnxVAD,
    voices: Voices,
    aec: bool,
    replies: int,
    barge_ins: int,
    echo_db: float,
    pause_ms: int = 250,
    arbiter: bool | None = None,
    shorts: int = 0,
    confirm_ms: int = 600,
    board_stops: bool = False,
    asr: object = None,
    asr_latency_ms: int = 800,
    trace: bool = False,
    doubletalk: bool = False,
) -> dict[str, object]:
    arbiter = aec if arbiter is None else arbiter
    harness = Harness(
        vad,
        voices,
        aec=aec,
        aec_doubletalk=doubletalk,
        arbiter=arbiter,
        echo_gain_db=echo_db,
        pause_min_speech_ms=pause_ms,
        confirm_ms=confirm_ms,
        board_stops=board_stops,
        asr=asr,  # type: ignore[arg-type]
        asr_latency_ms=asr_latency_ms,
        trace=trace,
    )
    # Echo-only and barge-in replies alternate on the same boards, as a session has both.
    echo, barge = [], []
    for i in range(max(replies, barge_ins) * 2):
        if i % 2 == 0 and len(echo) < replies:
            echo.append(harness.trial(i, barge_in=False))
        elif i % 2 == 1 and len(barge) < barge_ins:
            barge.append(harness.trial(i, barge_in=True))
    short = [harness.trial(100_000 + i, kind=("cough", "backchannel", "command")[i % 3]) for i in range(3 * shorts)]
    name = (
        "server AEC + pause/resume"
        if aec
        else "no AEC, pause/resume"
        if arbiter
        else "today (no AEC, VAD start = barge-in)"
    )
    name += " + per-band double-talk" if doubletalk else ""
    row = summarise(name + (" + words" if asr is not None else ""), harness, echo, barge, short)
    row["why"] = _why(barge) if trace else "-"
    return row


def _why(barge: list[Trial]) -> str:
    """The missed questions by cause (`barge_in_misses`), with the median dimming and the user's
    level over the echo's on the user's frames, and the VAD's median peak probability."""
    misses = [(i, m) for i, m in ((i, why_missed(t)) for i, t in enumerate(barge)) if m is not None]
    parts = []
    for cause in CAUSES:
        of = [m for _, m in misses if m.cause == cause]
        if of:
            parts.append(
                f"{cause} {len(of)} (dimmed {statistics.median(m.dimmed_db for m in of):.1f} dB, "
                f"user/echo {statistics.median(m.user_over_echo_db for m in of):+.1f} dB, "
                f"VAD peak {statistics.median(m.max_vad for m in of):.2f}"
                + _cancelled([m.cancelled_ms for m in of if m.cancelled_ms is not None], cause)
                + ")"
            )
    return "; ".join(parts) or "none missed"


def _cancelled(after_ms: list[float], cause: str) -> str:
    """For `echo paused`: how many of those the user's speech then cancelled, and how soon."""
    if cause != "echo paused":
        return ""
    if not after_ms:
        return "; none cancelled by the user's speech"
    return (
        f"; {len(after_ms)} cancelled by the user's speech {min(after_ms):.0f}–{max(after_ms):.0f} ms after its onset"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=200)
    parser.add_argument("--barge-ins", type=int, default=200)
    parser.add_argument("--echo-db", type=float, default=-12.0)
    parser.add_argument(
        "--pause-min-speech-ms",
        type=int,
        default=250,
        help="VAD min_speech_ms with AEC + pause/resume (today's rule keeps 250)",
    )
    parser.add_argument("--short", type=int, default=50, help="trials each of a cough, a backchannel, a command")
    parser.add_argument("--confirm-ms", type=int, default=600, help="vad.barge_in_confirm_ms")
    parser.add_argument(
        "--board-stops",
        action="store_true",
        help="the board stops playing at tts stop (and plays the rest at tts start)",
    )
    parser.add_argument(
        "--modes",
        default="today,pause,aec,aec-words",
        help="which of today,pause,pause-words,aec,aec-words,aec-words-dt to run (-words: held speech "
        "transcribed; -dt: the canceller's per-band double-talk detector, doubletalk.py)",
    )
    parser.add_argument("--why-missed", action="store_true", help="trace every frame and sort the misses by cause")
    parser.add_argument("--asr-latency-ms", type=int, default=800, help="modelled transcription latency")
    parser.add_argument("--asr-model", default="tiny.en", help="faster-whisper model for the + words modes")
    parser.add_argument("--asr-language", default="en", help="its language (zh: the replies' language)")
    args = parser.parse_args()
    vad, voices = SileroOnnxVAD(16000), Voices.from_fixtures(short=args.short > 0)
    print(
        f"CPU: {cpu_model()}; replies {args.replies}, barge-ins {args.barge_ins}, {args.short} each of "
        f"cough/backchannel/command, echo {args.echo_db} dB, board stops at tts stop: {args.board_stops}; ASR {args.asr_model}/{args.asr_language}, latency (modelled) {args.asr_latency_ms} ms; load average {os.getloadavg()[0]:.1f}"
    )
    started = time.perf_counter()
    asr = None
    if "words" in args.modes:
        import asyncio

        from vixio.providers.asr.faster_whisper import FasterWhisperASR

        asr = FasterWhisperASR(args.asr_model, language=args.asr_language)
        asyncio.run(asr.initialize())
    modes = {
        "today": (False, False, False, False),
        "pause": (False, True, False, False),
        "pause-words": (False, True, True, False),
        "aec": (True, True, False, False),
        "aec-words": (True, True, True, False),
        "aec-words-dt": (True, True, True, True),
    }
    rows = [
        run(
            vad,
            voices,
            aec,
            args.replies,
            args.barge_ins,
            args.echo_db,
            args.pause_min_speech_ms,
            arbiter,
            args.short,
            args.confirm_ms,
            args.board_stops,
            asr if words else None,
            args.asr_latency_ms,
            args.why_missed,
            doubletalk,
        )
        for name, (aec, arbiter, words, doubletalk) in modes.items()
        if name in args.modes.split(",")
    ]
    print("| measured | " + " | ".join(str(r["mode"]) for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for key, label in (
        ("false", "false interruptions heard (echo only: the reply paused/stopped)"),
        ("cancelled", "replies cancelled by echo"),
        ("missed", "missed interruptions"),
        ("onset_to_stop", "onset → tts stop p50 / p95"),
        ("erle", "ERLE after 2 s"),
        ("cough", "coughs that cancelled the reply"),
        ("backchannel", "backchannels that cancelled the reply"),
        ("command", "commands that stopped the reply within 1.5 s"),
        ("cpu", "CPU per 60 ms uplink frame added (in-run floor)"),
        ("heard", "transcribed as (the last transcript of each trial's held speech)"),
        ("why", "missed, by cause (--why-missed: vixio.testing.barge_in_misses)"),
    ):
        print(f"| {label} | " + " | ".join(str(r[key]) for r in rows) + " |")
    for r in rows:
        for kind, seen in r["examples"].items():  # type: ignore[attr-defined]
            print(f"{r['mode']}, {kind}: " + ", ".join(f"{said} ×{n}" for said, n in seen))
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
