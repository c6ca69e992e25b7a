"""Silero VAD through the `silero-vad` package (TorchScript model, needs torch).

Install with `pip install 'vixio[silero-torch]'`; torch is a large dependency, so prefer
`SileroLiteVAD` unless torch is already in the process. The model file ships inside the
`silero-vad` wheel (`load_silero_vad()` reads it from the package data): nothing is
downloaded, no torch.hub.

Sharing: the TorchScript object `load_silero_vad()` returns keeps the recurrent state and
audio context inside itself, so it cannot serve two streams. It wraps stateless per-rate
networks (`_model` for 16 kHz, `_model_8k` for 8 kHz) whose `forward(x, state)` takes the
window with its context prepended and returns `(probability, new_state)`. This provider
loads the TorchScript file once per process and calls that inner network, while each
stream keeps its own state and context tensors: that is what the wrapper does internally,
minus the shared mutable state. Weights are only read, so streams may run on any threads.
Importing `silero_vad` calls `torch.set_num_threads(1)` for the whole process: right for
32 ms windows, worth knowing if something else in the process uses torch.
"""

from __future__ import annotations

import functools
import threading
import time
from types import ModuleType
from typing import Any

import numpy as np
from loguru import logger

from vixio.providers.vad.base import VADProvider, VADStream

_EXTRA_HINT = "vixio[silero-torch] extra: pip install -e '.[silero-torch]' in the vixio checkout"
_SUPPORTED_RATES = (8000, 16000)
# Samples per window the Silero networks take at each rate (32 ms).
_WINDOW_SAMPLES = {16000: 512, 8000: 256}
# Attribute of the TorchScript wrapper holding the stateless network for each rate.
_INNER_NETWORK = {16000: "_model", 8000: "_model_8k"}


@functools.cache
def _modules() -> tuple[ModuleType, ModuleType]:
    try:
        import silero_vad
        import torch
    except ImportError as exc:
        raise ImportError(f"SileroTorchVAD needs torch and silero-vad ({exc}); {_EXTRA_HINT}") from exc
    return torch, silero_vad


_MODEL: Any | None = None
_MODEL_LOCK = threading.Lock()
_MODEL_LOADS = 0


def _shared_model() -> Any:
    """Load the packaged TorchScript model once per process (thread-safe first load)."""
    global _MODEL, _MODEL_LOADS
    with _MODEL_LOCK:
        if _MODEL is None:
            torch, silero_vad = _modules()
            started = time.perf_counter()
            # onnx=False: the .jit file from the package data; silero_vad never touches the network.
            model = silero_vad.load_silero_vad(onnx=False)
            model.eval()
            _MODEL, _MODEL_LOADS = model, _MODEL_LOADS + 1
            logger.info(
                "silero-vad (torch {}): model loaded in {:.0f} ms",
                torch.__version__,
                (time.perf_counter() - started) * 1000,
            )
        return _MODEL


def model_loads() -> int:
    """How many times this process loaded the TorchScript model (1 after first use)."""
    return _MODEL_LOADS


class SileroTorchStream(VADStream):
    """One session's LSTM state and 32/64-sample context around the shared network."""

    def __init__(self, network: Any, sample_rate: int, context_samples: int) -> None:
        self.sample_rate = sample_rate
        self.window_samples = _WINDOW_SAMPLES[sample_rate]
        self._network = network
        self._context_samples = context_samples
        self._torch = _modules()[0]
        self._state: Any = None
        """The LSTM state tensor (torch is imported lazily: its types reach mypy as Any)."""
        self._context: Any = None
        self.reset()

    def probability(self, window: np.ndarray) -> float:
        """Score one window; see `VADStream.probability`."""
        torch = self._torch
        window = self._check_window(window)
        x = torch.cat([self._context, torch.from_numpy(window).unsqueeze(0)], dim=1)
        with torch.inference_mode():
            out, self._state = self._network(x, self._state)
        self._context = x[:, -self._context_samples :]
        return float(out.item())

    def reset(self) -> None:
        """Zero the state; an empty state tensor is how the network marks "no history"."""
        torch = self._torch
        self._state = torch.zeros(0)
        self._context = torch.zeros(1, self._context_samples)


class SileroTorchVAD(VADProvider):
    """Silero VAD on torch; one TorchScript model per process, state per stream."""

    name = "silero-torch"

    def __init__(self, sample_rate: int = 16000) -> None:
        """Load (or reuse) the process-wide model and pick the network for `sample_rate`."""
        if sample_rate not in _SUPPORTED_RATES:
            raise ValueError(f"SileroTorchVAD sample_rate must be one of {_SUPPORTED_RATES}, got {sample_rate}")
        model = _shared_model()
        network = getattr(model, _INNER_NETWORK[sample_rate], None)
        context = getattr(network, "context_size_samples", None)
        if network is None or not isinstance(context, int):
            _, silero_vad = _modules()
            raise RuntimeError(
                f"silero-vad {getattr(silero_vad, '__version__', '?')}: the TorchScript model has no "
                f"{_INNER_NETWORK[sample_rate]}.context_size_samples; SileroTorchVAD supports the 5.x/6.x "
                "model layout — use SileroLiteVAD instead"
            )
        self.sample_rate = sample_rate
        self.window_samples = _WINDOW_SAMPLES[sample_rate]
        self._network = network
        self._context_samples = context

    def create_stream(self) -> SileroTorchStream:
        """Return a stream with zero state; costs two small tensors."""
        return SileroTorchStream(self._network, self.sample_rate, self._context_samples)
