"""Text tool protocols for models without native function calling (VCP, XML).

A protocol renders the tool definitions into the system prompt, parses calls out of the
model's finished reply into `ToolCallRequest`s, and formats results as the next user turn.
The speech filter (`vixio.core.tools.speech_filter`) keeps every protocol's markup out of TTS.
"""

from vixio.core.tools.protocols.base import TextToolProtocol
from vixio.core.tools.protocols.vcp import VcpProtocol
from vixio.core.tools.protocols.xml import XmlProtocol

__all__ = ["TextToolProtocol", "VcpProtocol", "XmlProtocol"]
