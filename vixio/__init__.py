"""vixio: an asyncio WebSocket voice-agent server for Xiaozhi ESP32 devices.

What a developer composing a pipeline needs is importable from here.
"""

import os

# litellm downloads a price list at import unless told not to; vixio runs offline.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from vixio.core import *  # noqa: E402,F403
from vixio.core import __all__ as _core_all  # noqa: E402

__version__ = "0.1.0"
__all__ = [*_core_all, "__version__"]
