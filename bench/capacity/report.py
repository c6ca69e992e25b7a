"""Turns the load generators' records into the figures bench/bench_capacity.py prints."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import numpy as np

FRAME_S = 0.060
MB = 2**20
LATE_SENDS_MS = 30.0
"""Generator send lateness p99 above this: the devices did not stream in real time (overloaded machine)."""


def late_frames(frames: list[float]) -> int:
    """Frames that arrive after a device playing one 60 ms frame at a time needs them.

    Playback starts when the first frame arrives; each later frame is due when the previous
    one has finished playing. A late frame leaves a gap (the device plays silence), and
    playback resumes from its arrival.
    """
    late = 0
    end = None
    for arrival in frames:
        if end is not None and arrival > end:
            late += 1
        end = (arrival if end is None else max(end, arrival)) + FRAME_S
    return late


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(
    n: int, turns: int, generators: int, window: dict[str, Any], results: list[dict[str, Any]]
) -> dict[str, Any]:
    records = [r for result in results for r in result["records"]]
    ok = [r for r in records if not r["failed"]]
    latencies = [r["first_audio"] - r["last_speech_sent"] for r in ok]
    by_turn: dict[int, list[float]] = {}
    for r in ok:
        by_turn.setdefault(int(r["turn"]) + 1, []).append(r["first_audio"] - r["last_speech_sent"])
    gaps = [b - a for r in ok for a, b in zip(r["frames"], r["frames"][1:])]
    reply_frames = sum(len(r["frames"]) for r in ok)
    late = sum(late_frames(r["frames"]) for r in ok)
    lateness = [x for result in results for x in result["lateness"]]
    frames_sent = len(lateness)
    wall = max(1e-9, window["end"] - window["start"])
    reasons = Counter(str(r["failed"]) for r in records if r["failed"])
    starts_late = [r.get("start_late", 0.0) for r in records]
    rss_per_session = (window["rss_peak"] - window["rss_idle"]) / n
    return {
        "n": n,
        "turns_per_device": turns,
        "generators": generators,
        "server": {
            "cpu_ms_per_session_frame": 1000 * window["cpu_s"] / frames_sent if frames_sent else None,
            "cores": window["cpu_s"] / wall,
            "cpu_s": window["cpu_s"],
            "window_s": wall,
            "runqueue_wait_s": window["runqueue_wait_s"],
            "processes": window["processes"],
            "rss_idle_mb": window["rss_idle"] / MB,
            "rss_peak_mb": window["rss_peak"] / MB,
            "rss_per_session_mb": rss_per_session / MB,
            "pss_idle_mb": window["pss_idle"] / MB,
            "pss_loaded_mb": window["pss_loaded"] / MB,
        },
        "latency_ms": {
            "p50": _ms(_pct(latencies, 50)),
            "p95": _ms(_pct(latencies, 95)),
            "max": _ms(max(latencies) if latencies else None),
            "count": len(latencies),
            "all": [_ms(x) for x in latencies],
            # The first turns of devices that connect together end together: turn 1
            # carries the connection burst, later turns are spread out.
            "by_turn": {
                turn: {"p50": _ms(_pct(values, 50)), "p95": _ms(_pct(values, 95))}
                for turn, values in sorted(by_turn.items())
            },
        },
        "downlink": {
            "gap_p99_ms": _ms(_pct(gaps, 99)),
            "frames": reply_frames,
            "late": late,
            "late_pct": 100 * late / reply_frames if reply_frames else 0.0,
        },
        "turns": {
            "total": len(records),
            "failed": len(records) - len(ok),
            "reasons": dict(reasons),
            # Burst shape: turns that missed their slot by over a second (the previous reply ran long).
            "started_late": sum(1 for x in starts_late if x > 1.0),
        },
        "generator": {
            "send_lateness_p99_ms": _ms(_pct(lateness, 99)),
            "send_lateness_max_ms": _ms(max(lateness) if lateness else None),
            "frames_sent": frames_sent,
            "cpu_s": sum(r["cpu_s"] for r in results),
            "stray_frames": sum(r["stray_frames"] for r in results),
        },
    }


STAGES = ("asr_final", "agent_start", "llm_first_token", "tts_first_audio", "first_frame_sent")
"""The server's latency marks of a spoken turn after `speech_end`, in order."""


def server_stages(marks: list[dict[str, float]]) -> dict[str, dict[str, float | None]]:
    """p50/p95 ms of each stage (from the mark before it) and of the whole server part of a turn
    (`speech_end` → `first_frame_sent`), from the server log's per-turn latency marks."""
    stages: dict[str, dict[str, float | None]] = {}
    previous = "speech_end"
    for stage in STAGES:
        values = [m[stage] - m[previous] for m in marks if stage in m and previous in m]
        stages[stage] = {"p50": _pct(values, 50), "p95": _pct(values, 95)}
        previous = stage
    whole = [m["first_frame_sent"] for m in marks if "first_frame_sent" in m]
    stages["speech_end_to_first_frame_sent"] = {"p50": _pct(whole, 50), "p95": _pct(whole, 95)}
    return stages


