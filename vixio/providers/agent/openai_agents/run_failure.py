"""What went wrong with an openai-agents run, as one short sentence for the log and the user.

litellm and the openai SDK raise different classes for the same failure, and litellm gives a
connection failure a made-up HTTP status (500) and a message wrapped in class-name prefixes:
the sentence names what happened (timed out, broke off mid-reply, a malformed stream, could not
reach, rejected the key) and the model's address, with the cause `describe_failure` finds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents import MaxTurnsExceeded, ModelTimeoutError

from vixio.core.failure import connection_failure, describe_failure
from vixio.providers.agent.openai_agents.model_deadline import ModelCallTimeout

_LITELLM_PREFIX = re.compile(r"^litellm\.\w+:\s*(\w+:\s*)?(\w+Exception\s*-\s*)?")


@dataclass(frozen=True, slots=True)
class RunFailureContext:
    """What the sentence names about the provider."""

    where: str
    """The model's address: the API base or the model name."""
    api_base: str | None
    timeout: float | None
    max_turns: int
    missing_key: str | None = None
    """The API key that is not set, if any (see `describe_failure`)."""


def describe_run_failure(exc: BaseException, context: RunFailureContext, *, mid_reply: bool = False) -> str:
    """A short sentence for an exception from the run; `mid_reply`: the model's answer had
    started streaming (HTTP 200) when it failed."""
    where = context.where
    if isinstance(exc, ModelTimeoutError | ModelCallTimeout):
        return f"the language model at {where} did not answer within {context.timeout:g} s"
    if isinstance(exc, MaxTurnsExceeded):
        return f"the agent made {context.max_turns} model calls without a final answer"
    name = type(exc).__name__
    detail = _litellm_detail(str(exc)) or name
    status = getattr(exc, "status_code", None)
    if name == "MidStreamFallbackError":  # the answer had started (HTTP 200): its status is made up
        if detail.startswith("Connection error"):
            return f"the connection to the language model at {where} broke off mid-reply"
        return f"the language model at {where} sent a malformed stream (HTTP 200): {detail}"
    if "Timeout" in name:
        return f"the language model at {where} timed out"
    if mid_reply and not isinstance(status, int) or mid_reply and status == 200:
        # The openai SDK path (openai_direct): the stream broke or could not be read.
        if (
            "Connection" in name
            or "Protocol" in name
            or "Read" in name
            or isinstance(exc, ConnectionError)
            or detail.startswith(("Connection error", "peer closed"))
        ):
            return f"the connection to the language model at {where} broke off mid-reply"
        return f"the language model at {where} sent a malformed stream (HTTP 200): {detail}"
    # litellm gives a connection failure a made-up status (500): the cause in the chain comes first.
    api_base, missing_key = context.api_base, context.missing_key
    unreached = connection_failure(exc, api_base)
    if (
        unreached is not None
        or "Connection" in name
        or isinstance(exc, ConnectionError)
        or detail.startswith("Connection error")
    ):
        cause = describe_failure(api_base, exc=exc, detail=detail, missing_key=missing_key)
        return f"could not reach the language model at {where}: {cause}"
    cause = describe_failure(
        api_base, status=status if isinstance(status, int) else None, exc=exc, detail=detail, missing_key=missing_key
    )
    if status in (401, 403):
        return f"the language model at {where} rejected the API key: {cause}"
    if isinstance(status, int):
        return f"the language model at {where} failed: {cause}"
    return f"the agent failed: {cause}"


def _litellm_detail(message: str) -> str:
    """The reason in a litellm message, without its class-name prefixes and repeated cause."""
    # "litellm.MidStreamFallbackError: litellm.APIConnectionError: APIConnectionError:
    #  OpenAIException - <reason> Original exception: ..."
    text = message.strip().split("\n")[0].split(" Original exception:")[0]
    while True:
        stripped = _LITELLM_PREFIX.sub("", text, count=1)
        if stripped == text:
            return text[:160]
        text = stripped
