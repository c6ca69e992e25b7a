"""vixio as a library: stations composed by hand around an agent provider of your own.

    python examples/library_pipeline.py "What can you do?" "Thank you."

Install first (from a clone; a built wheel takes the same extras): pip install -e ".[espeak]"
(docs/library.md). Each argument is one user turn; `EchoAgent` answers it (any AgentProvider
does: see docs/providers.md, "Writing a provider"), the sentence aggregator cuts the reply into
sentences, espeak-ng speaks each one, and every sentence prints with the seconds of audio made.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from vixio import AudioChunk, Pipeline, StreamCompleteChunk, TextChunk
from vixio.providers.agent.base import AgentEvent, AgentProvider, AgentTextDelta, AgentTextEnd
from vixio.providers.tts.espeak import EspeakTTS
from vixio.stations import AgentStation, SentenceAggregatorStation, TTSStation


class EchoAgent(AgentProvider):
    """Every method docs/providers.md lists; it repeats what it heard, and remembers the turns."""

    def __init__(self) -> None:
        self._history: list[dict[str, Any]] = []
        self._tools: list[Any] = []

    async def initialize(self, *, tools: Sequence[Any] = (), system_prompt: str | Callable[[], str] = "") -> None:
        self._tools = list(tools)

    async def chat(self, text: str) -> AsyncIterator[AgentEvent]:
        turns = sum(1 for item in self._history if item["role"] == "user") + 1
        reply = f"You said: {text.strip()} That was turn {turns}."
        for word in reply.split(" "):
            await asyncio.sleep(0)  # a real model streams tokens; this one streams words
            yield AgentTextDelta(text=word + " ")
        yield AgentTextEnd()
        self._history += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]

    async def update_tools(self, tools: Sequence[Any]) -> None:
        self._tools = list(tools)

    async def cancel(self) -> None:
        pass  # nothing runs between the events of `chat`

    @property
    def history(self) -> list[dict[str, Any]]:
        return list(self._history)

    def record_interrupted_reply(self, heard_text: str) -> None:
        if self._history and self._history[-1]["role"] == "assistant":
            self._history[-1] = {"role": "assistant", "content": heard_text + "… [interrupted by the user]"}

    def clear_history(self) -> None:
        self._history.clear()

    def restore_history(self, items: Sequence[dict[str, Any]]) -> None:
        self._history = [dict(item) for item in items][-self.max_history_messages:]


async def main(turns: list[str]) -> None:
    tts = EspeakTTS()
    stations = [AgentStation(EchoAgent()), SentenceAggregatorStation(), TTSStation(tts, output_sample_rate=None)]
    async with Pipeline(stations, session_id="library-example") as pipeline:
        for text in turns:
            print(f"> {text}", flush=True)
            await pipeline.push(TextChunk(text=text, role="user"))
            seconds = 0.0
            async for chunk in pipeline.outputs():
                if isinstance(chunk, AudioChunk):
                    seconds += chunk.duration
                elif isinstance(chunk, TextChunk) and chunk.role == "assistant":
                    if seconds:
                        print(f"  ({seconds:.1f} s of audio)", flush=True)
                    seconds = 0.0
                    print(f"< {chunk.text}", flush=True)
                elif isinstance(chunk, StreamCompleteChunk):  # the reply's end, after all its audio
                    break
            print(f"  ({seconds:.1f} s of audio)", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or ["Hello there."]))
