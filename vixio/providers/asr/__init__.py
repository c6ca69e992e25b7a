"""Speech recognition providers: one utterance of PCM in, text out.

`FasterWhisperASR` runs Whisper locally (extras `whisper`, `whisper-multilingual`);
`OpenAICompatibleASR` calls any `/audio/transcriptions` server. Importing this package
imports neither backend library.
"""

from __future__ import annotations

from vixio.providers.asr.base import ASRError, ASRProvider
from vixio.providers.asr.faster_whisper import FasterWhisperASR
from vixio.providers.asr.openai_compatible import OpenAICompatibleASR
from vixio.providers.inference import (
    inference_executor,
    run_inference,
    shutdown_inference_executor,
)

__all__ = [
    "ASRError",
    "ASRProvider",
    "FasterWhisperASR",
    "OpenAICompatibleASR",
    "inference_executor",
    "run_inference",
    "shutdown_inference_executor",
]
