"""Voice activity detection: per-process providers, per-session streams, and the detector.

Three backends run the same Silero model:

- `SileroOnnxVAD` (extra `silero-onnx`): one onnxruntime session per process shared by every
  stream, a few KB per stream — the best fit for a server with many sessions;
- `SileroLiteVAD` (extra `silero`): no Python dependencies, but each live stream holds its own
  native model instance (pooled and reused across sessions);
- `SileroTorchVAD` (extra `silero-torch`): for processes that already carry torch.

Importing this package imports no backend library: each provider imports its own when built.
"""

from __future__ import annotations

from vixio.providers.vad.base import VADProvider, VADStream
from vixio.providers.vad.detector import QuietGate, VADEvent, VoiceActivityDetector
from vixio.providers.vad.silero_lite import SileroLiteStream, SileroLiteVAD
from vixio.providers.vad.silero_onnx import SileroOnnxStream, SileroOnnxVAD
from vixio.providers.vad.silero_torch import SileroTorchStream, SileroTorchVAD

__all__ = [
    "QuietGate",
    "SileroLiteStream",
    "SileroLiteVAD",
    "SileroOnnxStream",
    "SileroOnnxVAD",
    "SileroTorchStream",
    "SileroTorchVAD",
    "VADEvent",
    "VADProvider",
    "VADStream",
    "VoiceActivityDetector",
]
