"""One copy of an ONNX model's weights for every worker: the weights moved to a file beside the
graph, which onnxruntime memory-maps instead of copying into each process.

onnxruntime copies the weights of a self-contained `.onnx` file into each process's heap (the
Piper voice: 63 MB, ~80 MB of private memory per worker). Weights in an external data file are
mapped read-only and used in place: pages of the page cache, shared by all workers and counted
once. The split copy is made once per model file into the model cache
(`vixio.providers.model_cache`), in a temporary directory renamed into place, so workers starting
together never read a half-written one. The graph and weights are the same; only where the
bytes live changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from loguru import logger

from vixio.providers.model_cache import cache_dir

SIZE_THRESHOLD = 1024
"""Tensors from this many bytes on go to the external file (smaller ones stay in the graph)."""


def external_weights_model(model: Path) -> Path:
    """The graph file of `model`'s split copy (made on first use), whose weights onnxruntime maps.

    Raises OSError when the cache is not writable and ImportError without the onnx package.
    """
    model = model.resolve()
    stat = model.stat()
    key = hashlib.sha256(f"{model}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    target = cache_dir() / "onnx-external" / f"{model.stem}-{key}"
    graph = target / model.name
    if graph.is_file() and (target / _data_name(model)).is_file():
        return graph
    import onnx

    started = time.perf_counter()
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        proto = onnx.load(str(model))
        onnx.save_model(
            proto,
            str(building / model.name),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=_data_name(model),
            size_threshold=SIZE_THRESHOLD,
        )
        del proto
        os.chmod(building, 0o755)  # mkdtemp makes 0700; a shared cache must stay readable
        for path in building.iterdir():
            os.chmod(path, 0o644)
        try:
            os.rename(building, target)
        except OSError:  # another process renamed its copy first (ENOTEMPTY/EEXIST): use that one
            if not graph.is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    logger.info(
        "{}: weights moved to {} for memory mapping in {:.1f} s", model.name, target, time.perf_counter() - started
    )
    return graph


def _data_name(model: Path) -> str:
    return model.name + ".data"
