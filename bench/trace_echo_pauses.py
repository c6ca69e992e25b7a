"""Trace every echo-only reply that paused on its own echo, frame by frame (docs/barge-in.md,
"Why echo-only replies pause").

Run: .venv/bin/python bench/trace_echo_pauses.py [--replies 100] [--words] [--board-stops]

The trials are `bench_barge_in.py`'s (same seeds: echo-only and barge-in replies alternating on
the same boards, five to a session), run through `vixio.testing.barge_in.Harness` with the
server's own `SessionEchoCanceller`, watched (not changed) per frame: the stamp, the stamps'
offset and its restarts (a new reply or a resumed burst), the estimator's delay and candidate,
whether it is reacquiring, whether a fresh AEC3 runs beside the old, the error of the alignment
AEC3 is fed against the echo's true position in the reference (from the simulated board: its
delay walk and what it played when; Opus adds ~6.5 ms the truth does not count), the microphone's
and the output's level and the VAD's events. For each reply that paused it prints the trials
of its session before it and the frames from 1 s before to 1 s after the pause.
Not run by the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vixio.testing.barge_in as barge_in
import vixio.transports.xiaozhi.aec.canceller as canceller_module
from vixio.providers.vad.silero_onnx import SileroOnnxVAD
from vixio.testing.echo_path import DelayWalk

RATE, FRAME = 16000, 960
FRAMES: list[dict[str, Any]] = []
BOARDS: list[barge_in.BoardPlayback] = []
PAUSES: list[float] = []
VAD: list[tuple[float, str]] = []


def _db(pcm: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(pcm.astype(np.float64) ** 2) + 1))


class WatchedCanceller(canceller_module.SessionEchoCanceller):
    def process(self, pcm: bytes, timestamp_ms: int) -> bytes:
        start, restarts = self._uplink, self.clock.restarts
        out = super().process(pcm, timestamp_ms)
        est = self.estimator
        FRAMES.append(
            {
                "start": start,
                "stamp": timestamp_ms,
                "restart": self.clock.restarts != restarts,
                "delay": est.delay,
                "candidate": est._candidate,
                "reacquiring": est.reacquiring,
                "align": self._align,
                "fresh_align": self._fresh_align if self._fresh is not None else None,
                "passed": out is pcm,
                "mic_db": _db(np.frombuffer(pcm, "<i2")),
                "out_db": _db(np.frombuffer(out, "<i2")),
            }
        )
        return out


class WatchedBoard(barge_in.BoardPlayback):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bursts = 1
        BOARDS.append(self)

    def act(self, actions: list[str], sent: int, k: int) -> bool:
        changed = super().act(actions, sent, k)
        self.bursts += changed
        return changed


class WatchedHarness(barge_in.Harness):
    def _decide(self, trial: barge_in.Trial, arbiter: Any, events: list[Any], now: float, *rest: Any) -> list[str]:
        before = trial.false_events
        actions = super()._decide(trial, arbiter, events, now, *rest)
        if trial.false_events > before:
            PAUSES.append(now)
        VAD.extend((now, event.type) for event in events)
        return actions


def _truth(
    board: barge_in.BoardPlayback, delays: np.ndarray, reference: Any, frame: dict[str, Any], k: int
) -> int | None:
    """Where in the reference the echo at the middle of uplink frame `k` truly comes from, minus
    the frame's uplink position (what the canceller's alignment should be)."""
    middle = min(k * FRAME + FRAME // 2, len(delays) - 1)
    source = middle - int(delays[middle])
    for at, stamp in board.played_at:
        if at - 80 <= source < at - 80 + FRAME:
            where = reference.where(stamp)
            return None if where is None else where + source - (at - 80) - (frame["start"] + FRAME // 2)
    return None


def _show(trial: dict[str, Any]) -> None:
    lead = barge_in.LEAD_S
    print(
        f"\n== seed {trial['seed']}: reply {trial['seed'] % 5 + 1} of session {trial['session']}, board delay "
        f"{trial['board_delay']:.0f} ms, paused at {[round(t - lead, 2) for t in trial['pauses']]} s, cancelled "
        f"{trial['cancels']}, ERLE {trial['erle']}, bursts {trial['bursts']}, heard {trial['heard']}"
    )
    print("   before it:", "; ".join(trial["before"]) or "-")
    print("   VAD:", [(round(t - lead, 2), kind) for t, kind in trial["vad"]])
    first = trial["pauses"][0]
    for k, f in enumerate(trial["frames"]):
        at = (k + 1) * FRAME / RATE
        if f["passed"] and not f["restart"] or abs(at - first) > 1.0 and not f["restart"]:
            continue
        err = None if f["truth"] is None or f["align"] is None else round((f["align"] - f["truth"]) / 16, 1)
        ferr = (
            None if f["truth"] is None or f["fresh_align"] is None else round((f["fresh_align"] - f["truth"]) / 16, 1)
        )
        flags = ("R" if f["reacquiring"] else " ") + ("F" if f["fresh_align"] is not None else " ")
        print(
            f"   {at - lead:6.2f} s stamp {f['stamp']:>9} delay {f['delay']} cand {f['candidate']} {flags}"
            f"{' restart' if f['restart'] else ''} align err {err} ms fresh {ferr} ms "
            f"mic {f['mic_db']:.0f} dB out {f['out_db']:.0f} dB ERLE {f['mic_db'] - f['out_db']:.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=100, help="echo-only replies (and as many barge-ins)")
    parser.add_argument("--words", action="store_true", help="judge held speech by its words (tiny.en)")
    parser.add_argument("--board-stops", action="store_true")
    args = parser.parse_args()
    canceller_module.SessionEchoCanceller = WatchedCanceller  # type: ignore[misc]
    barge_in.BoardPlayback = WatchedBoard  # type: ignore[misc]
    asr = None
    if args.words:
        from vixio.providers.asr.faster_whisper import FasterWhisperASR

        asr = FasterWhisperASR("tiny.en", language="en")
        asyncio.run(asr.initialize())
    harness = WatchedHarness(
        SileroOnnxVAD(16000),
        barge_in.Voices.from_fixtures(short=False),
        aec=True,
        arbiter=True,
        board_stops=args.board_stops,
        asr=asr,  # type: ignore[arg-type]
    )
    done: list[dict[str, Any]] = []
    for seed in range(2 * args.replies):
        FRAMES.clear()
        PAUSES.clear()
        VAD.clear()
        trial = harness.trial(seed, barge_in=seed % 2 == 1)
        board, session = BOARDS[-1], seed // harness.replies_per_session
        reference = harness._cancellers[session].reference
        delays = DelayWalk(board.path.delay_ms, board.path.jitter_ms, seed=board.path.seed).delays(board.total)
        for k, frame in enumerate(FRAMES):
            frame["truth"] = _truth(board, delays, reference, frame, k)
        done.append(
            {
                "seed": seed,
                "session": session,
                "kind": trial.kind,
                "board_delay": board.path.delay_ms,
                "pauses": list(PAUSES),
                "cancels": trial.false_cancels,
                "confirmed": trial.confirmed,
                "erle": None if trial.erle_db is None else round(trial.erle_db, 1),
                "bursts": board.bursts,
                "heard": trial.heard,
                "vad": list(VAD),
                "frames": list(FRAMES),
                "before": [
                    f"{d['seed']} {d['kind']} {'cut by its user' if d['confirmed'] else ''}"
                    f"{' paused' if d['pauses'] else ''}".strip()
                    for d in done
                    if d["session"] == session
                ],
            }
        )
        BOARDS.clear()
        if trial.kind == "echo" and PAUSES:
            _show(done[-1])
    paused = sum(1 for d in done if d["kind"] == "echo" and d["pauses"])
    print(f"\n{paused}/{args.replies} echo-only replies paused on their own echo")


if __name__ == "__main__":
    main()
