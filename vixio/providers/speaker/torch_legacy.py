"""Reads the tensors of a legacy-format PyTorch checkpoint (`torch.save` before 1.6: a run of
pickles followed by raw storages) with numpy alone, so weights shipped as a `.pt` file in a pip
package load without installing torch (which brings triton and 18 NVIDIA CUDA packages on Linux).

Only what a state dict of float tensors needs is understood; anything else (another storage
type, the zip format of torch >= 1.6, a non-little-endian file) raises `ValueError` naming the file.
Unpickling is restricted to the handful of globals a state dict names: a checkpoint cannot run code.
"""

from __future__ import annotations

import io
import pickle
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

_MAGIC = 0x1950A86A20F9469CFC6C
_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "HalfStorage": np.float16,
}


class _StorageType:
    def __init__(self, name: str) -> None:
        self.name = name


class _Tensor:
    """A view on a storage, filled in once the storages are read."""

    def __init__(self, storage: tuple[str, str], offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


def _rebuild_tensor_v2(storage: Any, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any) -> _Tensor:
    return _Tensor(storage, offset, tuple(size), tuple(stride))


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch" and name in _DTYPES:
            return _StorageType(name)
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a state dict")

    def persistent_load(self, pid: Any) -> Any:
        kind, storage_type, key, _location, _size = pid[:5]
        if kind != "storage" or not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"unknown persistent id {pid[:2]!r}")
        return (storage_type.name, key)


def load_state(path: str | Path) -> dict[str, Any]:
    """The checkpoint's top-level object with every tensor as a float32/int numpy array."""
    path = Path(path)
    data = path.read_bytes()
    stream = io.BytesIO(data)
    try:
        if pickle.load(stream) != _MAGIC:
            raise ValueError("not a legacy torch checkpoint (magic number)")
        pickle.load(stream)  # protocol version
        info = pickle.load(stream)
        if not info.get("little_endian", False):
            raise ValueError("written on a big-endian machine")
        top = _Unpickler(stream).load()
        keys = pickle.load(stream)
        storages: dict[str, np.ndarray] = {}
        kinds = _storage_kinds(top)
        for key in keys:
            (count,) = struct.unpack("<q", stream.read(8))
            dtype = np.dtype(_DTYPES[kinds[key]])
            storages[key] = np.frombuffer(stream.read(count * dtype.itemsize), dtype=dtype)
    except (pickle.UnpicklingError, EOFError, KeyError, struct.error, AttributeError) as exc:
        raise ValueError(f"{path}: cannot read as a legacy torch checkpoint: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return _resolve(top, storages)


def _storage_kinds(value: Any, found: dict[str, str] | None = None) -> dict[str, str]:
    found = {} if found is None else found
    if isinstance(value, _Tensor):
        found[value.storage[1]] = value.storage[0]
    elif isinstance(value, dict):
        for item in value.values():
            _storage_kinds(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _storage_kinds(item, found)
    return found


def _resolve(value: Any, storages: dict[str, np.ndarray]) -> Any:
    if isinstance(value, _Tensor):
        flat = storages[value.storage[1]]
        itemsize = flat.dtype.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[value.offset :], shape=value.size, strides=tuple(s * itemsize for s in value.stride)
        ).copy()
    if isinstance(value, dict):
        return type(value)((key, _resolve(item, storages)) for key, item in value.items())
    if isinstance(value, list):
        return [_resolve(item, storages) for item in value]
    return value
