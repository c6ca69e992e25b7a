"""The voiceprints of one device as its sessions use them, and enrolment by voice.

    book = SpeakerBook(store, device_id)
    prints = await book.prints()                  # person -> unit vector, read once a session
    await book.enrol("Alice", [v1, v2, v3])       # averaged into hers (a new one, or added to)

Enrolment by voice ("remember my voice, I'm Alice" / "记住我的声音，我叫小明"): that turn's
embedding is the first sample, and the next `enrol_utterances - 1` turns (anything the person
says) the rest; then the averaged voiceprint is stored and used from the next turn on. "forget
my voice" / "忘记我的声音" deletes the voiceprint of whoever is recognised saying it. These
turns are answered here and reach neither the model nor the history.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np
from loguru import logger

from vixio.core.session_state import SessionState
from vixio.state.store import Store, StoreError
from vixio.state.voiceprints import MAX_PEOPLE, Voiceprint, clean_name

ENROL = {
    "en": (
        "remember my voice",
        "learn my voice",
        "enroll my voice",
        "enrol my voice",
        "register my voice",
        "recognize my voice",
        "recognise my voice",
    ),
    "zh": ("记住我的声音", "记下我的声音", "认识我的声音", "录入我的声音", "注册我的声音", "记住我的声纹", "录入声纹"),
}
FORGET = {
    "en": ("forget my voice", "delete my voice", "erase my voice"),
    "zh": ("忘记我的声音", "忘掉我的声音", "删除我的声音", "删除我的声纹"),
}
CANCEL = ("cancel", "stop", "never mind", "取消", "算了", "停止")
_NAME_EN = re.compile(r"\b(?:i am|i'm|im|my name is|this is|call me|it's|its)\s+([^\W\d_][\w'-]{0,39})", re.I)
_NAME_ZH = re.compile(r"(?:我叫|我是|我的名字是|叫我)\s*([\u4e00-\u9fffA-Za-z]{1,8}?)(?:[，。！,.!\s]|$)")
_NOT_WORD = re.compile(r"[^\w\s]+")
_NOT_NAMES = {"here", "back", "ready", "done", "sure", "not", "the", "a"}

SAY = {
    "en": {
        "ask_name": 'Sure. Tell me your name too: say "remember my voice, I\'m" and your name.',
        "more": "Hello {name}. Say {left} more sentence{s}, anything you like, so I learn your voice.",
        "again": "Thanks. {left} more, please.",
        "done": "Got it, {name}. I'll know your voice from now on.",
        "full": "I already know {limit} voices on this device; forget one first.",
        "failed": "Sorry, I could not save your voice just now. Please try again later.",
        "cancelled": "All right, I won't learn your voice.",
        "unheard": "I didn't catch enough of your voice there. Please say a full sentence.",
        "forgot": "Done, {name}. I have deleted your voiceprint.",
        "unknown": "I don't recognise your voice, so there is no voiceprint of yours to delete.",
    },
    "zh": {
        "ask_name": "好的。也请告诉我你的名字，比如说：“记住我的声音，我叫小明”。",
        "more": "你好，{name}。请再随便说{left}句话，让我记住你的声音。",
        "again": "谢谢，请再说{left}句。",
        "done": "好的，{name}，我以后能认出你的声音了。",
        "full": "这台设备已经记住了{limit}个人的声音，请先删除一个。",
        "failed": "抱歉，现在没能保存你的声音，请稍后再试。",
        "cancelled": "好的，不记录你的声音了。",
        "unheard": "刚才没听清你的声音，请说一句完整的话。",
        "forgot": "好的，{name}，你的声纹已经删除了。",
        "unknown": "我认不出你的声音，所以没有你的声纹可以删除。",
    },
}


def _plain(text: str) -> tuple[str, str]:
    plain = " ".join(_NOT_WORD.sub(" ", text.lower()).split())
    return plain, plain.replace(" ", "")


def _says(text: str, phrases: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether `text` contains one of the phrases, in either language (a household speaks both)."""
    plain, compact = _plain(text)
    return any(p in plain or p.replace(" ", "") in compact for group in phrases.values() for p in group)


def spoken_name(text: str) -> str:
    """The name in "… I'm Alice" / "…我叫小明", or ""."""
    for pattern in (_NAME_EN, _NAME_ZH):
        found = pattern.search(text)
        if found and found.group(1).lower() not in _NOT_NAMES:
            name = found.group(1)
            return name[:1].upper() + name[1:] if name.isascii() else name
    return ""