MARKS = ("asr_final", "llm_first_token", "first_frame_sent")
"""The server marks printed as ms after `speech_end` (the VAD's decision that the speech ended)."""


def server_marks(marks: list[dict[str, float]]) -> dict[str, dict[str, float | None]]:
    """p50/p95 ms of each of MARKS after `speech_end`, from the server log's per-turn latency marks."""
    out: dict[str, dict[str, float | None]] = {}
    for mark in MARKS:
        values = [m[mark] - m["speech_end"] for m in marks if mark in m and "speech_end" in m]
        out[mark] = {"p50": _pct(values, 50), "p95": _pct(values, 95)}
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def format_or_dash(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


_f = format_or_dash


def print_summary(s: dict[str, Any]) -> None:
    server, lat, down, turns, gen = s["server"], s["latency_ms"], s["downlink"], s["turns"], s["generator"]
    workers = f", {s['workers']} workers" if s.get("workers") else ""
    machine = s.get("machine") or {}
    loaded = ""
    if machine:
        loaded = f"; machine: {machine.get('cpu', '?')}, {machine['cores']} cores, load average " + (
            f"{machine['load_average_before']:.1f} before, {machine['load_average_after']:.1f} after"
            if "load_average_after" in machine
            else f"{machine['load_average_before']:.1f} before"
        )
        if "steal_pct" in machine:
            loaded += (
                f", host CPU {machine['busy_pct']:.0f} % busy and {machine['steal_pct']:.1f} % stolen by the hypervisor"
            )
    shape = f"{s['shape']}, " if s.get("shape") else ""
    memory = f"memory {s['memory']}, " if s.get("memory") else ""
    memory += f"{s['providers']} providers, " if s.get("providers") else ""
    memory += f"room {s['noise_dbfs']:g} dBFS, " if s.get("noise_dbfs") is not None else ""
    memory += f"{' '.join(s['settings'])}, " if s.get("settings") else ""
    print(
        f"N={s['n']:<4d} ({shape}{memory}{s['turns_per_device']} turns each, {s['generators']} generator process(es)"
        f"{workers}{loaded})"
    )
    floor = s.get("floor")
    versus = ""
    if floor and server.get("cpu_per_frame_vs_floor") is not None:
        versus = (
            f" = {server['cpu_per_frame_vs_floor']:.2f}x the floor of {floor['ms_per_frame']:.3f} ms "
            f"(Opus decode {floor['opus_decode_ms']:.3f} + Silero {floor['silero_ms']:.3f}, one thread)"
        )
    during = s.get("floor_during")
    if during and server.get("cpu_per_frame_vs_floor_during") is not None:
        versus += (
            f"; {server['cpu_per_frame_vs_floor_during']:.2f}x the floor during the load, "
            f"{during['ms_per_frame']:.3f} ms ({during['min']:.3f}-{during['max']:.3f} over {during['probes']} probes)"
        )
    print(
        f"  server   cpu/frame {_f(server['cpu_ms_per_session_frame'], '.3f')} ms per session per 60 ms frame{versus}, "
        f"cores {server['cores']:.2f} ({server['cpu_s']:.1f} s CPU over {server['window_s']:.1f} s; "
        f"its threads waited {server['runqueue_wait_s']:.1f} s runnable for a free CPU)"
    )
    if server.get("cpu_ms_per_frame_by_thread"):
        print(
            "           by thread (ms per session per frame): "
            + ", ".join(f"{name} {ms:.3f}" for name, ms in server["cpu_ms_per_frame_by_thread"].items())
        )
    print(
        f"           RSS idle {server['rss_idle_mb']:.0f} MB, peak {server['rss_peak_mb']:.0f} MB, "
        f"{server['rss_per_session_mb']:.2f} MB per session ({server['processes']} process(es)); "
        f"PSS idle {server['pss_idle_mb']:.0f} MB, with sessions open {server['pss_loaded_mb']:.0f} MB"
    )
    print(
        f"  latency  p50 {_f(lat['p50'])} ms, p95 {_f(lat['p95'])} ms, max {_f(lat['max'])} ms "
        f"({lat['count']} turns; last speech frame sent -> first answer audio)"
    )
    if len(lat.get("by_turn") or {}) > 1:
        print(
            "           by turn: "
            + ", ".join(f"{turn}: {_f(v['p50'])} / {_f(v['p95'])} ms" for turn, v in lat["by_turn"].items())
        )
    stages = s.get("server_stages_ms")
    if stages:
        whole = stages["speech_end_to_first_frame_sent"]
        marks = s.get("server_marks_ms") or {}
        if marks:
            print(
                "           server marks after speech end (p50 / p95 ms): "
                + ", ".join(f"{name} {_f(v['p50'])} / {_f(v['p95'])}" for name, v in marks.items())
            )
        print(
            f"           server: speech end -> first frame sent {_f(whole['p50'])} / {_f(whole['p95'])} ms (p50 / p95; "
            + ", ".join(f"+{name} {_f(stages[name]['p50'])} / {_f(stages[name]['p95'])}" for name in STAGES)
            + ")"
        )
    print(
        f"  downlink gap p99 {_f(down['gap_p99_ms'])} ms, late frames {down['late']} of {down['frames']} "
        f"({down['late_pct']:.2f} %)"
    )
    failed = f"{turns['failed']} of {turns['total']}"
    if turns.get("started_late"):
        failed += f" ({turns['started_late']} turn(s) missed their burst slot by over 1 s)"
    if turns["reasons"]:
        failed += " — " + "; ".join(f"{count}× {why}" for why, count in turns["reasons"].items())
    print(f"  failed   {failed}")
    if s.get("server_log"):
        print(f"  server log: {s['server_log']['warnings']} warning(s), {s['server_log']['errors']} error(s)")
    print(
        f"  generator send lateness p99 {_f(gen['send_lateness_p99_ms'], '.1f')} ms, "
        f"max {_f(gen['send_lateness_max_ms'], '.1f')} ms, {gen['cpu_s']:.1f} s CPU"
        + (f"; fakes {s['fakes_cpu_s']:.1f} s CPU" if "fakes_cpu_s" in s else "")
        + (f", {gen['stray_frames']} audio frames outside a reply" if gen["stray_frames"] else "")
    )
    if (gen["send_lateness_p99_ms"] or 0) > LATE_SENDS_MS:
        print(
            f"  WARNING: the generator sent 1 % of its frames more than {LATE_SENDS_MS:.0f} ms late: the load was "
            "not real time (machine overloaded? try --generators)"
        )
    sys.stdout.flush()


def print_ratios(summaries: list[dict[str, Any]]) -> None:
    base = next((s for s in summaries if s["n"] == 1), None)
    if base is None or not base["latency_ms"]["p95"]:
        return
    print(f"baseline: N=1 p95 {base['latency_ms']['p95']:.0f} ms")
    for s in summaries:
        if s["n"] != 1 and s["latency_ms"]["p95"] is not None:
            print(f"  N={s['n']:<4d} p95 / N=1 p95 = {s['latency_ms']['p95'] / base['latency_ms']['p95']:.2f}")


def print_table(summaries: list[dict[str, Any]]) -> None:
    """One line per load, every figure beside the floor and the machine's load it was measured with;
    p95 ÷ N=1 against the N=1 run of the same shape, memory setting and provider pair."""
    if not summaries:
        return
    machine = summaries[0].get("machine") or {}
    print(
        f"\nsummary (CPU: {machine.get('cpu', '?')}, {machine.get('cores', '?')} cores; Python: "
        f"{machine.get('python', '?')}; floor = Opus decode + "
        "Silero VAD per 60 ms frame, one thread, this run, measured before the load / during it (median of the "
        "probes); load = 1-min load average before / after; steal = % of the host's CPU time the hypervisor gave to "
        "other VMs during the load)"
    )
    print(
        "| shape | memory | providers | N | p50 / p95 ms | p95 ÷ N=1 | late frames | CPU ms/session/frame | ÷ floor "
        "(before / during) | floor ms (before / during) | asr_final / llm_first_token / first_frame_sent p95 ms | load "
        "| steal |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        base = next(
            (
                b
                for b in summaries
                if b["n"] == 1
                and b.get("shape") == s.get("shape")
                and b.get("memory") == s.get("memory")
                and b.get("providers") == s.get("providers")
            ),
            None,
        )
        p95, lat = s["latency_ms"]["p95"], s["latency_ms"]
        ratio = p95 / base["latency_ms"]["p95"] if base and p95 and base["latency_ms"]["p95"] else None
        server, floor, m = s["server"], s.get("floor") or {}, s.get("machine") or {}
        marks = s.get("server_marks_ms") or {}
        mark_text = " / ".join(_f((marks.get(name) or {}).get("p95")) for name in MARKS)
        print(
            f"| {s.get('shape', '-')} | {s.get('memory', '-')} | {s.get('providers', '-')} | {s['n']} | {_f(lat['p50'])} / {_f(p95)} | "
            f"{_f(ratio, '.2f')} | {s['downlink']['late']} | {_f(server['cpu_ms_per_session_frame'], '.3f')} | "
            f"{_f(server.get('cpu_per_frame_vs_floor'), '.2f')} / {_f(server.get('cpu_per_frame_vs_floor_during'), '.2f')} | "
            f"{_f(floor.get('ms_per_frame'), '.3f')} / {_f((s.get('floor_during') or {}).get('ms_per_frame'), '.3f')} | "
            f"{mark_text} | {m.get('load_average_before', 0):.1f} / {m.get('load_average_after', 0):.1f} | "
            f"{_f(m.get('steal_pct'), '.1f')} % |"
        )
    sys.stdout.flush()
