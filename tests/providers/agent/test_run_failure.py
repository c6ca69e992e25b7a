from __future__ import annotations

import pytest
from agents import MaxTurnsExceeded

from vixio.providers.agent.openai_agents.model_deadline import ModelCallTimeout
from vixio.providers.agent.openai_agents.run_failure import (
    RunFailureContext,
    describe_run_failure,
)

pytestmark = pytest.mark.unit

CONTEXT = RunFailureContext(where="http://127.0.0.1:9/v1", api_base="http://127.0.0.1:9/v1", timeout=30.0, max_turns=5)


class MidStreamFallbackError(Exception):
    """litellm's class for a stream that failed after HTTP 200 (matched by name, as litellm's is)."""


def test_litellm_prefixes_are_stripped_and_a_mid_stream_break_is_named() -> None:
    broken = MidStreamFallbackError(
        "litellm.MidStreamFallbackError: litellm.APIConnectionError: APIConnectionError: "
        "OpenAIException - Connection error. Original exception: ..."
    )
    assert (
        describe_run_failure(broken, CONTEXT)
        == "the connection to the language model at http://127.0.0.1:9/v1 broke off mid-reply"
    )
    garbled = MidStreamFallbackError("litellm.MidStreamFallbackError: OpenAIException - bad json\nmore")
    assert (
        describe_run_failure(garbled, CONTEXT)
        == "the language model at http://127.0.0.1:9/v1 sent a malformed stream (HTTP 200): bad json"
    )


def test_deadline_and_turn_limit_name_their_numbers() -> None:
    assert (
        describe_run_failure(ModelCallTimeout(), CONTEXT)
        == "the language model at http://127.0.0.1:9/v1 did not answer within 30 s"
    )
    assert (
        describe_run_failure(MaxTurnsExceeded("max"), CONTEXT) == "the agent made 5 model calls without a final answer"
    )
