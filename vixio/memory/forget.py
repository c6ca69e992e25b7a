"""A spoken request to forget: "forget everything about me" / "忘掉我说过的话", then a confirmation.

    forget = ForgetRequest(conversation, language="en", confirms=policy.confirms)
    station.intercept = forget.intercept         # answers these turns itself, without the model
    forget.on_forgotten = station.provider.clear_history

The first turn that asks to forget is answered with a question; the next turn confirms (the
`tools.confirm_words` yes-words) or not. Confirmed: the device's stored history, long-term memory
and profile assignment are erased (as `vixio memory clear` does), this session's conversation
starts afresh and the model's history is emptied. Neither turn reaches the model or the store.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from loguru import logger

from vixio.memory.conversation import Conversation
from vixio.state.store import StoreError

PHRASES = {
    "en": ("forget everything about me", "forget everything i said", "forget everything i told you",
           "forget what i said", "forget what i told you", "erase my memory", "delete my memory",
           "forget all about me"),
    "zh": ("忘掉我说过的话", "忘记我说过的话", "忘掉我说的话", "忘记我说的话", "忘掉关于我的一切", "忘记关于我的一切",
           "删除我的记忆", "清除我的记忆"),
}
ASK = {"en": "Should I forget everything you have told me? Say yes to confirm.",
       "zh": "要我忘掉你说过的所有话吗？确认请说“是”。"}
DONE = {"en": "Done. I have forgotten everything you told me.", "zh": "好的，我已经忘掉你说过的话了。"}
KEPT = {"en": "All right, I will keep it.", "zh": "好的，我会记着。"}
_NOT_WORD = re.compile(r"[^\w\s]+")


def asks_to_forget(text: str, language: str) -> bool:
    """Whether `text` is a request to forget (case, punctuation and extra spaces ignored)."""
    plain = " ".join(_NOT_WORD.sub(" ", text.lower()).split())
    compact = plain.replace(" ", "")
    return any(phrase in plain or phrase.replace(" ", "") in compact for phrase in PHRASES.get(language, PHRASES["en"]))


class ForgetRequest:
    """The forget-and-confirm exchange of one session."""

    def __init__(self, conversation: Conversation, *, language: str, confirms: Callable[[str], bool]) -> None:
        self.conversation = conversation
        self.language = language if language in PHRASES else "en"
        self.confirms = confirms
        self.on_forgotten: Callable[[], None] | None = None
        """Called once the store is erased: empties the model's history."""
        self._asked = False

    async def intercept(self, text: str) -> str | None:
        """The reply to `text` when it belongs to the exchange; None lets the model answer."""
        if self._asked:
            self._asked = False
            if not self.confirms(text):
                return KEPT[self.language]
            await self._forget()
            return DONE[self.language]
        if asks_to_forget(text, self.language):
            self._asked = True
            return ASK[self.language]
        return None

    async def _forget(self) -> None:
        conversation = self.conversation
        log = logger.bind(device=conversation.device_id)
        try:
            await conversation.forget()
        except StoreError as exc:  # the store logged a failed write; reads may have failed too
            log.error("the user asked to forget, but the store did not erase: {}", exc)
            return
        if self.on_forgotten is not None:
            self.on_forgotten()
        log.info("the user asked to forget: history, long-term memory and profile assignment erased")
