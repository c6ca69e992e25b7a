"""Speaker identification: equal error rate on real voices, CPU per utterance, latency it adds.

    python bench/bench_speaker.py            # needs: pip install --no-deps resemblyzer==0.1.4;
                                             # apt-get install klettres-data (the voices)

Voices: KLettres' recordings (Debian `klettres-data`, GPL-2+): letters and syllables read by a
native speaker for each of its languages, real people, recorded for children learning the
alphabet. Each language directory is taken as one speaker. Limits, said plainly: every speaker
speaks a different language (the model may separate languages as well as voices); the items are
short (0.3-1 s), so an "utterance" here is 6 random items of one speaker joined with 0.1 s gaps
(about 3-6 s); nothing says two directories are not the same person (that would only raise the
EER). No pip package was found that ships recordings of 10 or more speakers.

Protocol: per speaker, 3 enrolment utterances (their embeddings averaged, as `vixio speakers
enrol` does) and `--tests` held-out test utterances from items not used for enrolment; every test
utterance is scored (cosine) against every speaker's print. EER: where false accepts equal false
rejects. Identification accuracy: the best-scoring print is the right one and above the threshold.

Latency: the server identifies in a worker thread while ASR transcribes the same utterance
(vixio/stations/speakers.py). Added turn latency = (ASR and identification in parallel) - (ASR
alone), Whisper tiny.en on the fixtures, medians over repeats; the CPU model and the in-run floor
(Opus decode + Silero per 60 ms frame, bench/capacity/floor.py) are printed beside.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capacity.floor import cpu_model, measure_floor  # noqa: E402
from capacity.load import build_clips  # noqa: E402
from vixio.providers.speaker.encoder import SpeakerEncoder  # noqa: E402

VOICES = Path("/usr/share/klettres")
FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "speech"


def speakers(min_items: int) -> dict[str, list[Path]]:
    found = {}
    for folder in sorted(VOICES.iterdir()) if VOICES.is_dir() else []:
        items = sorted(folder.rglob("*.ogg"))
        if len(items) >= min_items:
            found[folder.name] = items
    return found


def read16k(path: Path) -> np.ndarray:
    import soxr

    audio, rate = sf.read(str(path), dtype="float32")
    audio = audio if audio.ndim == 1 else audio.mean(axis=1)
    return soxr.resample(audio, rate, 16000).astype(np.float32)


def utterance(items: list[Path]) -> np.ndarray:
    gap = np.zeros(1600, dtype=np.float32)
    return np.concatenate([part for item in items for part in (read16k(item), gap)])


def eer(targets: list[float], impostors: list[float]) -> tuple[float, float]:
    """(equal error rate, the threshold where false rejects and false accepts are closest)."""
    target, impostor = np.array(targets), np.array(impostors)
    best_gap, best = 2.0, (1.0, 0.0)
    for threshold in np.unique(np.concatenate([target, impostor])):
        false_reject, false_accept = float(np.mean(target < threshold)), float(np.mean(impostor >= threshold))
        if abs(false_reject - false_accept) < best_gap:
            best_gap, best = abs(false_reject - false_accept), ((false_reject + false_accept) / 2, float(threshold))
    return best


def measure_eer(encoder: SpeakerEncoder, tests: int, threshold: float, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    per_item = 6
    voices = speakers(min_items=per_item * (3 + tests))
    prints, trials, cpu = {}, [], []
    for name, items in voices.items():
        order = rng.permutation(len(items))
        chunks = [[items[i] for i in order[k * per_item : (k + 1) * per_item]] for k in range(3 + tests)]
        enrol = []
        for chunk in chunks[:3]:
            enrol.append(encoder.embed(utterance(chunk)))
        mean = np.mean(enrol, axis=0)
        prints[name] = mean / np.linalg.norm(mean)
        for chunk in chunks[3:]:
            audio = utterance(chunk)
            started = time.thread_time()
            vector = encoder.embed(audio)
            cpu.append((time.thread_time() - started) * 1000 / (len(audio) / 16000))
            trials.append((name, vector))
    targets, impostors, right, strangers_taken = [], [], 0, 0
    for name, vector in trials:
        scores = {other: float(vector @ emb) for other, emb in prints.items()}
        targets.append(scores[name])
        impostors += [score for other, score in scores.items() if other != name]
        best = max(scores, key=scores.__getitem__)
        right += best == name and scores[best] >= threshold
        # The same voice as a stranger: its own print left out, is it taken for someone enrolled?
        strangers_taken += max(score for other, score in scores.items() if other != name) >= threshold
    rate, at = eer(targets, impostors)
    return {
        "speakers": len(voices),
        "tests": len(trials),
        "eer": rate,
        "eer_threshold": at,
        "identified": right / max(1, len(trials)),
        "strangers_taken": strangers_taken / max(1, len(trials)),
        "false_reject": float(np.mean(np.array(targets) < threshold)),
        "cpu_ms_per_audio_s": statistics.median(cpu),
    }


def measure_latency(encoder: SpeakerEncoder, repeats: int) -> dict[str, float]:
    from vixio.providers.asr.faster_whisper import FasterWhisperASR

    asr = FasterWhisperASR("tiny.en")
    asyncio.run(asr.initialize())
    clips = []
    for path in sorted(FIXTURES.glob("*.wav")):
        audio, rate = sf.read(str(path), dtype="int16")
        if rate == 16000 and audio.ndim == 1:
            clips.append(audio)

    async def one(pcm: np.ndarray, with_speaker: bool) -> tuple[float, float]:
        started = time.perf_counter()
        identify = asyncio.ensure_future(asyncio.to_thread(encoder.embed, pcm)) if with_speaker else None
        await asr.transcribe(pcm.tobytes(), 16000, language="en")
        asr_done = time.perf_counter()
        if identify is not None:
            await identify
        return asr_done - started, time.perf_counter() - started

    async def run() -> dict[str, float]:
        alone, together, asr_in_parallel, embed_cpu = [], [], [], []
        for _ in range(repeats):
            for pcm in clips:
                alone.append((await one(pcm, False))[1])
                asr_s, total = await one(pcm, True)
                together.append(total)
                asr_in_parallel.append(asr_s)
                started = time.thread_time()
                encoder.embed(pcm)
                embed_cpu.append(time.thread_time() - started)
        added = [b - a for a, b in zip(alone, together)]
        return {
            "asr_ms": statistics.median(alone) * 1000,
            "asr_with_speaker_ms": statistics.median(together) * 1000,
            "added_ms_median": statistics.median(added) * 1000,
            "added_ms_p90": float(np.percentile(added, 90)) * 1000,
            "speaker_after_asr_ms_p90": float(np.percentile([t - a for t, a in zip(together, asr_in_parallel)], 90))
            * 1000,
            "embed_cpu_ms_median": statistics.median(embed_cpu) * 1000,
            "clip_seconds": float(np.mean([len(c) / 16000 for c in clips])),
        }

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(asr.close())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=6, help="held-out test utterances per speaker")
    parser.add_argument("--repeats", type=int, default=5, help="latency repeats over the fixtures")
    parser.add_argument(
        "--threshold",
        type=float,
        nargs="+",
        default=[0.9, 0.94],
        help="thresholds to score (speakers.threshold's and tool_threshold's defaults)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not VOICES.is_dir():
        sys.exit("needs the voices: apt-get install klettres-data")
    started = time.perf_counter()
    encoder = SpeakerEncoder()
    print(f"encoder {encoder.source} loaded in {(time.perf_counter() - started) * 1000:.0f} ms")
    floor = measure_floor(build_clips())
    print(f"CPU: {cpu_model()}; in-run floor {floor['ms_per_frame']:.3f} ms per 60 ms frame (Opus + Silero)")
    for n, threshold in enumerate(args.threshold):
        result = measure_eer(encoder, args.tests, threshold, args.seed)
        if n == 0:
            print(
                f"{result['speakers']} speakers, {result['tests']} held-out utterances: EER "
                f"{result['eer'] * 100:.1f} % (at cosine {result['eer_threshold']:.3f})"
            )
        print(
            f"at threshold {threshold}: enrolled voices identified {result['identified'] * 100:.1f} % "
            f"(rejected as unknown {result['false_reject'] * 100:.1f} %); a stranger taken for an enrolled voice "
            f"{result['strangers_taken'] * 100:.1f} % (each speaker's utterances against the others' prints)"
        )
    cpu = result["cpu_ms_per_audio_s"]
    print(f"CPU per second of speech: {cpu:.1f} ms ({cpu / floor['ms_per_frame']:.0f} x the floor's frame)")
    latency = measure_latency(encoder, args.repeats)
    print(
        f"fixtures {latency['clip_seconds']:.1f} s each: ASR alone {latency['asr_ms']:.0f} ms, "
        f"ASR with identification in parallel {latency['asr_with_speaker_ms']:.0f} ms; added median "
        f"{latency['added_ms_median']:.1f} ms, p90 {latency['added_ms_p90']:.1f} ms; identification done "
        f"after ASR by (p90) {latency['speaker_after_asr_ms_p90']:.1f} ms; embedding CPU "
        f"{latency['embed_cpu_ms_median']:.0f} ms an utterance "
        f"({latency['embed_cpu_ms_median'] / floor['ms_per_frame']:.0f} x the floor's frame)"
    )
    print(f"floor again {measure_floor(build_clips())['ms_per_frame']:.3f} ms")


if __name__ == "__main__":
    main()
