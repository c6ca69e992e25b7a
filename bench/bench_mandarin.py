"""Mandarin: Whisper base's character error rate, and streamed vs whole-sentence TTS first audio.

Run: .venv/bin/python bench/bench_mandarin.py [--skip-asr] [--skip-tts] [--delay 0.1]

1. ASR: `FasterWhisperASR(model="base", language="zh")` (int8, 2 threads) on the Mandarin
   fixtures in tests/fixtures/speech_zh/ — espeak-ng `cmn` speech made by
   scripts/make_mandarin_fixtures.py, the only offline Mandarin voice pip installs here.
   CER = character edit distance / reference length, punctuation and spaces removed, no
   traditional→simplified folding (Whisper often writes traditional characters: that counts
   as an error here, as it would on the device's screen).
2. TTS: a local server that sends 100 ms of audio every `--delay` s (a service synthesising at
   about real time). First audio = when the provider yields its first PCM; "whole sentence" =
   when the last byte arrived, i.e. what a client that waits for the full body gets. For an
   OpenAI-compatible PCM stream and for Edge (MP3 decoded as it streams).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
import wave
from pathlib import Path

from loguru import logger

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "speech_zh"
SENTENCE = "你好，我是小智，今天有什么可以帮你的吗？"
_DROP = re.compile(r"[\s\W_]+", re.UNICODE)


def edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


async def bench_asr() -> None:
    from vixio.providers.asr.faster_whisper import FasterWhisperASR

    asr = FasterWhisperASR(model="base", language="zh", cpu_threads=2)
    started = time.perf_counter()
    await asr.initialize()
    print(f"Whisper base load: {time.perf_counter() - started:.1f} s")
    manifest = json.loads((FIXTURES / "manifest.json").read_text(encoding="utf-8"))
    errors = chars = 0
    seconds, audio = [], 0.0
    for name, entry in manifest.items():
        with wave.open(str(FIXTURES / name), "rb") as wav:
            pcm = wav.readframes(wav.getnframes())
        started = time.perf_counter()
        text = await asr.transcribe(pcm, 16000, language="zh")
        seconds.append(time.perf_counter() - started)
        audio += len(pcm) / 2 / 16000
        reference, hypothesis = _DROP.sub("", entry["text"]), _DROP.sub("", text)
        distance = edit_distance(reference, hypothesis)
        errors, chars = errors + distance, chars + len(reference)
        print(f"  {entry['text']:<16} → {text!r:<28} CER {distance / len(reference):.0%}")
    print(
        f"Whisper base on {len(manifest)} espeak-ng cmn utterances: CER {errors / chars:.0%} "
        f"({errors}/{chars} characters), median {statistics.median(seconds):.2f} s per utterance, "
        f"RTF {sum(seconds) / audio:.2f}"
    )


async def first_and_last(tts: object, text: str) -> tuple[float, float]:
    started = time.perf_counter()
    first = last = 0.0
    async for _ in tts.synthesize(text):  # type: ignore[attr-defined]
        first = first or time.perf_counter() - started
        last = time.perf_counter() - started
    return first, last


async def bench_tts(delay: float, runs: int) -> None:
    from vixio.providers.tts.edge import EdgeTTS
    from vixio.providers.tts.openai_compatible import OpenAICompatibleTTS
    from vixio.testing.speech_servers import EdgeSpeechServer, SlowSpeechServer

    async with SlowSpeechServer(chunk_delay=delay) as pcm_server, EdgeSpeechServer(chunk_delay=delay) as edge_server:
        providers = {
            "openai-compatible pcm": OpenAICompatibleTTS(pcm_server.base_url, response_format="pcm"),
            "edge (mp3)": EdgeTTS(service_url=edge_server.url),
        }
        for name, tts in providers.items():
            await first_and_last(tts, "你好。")  # warm-up: imports, connection pool
            results = [await first_and_last(tts, SENTENCE) for _ in range(runs)]
            first = statistics.median(r[0] for r in results)
            last = statistics.median(r[1] for r in results)
            print(
                f"{name:<22} {len(SENTENCE)} characters (3.0 s of audio): first audio {first * 1000:.0f} ms "
                f"streamed vs {last * 1000:.0f} ms whole-sentence ({last / first:.0f}x)"
            )
            await tts.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-asr", action="store_true")
    parser.add_argument("--skip-tts", action="store_true")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds between 100 ms pieces of audio")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    if not args.skip_asr:
        asyncio.run(bench_asr())
    if not args.skip_tts:
        asyncio.run(bench_tts(args.delay, args.runs))


if __name__ == "__main__":
    main()
