"""Recording fakes of the providers, for station tests. Each fails loudly on misuse."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import numpy as np

from vixio.providers.agent.base import AgentError, AgentEvent, AgentProvider, AgentTextDelta
from vixio.providers.asr.base import ASRError, ASRProvider
from vixio.providers.tts.base import TTSProvider
from vixio.providers.vad.base import VADProvider, VADStream


class LoudnessVAD(VADProvider):
    """Speech probability from loudness: deterministic stand-in for Silero in logic tests."""

    sample_rate = 16000
    window_samples = 512

    def create_stream(self) -> VADStream:
        return _LoudnessStream()


class _LoudnessStream(VADStream):
    sample_rate = 16000
    window_samples = 512

    def probability(self, window: np.ndarray) -> float:
        return 1.0 if float(np.abs(window).mean()) > 0.05 else 0.0

    def reset(self) -> None:
        pass


def loud(seconds: float) -> bytes:
    t = np.arange(int(seconds * 16000)) / 16000
    return (np.sin(2 * np.pi * 300 * t) * 12000).astype("<i2").tobytes()


def quiet(seconds: float) -> bytes:
    return b"\x00\x00" * int(seconds * 16000)


class ScriptedASR(ASRProvider):
    def __init__(self, *texts: str, fail: bool = False) -> None:
        self.texts = list(texts)
        self.fail = fail
        self.calls: list[tuple[int, int]] = []

    async def initialize(self) -> None: ...

    async def transcribe(self, pcm: bytes, sample_rate: int, *, language: str | None = None) -> str:
        self.calls.append((len(pcm), sample_rate))
        if self.fail:
            raise ASRError("recogniser unreachable")
        assert self.texts, "transcribe() called more often than scripted"
        return self.texts.pop(0)

    async def close(self) -> None: ...


class ToneTTS(TTSProvider):
    """Says each text as 50 ms of tone per word at 22.05 kHz, in one chunk per word."""

    name = "tone"
    sample_rate = 22050

    def __init__(self) -> None:
        self.spoken: list[str] = []

    async def synthesize(self, text: str) -> AsyncGenerator[bytes, None]:
        self.spoken.append(text)
        for _ in text.split():
            await asyncio.sleep(0)
            yield (np.ones(int(0.05 * self.sample_rate)) * 1000).astype("<i2").tobytes()


class ScriptedAgent(AgentProvider):
    """Streams scripted replies word by word; records every call."""

    def __init__(self, *replies: str | Exception, delay: float = 0.0) -> None:
        self.replies = list(replies)
        self.delay = delay
        self.asked: list[str] = []
        self.interrupted_with: list[str] = []
        self.tools: list[Any] = []
        self.cancelled = 0
        self._history: list[dict[str, Any]] = []

    async def initialize(self, *, tools: Sequence[Any] = (), system_prompt: str = "") -> None:
        self.tools = list(tools)
        self.system_prompt = system_prompt

    async def chat(self, text: str) -> AsyncGenerator[AgentEvent, None]:
        self.asked.append(text)
        assert self.replies, f"no scripted reply left for {text!r}"
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise AgentError(str(reply))
        for word in reply.split(" "):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield AgentTextDelta(text=word + " ")
        self._history += [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]

    async def update_tools(self, tools: Sequence[Any]) -> None:
        self.tools = list(tools)

    async def cancel(self) -> None:
        self.cancelled += 1

    @property
    def history(self) -> list[dict[str, Any]]:
        return list(self._history)

    def record_interrupted_reply(self, heard_text: str) -> None:
        self.interrupted_with.append(heard_text)

    def clear_history(self) -> None:
        self._history.clear()

    def restore_history(self, items: Sequence[dict[str, Any]]) -> None:
        self._history = [dict(item) for item in items]
