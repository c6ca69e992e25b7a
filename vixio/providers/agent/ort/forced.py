"""A forced tool call on the ONNX runtime: `{"name": ..., "arguments": {...}}` generated under the
offered tools' schemas, as llama.cpp's JSON-schema grammar (llama backend) and mistral.rs'
(mistralrs backend) constrain it, by walking the schema instead of compiling a grammar:

- the JSON punctuation and the property names are fed to the model as given text;
- the tool's name, an `enum` and a boolean are chosen among their allowed spellings, token by
  token (greedy among the tokens that keep a spelling possible);
- an integer or a number is greedy among the tokens made of its characters, ending when the
  model prefers any other token; a string is greedy text ending at the model's closing quote (or
  a newline, or `MAX_STRING_TOKENS`);
- any other value (objects, arrays) is greedy text until it parses as JSON.

The arguments are collected as values and serialized at the end, so the call always parses and
each value has its schema's type. Greedy throughout, like a forced call at temperature 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vixio.providers.agent.llama import tools as local_tools

MAX_STRING_TOKENS = 48
MAX_NUMBER_TOKENS = 16
MAX_VALUE_TOKENS = 96
_NUMBER = {"integer": re.compile(r"-?\d*"), "number": re.compile(r"-?\d*\.?\d*")}


class ForcedCall:
    """One forced call on an engine (vixio.providers.agent.ort.engine.OnnxChat)."""

    def __init__(self, engine: Any, prompt: list[int]) -> None:
        self.engine = engine
        self.logits: np.ndarray = engine.begin(prompt)
        self._pieces: dict[int, str] = {}

    def piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = str(self.engine.tokenizer.decode([token], skip_special_tokens=False))
        return self._pieces[token]

    def feed(self, text: str) -> None:
        """Given text, as if the model had written it."""
        self.logits = self.engine.append(self.engine.tokenizer.encode(text, add_special_tokens=False).ids)

    def take(self, token: int) -> None:
        self.logits = self.engine.append([token])

    def ranked(self) -> np.ndarray:
        return np.argsort(self.logits)[::-1]

    def choose(self, spellings: Sequence[str]) -> str:
        """One of `spellings`, token by token: the model's best token that keeps one possible."""
        encoded = {s: list(self.engine.tokenizer.encode(s, add_special_tokens=False).ids) for s in spellings}
        done: list[int] = []
        while True:
            alive = [s for s, ids in encoded.items() if ids[: len(done)] == done]
            if len(alive) == 1:
                rest = encoded[alive[0]][len(done) :]
                if rest:
                    self.logits = self.engine.append(rest)
                return alive[0]
            complete = [s for s in alive if len(encoded[s]) == len(done)]
            allowed = {encoded[s][len(done)] for s in alive if len(encoded[s]) > len(done)}
            if complete and not allowed:
                return complete[0]
            token = max(allowed, key=lambda t: self.logits[t])
            done.append(token)
            self.take(token)

    def greedy_text(self, limit: int, accept: Callable[[str], bool], stop_before: str = "") -> str:
        """Greedy tokens while the text stays acceptable; ends at `stop_before` (not kept)."""
        text = ""
        for _ in range(limit):
            for token in self.ranked()[:8]:
                token = int(token)
                if token in self.engine.stop_tokens:
                    return text
                piece = self.piece(token)
                cut = min((piece.find(c) for c in stop_before if c in piece), default=-1)
                if cut >= 0:
                    return text + piece[:cut]
                if accept(text + piece):
                    text += piece
                    self.take(token)
                    break
            else:
                return text
        return text

    def number(self, kind: str) -> int | float:
        pattern = _NUMBER[kind]
        text = ""
        for _ in range(MAX_NUMBER_TOKENS):
            best = int(np.argmax(self.logits))
            if pattern.fullmatch(text + self.piece(best)) and self.piece(best):
                text += self.piece(best)
                self.take(best)
                continue
            if any(c.isdigit() for c in text):
                break
            digits = [int(t) for t in self.ranked()[:200] if re.fullmatch(r"-?\d+", self.piece(int(t)))]
            if not digits:
                break
            text += self.piece(digits[0])
            self.take(digits[0])
        text = text if any(c.isdigit() for c in text) else "0"
        return int(text) if kind == "integer" else float(text)

    def value(self, schema: dict[str, Any]) -> Any:
        if "enum" in schema:
            spellings = {json.dumps(v, ensure_ascii=False): v for v in schema["enum"]}
            return spellings[self.choose(list(spellings))]
        if "const" in schema:
            self.feed(json.dumps(schema["const"], ensure_ascii=False))
            return schema["const"]
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        if kind == "boolean":
            return self.choose(["true", "false"]) == "true"
        if kind in _NUMBER:
            return self.number(kind)
        if kind == "string":
            self.feed('"')
            text = self.greedy_text(MAX_STRING_TOKENS, lambda _text: True, stop_before='"\n')
            self.feed('"')
            return text
        if kind == "object" and isinstance(schema.get("properties"), dict):
            return self.arguments(schema)
        text = self.greedy_text(MAX_VALUE_TOKENS, lambda _text: True)
        try:
            return json.JSONDecoder().raw_decode(text.strip())[0]
        except ValueError as exc:
            raise ValueError(f"the model wrote no JSON value for {schema!r}: {text!r}") from exc

    def arguments(self, schema: dict[str, Any]) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties") or {}
        names = list(schema.get("required") or properties)
        values: dict[str, Any] = {}
        self.feed("{")
        for index, name in enumerate(names):
            self.feed(("" if index == 0 else ", ") + json.dumps(name) + ": ")
            values[name] = self.value(properties.get(name) or {})
        self.feed("}")
        return values


def forced_call_text(engine: Any, prompt: list[int], chat_tools: Sequence[dict[str, Any]], choice: str) -> str:
    """The call's JSON text, as `llama.tools.forced_call` reads it; `choice` "required" or a tool name."""
    specs = {
        spec["name"]: spec for spec in local_tools.function_specs(chat_tools) if choice in ("required", spec["name"])
    }
    if not specs:
        raise ValueError(f"tool_choice {choice!r} names no offered tool")
    call = ForcedCall(engine, prompt)
    call.feed('{"name": ')
    name = json.loads(call.choose([json.dumps(name) for name in specs]))
    call.feed(', "arguments": ')
    parameters = dict(specs[name].get("parameters") or {})
    arguments = call.arguments(parameters) if parameters.get("properties") else {}
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
