"""Text in and out of the ONNX model: the GGUF's byte-level BPE tokenizer on the `tokenizers`
package, ChatML rendering, and streamed detokenization.

The tokenizer is rebuilt from the GGUF's `tokenizer.ggml.tokens` and `.merges` (GPT-2 style
byte-level BPE); control tokens (`token_type` 3: `<|im_start|>`, `<|im_end|>`, ...) are special
tokens matched whole in the text, as llama.cpp tokenizes a rendered chat prompt. The pre-split
follows `tokenizer.ggml.pre`: "smollm" splits digits one by one before GPT-2's regex (SmolLM2's
own tokenizer.json). tests/providers/agent/onnx check it against llama.cpp's tokenizer.

The prompt is ChatML rendered as the GGUF's template does (SmolLM2's, Qwen's, ...), including
the default system turn a template adds when the messages have none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

CONTROL = 3
"""GGUF token_type of a control token."""
END_OF_GENERATION = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
"""Tokens that end a reply (with the file's eos), as llama.cpp's end-of-generation set."""
_DEFAULT_SYSTEM = re.compile(r"'<\|im_start\|>system(?:\n|\\n)(.*?)<\|im_end\|>(?:\n|\\n)'", re.S)


def build_tokenizer(tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int], pre: str) -> Any:
    """A `tokenizers.Tokenizer` equal to the GGUF's (see the module docstring)."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError as exc:
        from vixio.config.extras import install_hint

        raise ImportError(
            f"the local LLM on ONNX Runtime needs the tokenizers package: {install_hint('local-onnx')}"
        ) from exc
    vocab = {token: index for index, token in enumerate(tokens)}
    pairs = [(left, right) for left, _, right in (merge.partition(" ") for merge in merges)]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    control = [tokens[index] for index, kind in enumerate(token_types) if kind == CONTROL]
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in control])
    return tokenizer


def render_chatml(messages: Sequence[dict[str, str]], template: str) -> str:
    """The prompt ChatML templates render, ending with the opened assistant turn."""
    if "<|im_start|>" not in template:
        raise ValueError("the ONNX runtime renders ChatML chat templates only (this GGUF's is another)")
    parts = []
    if messages and messages[0]["role"] != "system" and (default := _DEFAULT_SYSTEM.search(template)):
        parts.append(f"<|im_start|>system\n{default.group(1)}<|im_end|>\n")
    parts += [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


class StreamDecoder:
    """Text of a growing token list, handed out as it becomes whole characters (a byte-level
    token may end inside a UTF-8 sequence: that part waits for the next token)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self.text = ""

    def push(self, token: int) -> str:
        """The new text `token` completes ("" while a character is unfinished)."""
        self._ids.append(token)
        text = str(self._tokenizer.decode(self._ids, skip_special_tokens=True))
        if text.endswith("\ufffd"):
            return ""
        piece, self.text = text[len(self.text) :], text
        return piece
