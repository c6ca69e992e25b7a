"""Local TTS costs: voice load, time to first audio, real-time factor.

Run: .venv/bin/python bench/bench_tts.py [--runs 7] [--engines piper espeak]

For each engine: the one-time load (library/voice plus warm-up, measured on the first
`initialize()` of the process), then `--runs` syntheses of a ~10-word sentence and of a
three-sentence reply through the provider's public async API, as a session would call it.
"Time to first audio" is from calling `synthesize` to receiving the first PCM chunk;
the real-time factor is total synthesis time divided by the audio's duration (below 1 is
faster than real time). Figures are medians; the sentence runs one at a time, so the pool
and the CPU are not shared with other sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from vixio.providers.tts import EspeakTTS, PiperTTS, TTSProvider

SENTENCE = "Please turn on the kitchen lights and set the volume to fifty."
REPLY = "Sure, the kitchen lights are on. I set the volume to fifty. Anything else I can do for you?"
MANDARIN = "好的，厨房的灯已经打开了。音量设置为五十。"

ENGINES: dict[str, list[tuple[str, Callable[[], TTSProvider], str]]] = {
    "piper": [("piper en", PiperTTS, SENTENCE), ("piper en reply", PiperTTS, REPLY)],
    "espeak": [
        ("espeak en-us", lambda: EspeakTTS("en-us"), SENTENCE),
        ("espeak en-us reply", lambda: EspeakTTS("en-us"), REPLY),
        ("espeak cmn", lambda: EspeakTTS("cmn"), MANDARIN),
    ],
}


@dataclass(slots=True)
class Run:
    """One synthesis: seconds to the first chunk, seconds in total, seconds of audio."""

    first: float
    total: float
    audio: float


async def synthesize_once(tts: TTSProvider, text: str) -> Run:
    """Synthesise `text` fully and time it."""
    started = time.perf_counter()
    first: float | None = None
    size = 0
    async for chunk in tts.synthesize(text):
        if first is None:
            first = time.perf_counter() - started
        size += len(chunk)
    total = time.perf_counter() - started
    return Run(first=first or total, total=total, audio=size / 2 / tts.sample_rate)


async def bench(engines: list[str], runs: int) -> None:
    """Print one table row per case."""
    print(f"{'case':<20} {'load s':>7} {'chars':>5} {'audio s':>8} {'first ms':>9} {'total ms':>9} {'RTF':>6}")
    for engine in engines:
        for case, make, text in ENGINES[engine]:
            tts = make()
            started = time.perf_counter()
            await tts.initialize()  # the first case of an engine pays the process-wide load
            load = time.perf_counter() - started
            results = [await synthesize_once(tts, text) for _ in range(runs)]
            first = statistics.median(r.first for r in results)
            total = statistics.median(r.total for r in results)
            audio = statistics.median(r.audio for r in results)
            print(
                f"{case:<20} {load:>7.2f} {len(text):>5} {audio:>8.2f} {first * 1000:>9.1f} "
                f"{total * 1000:>9.1f} {total / audio:>6.3f}"
            )
            await tts.close()


def main() -> None:
    """Parse arguments and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="syntheses per case (default 7)")
    parser.add_argument("--engines", nargs="+", choices=sorted(ENGINES), default=["piper", "espeak"])
    args = parser.parse_args()
    logger.remove()  # the table is the output
    asyncio.run(bench(args.engines, args.runs))


if __name__ == "__main__":
    main()
