"""Spoken memory requests, answered without the model: forget everything (after a confirmation),
forget one thing, and what do you remember.

    forget = ForgetRequest(conversation, language="en", confirms=policy.confirms)
    station.intercept = forget.intercept         # answers these turns itself, without the model
    forget.on_forgotten = station.provider.clear_history

vixio/state/spoken.py says which utterances are requests (both languages on every device,
negations left to the model). "Forget everything" is answered with a question; the next turn
confirms (the `tools.confirm_words` yes-words, or yes / 是 / 好 in either language) or not.
Confirmed: the device's stored history, facts, long-term memory and profile assignment are erased
(as `vixio memory clear` does), this session's conversation starts afresh and the model's
history is emptied. "Forget that I like green tea" erases the facts it names and the turns that
said them (vixio/state/fact_forget.py), from the store and from the model's history, at once.
"What do you remember about me" lists the facts. None of these turns reaches the model or the
store; each is answered in the language it was asked in.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from loguru import logger

from vixio.memory.recording import Conversation
from vixio.state.fact_forget import facts_named, forget_facts
from vixio.state.fact_merge import spoken
from vixio.state.spoken import Request, understand
from vixio.state.store import StoreError

ASK = {
    "en": "Should I forget everything you have told me? Say yes to confirm.",
    "zh": "要我忘掉你说过的所有话吗？确认请说“是”。",
}
DONE = {"en": "Done. I have forgotten everything you told me.", "zh": "好的，我已经忘掉你说过的话了。"}
KEPT = {"en": "All right, I will keep it.", "zh": "好的，我会记着。"}
FORGOT_FACT = {"en": "Done. I have forgotten that: {}.", "zh": "好的，我已经忘掉了：{}。"}
NO_FACT = {"en": "I don't remember anything about {}.", "zh": "我没有记着关于“{}”的事。"}
NO_FACTS_KEPT = {
    "en": 'I keep no separate facts here; say "forget everything" to erase all I remember.',
    "zh": "我这里没有单独记着的事；说“忘掉我说过的话”可以全部删除。",
}
FAILED = {"en": "Sorry, I could not erase it just now. Please try again.", "zh": "抱歉，现在删不掉，请再试一次。"}
_YES = re.compile(
    r"^\W*(?:yes|yeah|yep|sure|ok|okay|confirm|do it|go ahead|是|是的|好|好的|对|确认|确定|可以)\W*$", re.IGNORECASE
)


def asks_to_forget(text: str, language: str = "en") -> bool:
    """Whether `text` asks to forget everything (either language, whatever `language` says)."""
    request = understand(text)
    return request is not None and request.kind == "all"


class ForgetRequest:
    """The memory requests of one session."""

    def __init__(self, conversation: Conversation, *, language: str, confirms: Callable[[str], bool]) -> None:
        self.conversation = conversation
        self.language = language if language in ASK else "en"
        """The device's language: what "yes" is looked for in with `confirms` (replies follow the request's)."""
        self.confirms = confirms
        self.on_forgotten: Callable[[], None] | None = None
        """Called once the store is erased: empties the model's history."""
        self._asked: str | None = None
        """The language the confirmation was asked in, while it waits for the answer."""

    async def intercept(self, text: str) -> str | None:
        """The reply to `text` when it belongs to a memory request; None lets the model answer."""
        if self._asked is not None:
            language, self._asked = self._asked, None
            if not (self.confirms(text) or _YES.match(text.strip())):
                return KEPT[language]
            return DONE[language] if await self._forget() else FAILED[language]
        request = understand(text)
        if request is None:
            return None
        if request.kind == "all":
            self._asked = request.language
            return ASK[request.language]
        if request.kind == "recall":
            learner = self.conversation.learner
            return spoken(learner.facts if learner is not None else [], request.language)
        return await self._forget_fact(request)

    async def _forget_fact(self, request: Request) -> str:
        conversation, language = self.conversation, request.language
        learner = conversation.learner
        if learner is None:
            return NO_FACTS_KEPT[language]
        named = facts_named(learner.facts, request.topic)
        if not named:
            return NO_FACT[language].format(request.topic)
        log = logger.bind(device=conversation.device_id)
        try:
            await conversation.written()  # the turns that said it are all in the store to be erased
            await learner.forget(named)
            _, turns = await forget_facts(conversation.store, conversation.device_id, named)
        except StoreError as exc:
            log.error("the user asked to forget a fact, but the store did not erase it: {}", exc)
            return FAILED[language]
        for turn in turns:  # the model forgets the words too
            conversation.drop_turn(turn.conversation, turn.seq)
        log.info("the user asked to forget {} fact(s); {} turn(s) that said them erased", len(named), len(turns))
        return FORGOT_FACT[language].format("; ".join(fact.value for fact in named))

    async def _forget(self) -> bool:
        conversation = self.conversation
        log = logger.bind(device=conversation.device_id)
        try:
            await conversation.forget()
        except StoreError as exc:  # the store logged a failed write; reads may have failed too
            log.error("the user asked to forget, but the store did not erase: {}", exc)
            return False
        if self.on_forgotten is not None:
            self.on_forgotten()
        log.info("the user asked to forget: history, facts, long-term memory and profile assignment erased")
        return True
