"""bench/bench_latency.py must keep working: its corpus, and one tiny run end to end (a real
`vixio serve` process, Piper and espeak-ng speech as Opus, Silero VAD, services on loopback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

from bench_latency import PAUSES_S, corpus  # noqa: E402

pytestmark = pytest.mark.process


def test_the_corpus_has_30_utterances_a_third_paused_in_both_languages() -> None:
    utterances = corpus()
    paused = [(u, p) for u, p in utterances if len(u.parts) > 1]
    assert len(utterances) >= 30 and len(paused) * 3 == len(utterances)
    assert {p for _, p in paused} == set(PAUSES_S) and min(PAUSES_S) == 0.3 and max(PAUSES_S) == 0.6
    cjk = [u for u, _ in utterances if any("\u4e00" <= c <= "\u9fff" for c in u.text)]
    assert len(cjk) * 2 == len(utterances)


def test_a_tiny_run_measures_latency_and_premature_replies(tmp_path: Path) -> None:
    pytest.importorskip("piper")
    pytest.importorskip("espeakng_loader")
    out = tmp_path / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_latency.py"),
            "--utterances",
            "3",
            "--pairs",
            "zero",
            "--modes",
            "preemptive",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    (run,) = results["runs"]
    assert run["turns"] == 3 and run["failed"] == 0 and run["premature"] == 0
    assert 100 < run["p50_ms"] < 2000 and run["confirmed_early"] >= 2
    assert results["machine"]["floor"]["ms_per_frame"] > 0 and results["machine"]["cpu"]
    assert "end of speech -> first audio frame" in done.stdout