class SpeakerBook:
    """One device's voiceprints, read at every turn (in parallel with ASR, so an enrolment made in
    the console or by another session counts from the next turn), changed through the store."""

    def __init__(self, store: Store, device_id: str) -> None:
        self.store = store
        self.device_id = device_id
        self._prints: dict[str, Voiceprint] | None = None

    async def prints(self) -> dict[str, np.ndarray]:
        """Person -> unit vector (an unreadable store: none this turn)."""
        try:
            self._prints = {p.person: p for p in await self.store.voiceprints(self.device_id)}
        except StoreError as exc:
            logger.bind(device=self.device_id).warning("voiceprints not read: {}", exc)
            return {}
        return {person: p.array() for person, p in self._prints.items()}

    async def enrol(self, person: str, embeddings: list[np.ndarray]) -> Voiceprint:
        """Add `embeddings` to `person`'s voiceprint (made if new); ValueError past MAX_PEOPLE."""
        person = clean_name(person)
        await self.prints()
        known = self._prints or {}
        existing = next((p for name, p in known.items() if name.casefold() == person.casefold()), None)
        if existing is None and len(known) >= MAX_PEOPLE:
            raise ValueError(f"device {self.device_id} already holds {MAX_PEOPLE} voiceprints")
        total = np.sum(embeddings, axis=0)
        samples = len(embeddings)
        if existing is not None:
            person = existing.person
            total = total + existing.array() * existing.samples
            samples += existing.samples
        vector = (total / max(float(np.linalg.norm(total)), 1e-9)).astype("<f4")
        await self.store.put_voiceprint(self.device_id, person, vector.tobytes(), samples)
        logger.bind(device=self.device_id).info("voiceprint of {} stored ({} utterances)", person, samples)
        return Voiceprint(self.device_id, person, vector.tobytes(), samples, 0.0)

    async def forget(self, person: str) -> bool:
        return await self.store.delete_voiceprint(self.device_id, person)


class VoiceEnrolment:
    """The spoken enrolment and "forget my voice" of one session (an agent station's intercept)."""

    def __init__(
        self, book: SpeakerBook, state: Callable[[], SessionState], *, language: str, utterances: int = 3
    ) -> None:
        self.book = book
        self.state = state
        self.language = language if language in SAY else "en"
        self.utterances = utterances
        self._name = ""
        self._samples: list[np.ndarray] = []

    def _say(self, key: str, **values: object) -> str:
        return SAY[self.language][key].format(**values)

    async def intercept(self, text: str) -> str | None:
        """The reply to `text` when it belongs to an enrolment; None lets the model answer."""
        speaker = self.state().speaker
        if self._name:
            return await self._collect(text, speaker.embedding if speaker is not None else None)
        if _says(text, FORGET):
            if speaker is None or not speaker.person:
                return self._say("unknown")
            await self.book.forget(speaker.person)
            return self._say("forgot", name=speaker.person)
        if not _says(text, ENROL):
            return None
        name = spoken_name(text)
        if not name:
            return self._say("ask_name")
        known = await self.book.prints()
        if len(known) >= MAX_PEOPLE and name.casefold() not in {k.casefold() for k in known}:
            return self._say("full", limit=MAX_PEOPLE)
        self._name, self._samples = name, []
        return await self._collect("", speaker.embedding if speaker is not None else None, first=True)

    async def _collect(self, text: str, embedding: np.ndarray | None, first: bool = False) -> str:
        if not first and any(word in _plain(text)[0] or word in text for word in CANCEL) and len(text) < 20:
            self._name, self._samples = "", []
            return self._say("cancelled")
        if embedding is None and not first:
            return self._say("unheard")
        if embedding is not None:
            self._samples.append(embedding)
        left = self.utterances - len(self._samples)
        if left > 0:
            key = "more" if first else "again"
            return self._say(key, name=self._name, left=left, s="" if left == 1 else "s")
        name, samples = self._name, self._samples
        self._name, self._samples = "", []
        try:
            stored = await self.book.enrol(name, samples)
        except (StoreError, ValueError) as exc:
            logger.bind(device=self.book.device_id).error("voiceprint of {} not stored: {}", name, exc)
            return self._say("failed")
        return self._say("done", name=stored.person)


def embed_recordings(model: str, recordings: list[tuple[np.ndarray, int]]) -> list[np.ndarray]:
    """Embeddings of mono recordings (samples, rate) for an enrolment from files or the console's
    upload; CPU-bound: call it in a thread. Each recording is resampled to 16 kHz."""
    import soxr

    from vixio.providers.speaker.encoder import SAMPLE_RATE, SpeakerEncoder

    encoder = SpeakerEncoder(model)
    vectors = []
    for samples, rate in recordings:
        audio = samples.astype(np.float32) / (32768.0 if samples.dtype == np.int16 else 1.0)
        if audio.ndim > 1:
            audio = audio.mean(axis=1)
        if rate != SAMPLE_RATE:
            audio = soxr.resample(audio, rate, SAMPLE_RATE).astype(np.float32)
        if len(audio) < SAMPLE_RATE:
            raise ValueError(f"a recording of {len(audio) / SAMPLE_RATE:.1f} s is too short: at least 1 s of speech")
        vectors.append(encoder.embed(audio))
    return vectors
