"""The parser check (docs/tool-systems.md §7): what vixio makes of a model's reply.

The same parsers the text-protocol agents use (VCP, XML) read the pasted reply, and the same
speech filter the TTS path uses says what would be spoken of it.
"""

from __future__ import annotations

from typing import Any, Literal

from vixio.core.tools.protocols.base import TextToolProtocol
from vixio.core.tools.protocols.vcp import VcpProtocol
from vixio.core.tools.protocols.xml import XmlProtocol
from vixio.core.tools.speech_filter import SpeechFilter

ParseProtocol = Literal["vcp", "xml", "auto"]
PROTOCOLS: tuple[ParseProtocol, ...] = ("vcp", "xml", "auto")


def check_reply(text: str, protocol: ParseProtocol = "auto", *, vcp_fuzzy: bool = False) -> dict[str, Any]:
    """Parse `text` with one protocol (or, with "auto", every protocol that finds something) and
    run it through the speech filter."""
    parsers: dict[str, TextToolProtocol] = {"vcp": VcpProtocol(fuzzy=vcp_fuzzy), "xml": XmlProtocol()}
    chosen = list(parsers) if protocol == "auto" else [protocol]
    requests: list[dict[str, Any]] = []
    found: list[str] = []
    for name in chosen:
        parsed = parsers[name].parse(text)
        if parsed:
            found.append(name)
        for request in parsed:
            requests.append(
                {
                    "protocol": name,
                    "tool": request.tool_name,
                    "arguments": request.arguments,
                    "request_id": request.call_id,
                    "errors": list(request.errors),
                    "raw": request.raw,
                }
            )
    speech_filter = SpeechFilter()
    first = speech_filter.feed(text)
    last = speech_filter.flush()
    return {
        "protocol": protocol,
        "detected": found,
        "requests": requests,
        "errors": [f"{item['tool'] or '?'}: {error}" for item in requests for error in item["errors"]],
        "speech": first.speech + last.speech,
        "thought": first.thought + last.thought,
        "markup_seen": speech_filter.markup_seen,
    }
