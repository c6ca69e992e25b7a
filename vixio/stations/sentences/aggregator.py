"""SentenceAggregatorStation: streamed reply text → one speakable sentence at a time.

Splits on Chinese and Latin sentence punctuation; the first sentence of a reply may end early
at a comma so the TTS starts sooner. What is spoken has no markup — tool-call and tool-result
blocks of every protocol, `<think>` reasoning, code fences are held back by the streaming
`SpeechFilter` (reasoning comes out as ThoughtChunks, for display) — and no markdown or emoji;
the agent's history keeps the raw text. The reply's leading emoji (or the default) becomes its emotion,
sent once per reply before the first sentence.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from vixio.core.chunk import (
    Chunk,
    EmotionChunk,
    ErrorChunk,
    StreamCompleteChunk,
    TextChunk,
    TextDeltaChunk,
    ThoughtChunk,
)
from vixio.core.station import Station
from vixio.core.tools.speech_filter import SpeechFilter
from vixio.stations.sentences.text import find_sentence_end, leading_emotion, speakable, starts_with_pictograph

OPEN_NUMBER = re.compile(r"\S*\d[\d:.,]*\s?$")
"""A number, time or amount the text ends in, which more digits may continue ("10:", "3.", "1,")."""


def split_open_number(text: str) -> tuple[str, str]:
    """`text` without the number it may still be writing at its end, and that number: spoken at
    a pause, "at 10:" then "56 PM" were heard 3.6 s apart as two sentences."""
    found = OPEN_NUMBER.search(text)
    return (text[: found.start()], text[found.start() :]) if found else (text, "")


def _soft_break(text: str, limit: int) -> int:
    """Index after the last comma (else space) before `limit`, else `limit`."""
    head = text[:limit]
    for marks in ("，,、；;：:", " "):
        cut = max(head.rfind(mark) for mark in marks)
        if cut > 0:
            return cut + 1
    return limit


class SentenceAggregatorStation(Station):
    handles = (TextDeltaChunk, StreamCompleteChunk, ErrorChunk)
    inline = True  # splits text, no awaits: runs in the agent's task

    def __init__(
        self,
        *,
        first_clause_min_chars: int = 10,
        default_emotion: str = "happy",
        max_sentence_chars: int = 160,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.max_sentence_chars = max_sentence_chars
        """A run-on "sentence" is cut at its last comma or space past this: the TTS must start."""
        self.first_clause_min_chars = first_clause_min_chars
        self.default_emotion = default_emotion
        self._reset()

    def _reset(self) -> None:
        self._buffer = ""
        self._sentences = 0
        self._emotion_sent = False
        self._filter = SpeechFilter()

    async def on_interrupt(self) -> None:
        self._reset()

    async def process(self, chunk: Chunk) -> AsyncIterator[Chunk]:
        if isinstance(chunk, TextDeltaChunk):
            if chunk.role != "assistant":
                yield chunk
                return
            filtered = self._filter.feed(chunk.text)
            if filtered.thought:
                yield ThoughtChunk(text=filtered.thought)
            if chunk.ends_text:
                # The model call ended: the buffered sentence is whole, say it now (the reply's
                # end comes only after the agent's bookkeeping). Open markup stays held back.
                self._buffer += filtered.speech
                held = ""
                if chunk.paused:  # a pause inside "10:56" must not say "10:" alone
                    self._buffer, held = split_open_number(self._buffer)
                for out in self._flush_buffer():
                    yield out
                self._buffer = held
                return
            if not filtered.speech:
                return
            self._buffer += filtered.speech
            if not self._emotion_sent:
                emotion = self._emotion()
                if emotion is None:
                    return  # wait for the first visible character
                yield emotion
            for sentence in self._complete_sentences():
                yield sentence
            return
        if isinstance(chunk, ErrorChunk):
            # The reply broke off: what was said stays said, the cut-off fragment is not spoken.
            if self._buffer.strip():
                self.logger.debug("reply failed; dropping its unfinished sentence {!r}", self._buffer[:60])
            self._reset()
            yield chunk
            return
        # End of the reply: what is left is the last sentence; markup that was never closed is
        # dropped, not spoken.
        filtered = self._filter.flush()
        if filtered.thought:
            yield ThoughtChunk(text=filtered.thought)
        self._buffer += filtered.speech
        for out in self._flush_buffer():
            yield out
        self._reset()
        yield chunk

    def _flush_buffer(self) -> list[Chunk]:
        """The buffered text as the last sentence (after the reply's emotion, if not sent yet)."""
        out: list[Chunk] = []
        if self._buffer.strip() and not self._emotion_sent:
            emotion = self._emotion()
            if emotion is not None:
                out.append(emotion)
        tail = speakable(self._buffer)
        self._buffer = ""
        if tail:
            self._sentences += 1
            out.append(TextChunk(text=tail, role="assistant"))
        return out

    def _emotion(self) -> EmotionChunk | None:
        if not self._buffer.strip():
            return None
        found = leading_emotion(self._buffer)
        if found is None and starts_with_pictograph(self._buffer) and len(self._buffer.strip()) < 2:
            return None  # an emoji may still be arriving in pieces
        self._emotion_sent = True
        emotion, emoji = found or (self.default_emotion, "")
        return EmotionChunk(emotion=emotion, emoji=emoji)

    def _complete_sentences(self) -> list[TextChunk]:
        out: list[TextChunk] = []
        while True:
            searchable = self._buffer
            end = find_sentence_end(
                searchable, allow_clause=self._sentences == 0, min_clause_chars=self.first_clause_min_chars
            )
            if end < 0 and len(searchable) >= self.max_sentence_chars:
                end = _soft_break(searchable, self.max_sentence_chars)
            if end < 0:
                return out
            sentence, self._buffer = speakable(self._buffer[:end]), self._buffer[end:]
            if sentence:
                self._sentences += 1
                out.append(TextChunk(text=sentence, role="assistant"))
