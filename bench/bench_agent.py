"""Latency of the agent providers: local SmolLM2 and the openai-agents + litellm path.

Run: .venv/bin/python bench/bench_agent.py [--runs 10] [--skip-local] [--skip-remote] [--threads N]

1. SmolLM2-135M (llama.cpp, in process): load time, then for a short question the time to the
   first token and tokens/s, both raw (`create_chat_completion(stream=True)`) and through
   `LocalLlamaAgentProvider` (openai-agents run loop on top). One streamed chunk = one token.
2. `OpenAIAgentProvider` against the loopback ScriptedLLMServer: time to the first text delta,
   compared with a bare aiohttp request to the same server, so the difference is what
   litellm + openai-agents add per turn. The server answers instantly, so this is pure overhead.

Medians and 95th percentiles over `--runs` turns (after one warm-up turn).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
from loguru import logger

QUESTION = "What is the capital of France? Answer in one sentence."
LOCAL_QUESTION = "In three sentences, why is the sky blue?"
"""Long enough an answer (~60-90 tokens) to measure tokens/s."""


def summary(label: str, values_ms: list[float]) -> str:
    """`label  median  p95` in milliseconds."""
    ordered = sorted(values_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"{label:<46} median {statistics.median(ordered):8.1f} ms   p95 {p95:8.1f} ms"


async def repeat(runs: int, once: Callable[[], Awaitable[float]]) -> list[float]:
    """One warm-up call, then `runs` timed calls (each returns milliseconds)."""
    await once()
    return [await once() for _ in range(runs)]


async def bench_local(runs: int, n_threads: int | None) -> None:
    """SmolLM2 load, raw streaming, and the provider on top."""
    from vixio.providers.agent.base import AgentTextDelta
    from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider
    from vixio.providers.agent.llama.weights import load_llama, smollm2_model_path

    path = smollm2_model_path()
    started = time.perf_counter()
    llama = load_llama(path, 2048, n_threads)
    threads = n_threads or "default"
    print(f"SmolLM2 load ({path.name}, n_threads={threads}): {time.perf_counter() - started:.2f} s")

    rates: list[float] = []

    async def raw_once() -> float:
        messages = [{"role": "user", "content": LOCAL_QUESTION}]
        started = time.perf_counter()
        first = 0.0
        tokens = 0
        stream = llama.create_chat_completion(messages=messages, stream=True, max_tokens=96, temperature=0.0)
        for chunk in stream:
            if chunk["choices"][0]["delta"].get("content"):
                tokens += 1
                first = first or time.perf_counter()
        rates.append((tokens - 1) / max(1e-9, time.perf_counter() - first))
        return (first - started) * 1000

    print(summary("raw llama.cpp: first token", await repeat(runs, raw_once)))
    print(f"{'raw llama.cpp: generation':<46} median {statistics.median(rates):8.1f} tok/s")

    agent = LocalLlamaAgentProvider(n_threads=n_threads, max_tokens=96, temperature=0.0)
    await agent.initialize()

    async def provider_once() -> float:
        agent.clear_history()
        started = time.perf_counter()
        first = 0.0
        async for event in agent.chat(LOCAL_QUESTION):
            if isinstance(event, AgentTextDelta) and not first:
                first = time.perf_counter()
        return (first - started) * 1000

    print(summary("LocalLlamaAgentProvider: first delta", await repeat(runs, provider_once)))


async def bench_remote(runs: int) -> None:
    """OpenAIAgentProvider overhead over a bare HTTP streaming request."""
    from vixio.providers.agent.base import AgentTextDelta
    from vixio.providers.agent.openai_agents.provider import OpenAIAgentProvider
    from vixio.testing.llm_server import Reply, ScriptedLLMServer

    answer = "Paris is the capital of France, and it is lovely in spring."
    async with ScriptedLLMServer() as server, aiohttp.ClientSession() as http:

        async def http_once() -> float:
            server.expect(Reply.text(answer))
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
            started = time.perf_counter()
            async with http.post(f"{server.base_url}/chat/completions", json=body) as response:
                first = 0.0
                async for line in response.content:
                    if not first and b'"content": "P' in line:
                        first = time.perf_counter()
            return (first - started) * 1000

        print(summary("bare aiohttp SSE: first content chunk", await repeat(runs, http_once)))

        started = time.perf_counter()
        agent = OpenAIAgentProvider("openai/bench-model", api_base=server.base_url, api_key="bench")
        await agent.initialize(system_prompt="Be brief.")
        print(f"OpenAIAgentProvider initialize (imports litellm): {time.perf_counter() - started:.2f} s")

        async def provider_once() -> float:
            server.expect(Reply.text(answer))
            agent.clear_history()
            started = time.perf_counter()
            first = 0.0
            async for event in agent.chat(QUESTION):
                if isinstance(event, AgentTextDelta) and not first:
                    first = time.perf_counter()
            return (first - started) * 1000

        print(summary("OpenAIAgentProvider: first delta", await repeat(runs, provider_once)))
        server.assert_all_consumed()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--skip-local", action="store_true", help="skip SmolLM2 (needs vixio[local-llm])")
    parser.add_argument("--skip-remote", action="store_true", help="skip the scripted-server part")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp generation threads")
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    if not args.skip_local:
        asyncio.run(bench_local(args.runs, args.threads))
    if not args.skip_remote:
        asyncio.run(bench_remote(args.runs))


if __name__ == "__main__":
    main()
