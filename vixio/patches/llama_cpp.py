"""llama-cpp-python: load a model without llama.cpp's AMX kernels when the build has them.

A `-march=native` build on an AMX CPU runs its matrix products with AMX tile instructions, which
fault (SIGILL: the whole server dies) in VMs that do not keep tile state, e.g. Firecracker. Those
kernels are reached only through "extra buffer types", so for such a build the model is loaded
with `use_extra_bufts = False`. llama-cpp-python has no argument for it, hence a temporary
replacement of `llama_cpp.llama_cpp.llama_model_default_params` while the model loads (the caller
holds its model lock, so nothing else loads meanwhile). Upstream would need a `use_extra_bufts`
argument on `Llama(...)`. Checked on llama-cpp-python 0.3.

With `VIXIO_NO_PATCHES=1` (or another version) the model loads with llama.cpp's defaults: fine on
any machine but an AMX build in such a VM, which then crashes on the first prompt (the Makefile's
portable build has no AMX kernels).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from loguru import logger

from vixio.patches import allowed

DISTRIBUTION = "llama_cpp_python"
CHECKED = ("0.3.",)
"""llama-cpp-python versions checked (prefixes)."""


@contextmanager
def amx_kernels_disabled() -> Iterator[None]:
    """Inside the block, models load without extra buffer types when this build has AMX kernels."""
    import llama_cpp
    import llama_cpp.llama_cpp as low_level

    if b"AMX_INT8 = 1" not in llama_cpp.llama_print_system_info() or not allowed(
        DISTRIBUTION, CHECKED, "llama.cpp's AMX kernels (they may crash in a VM)"
    ):
        yield
        return
    logger.warning("this llama.cpp build has AMX kernels, which crash in some VMs: loading without them")
    original = low_level.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    low_level.llama_model_default_params = without_extra_buffers
    try:
        yield
    finally:
        low_level.llama_model_default_params = original
