"""Cost of the text tool protocols on the reply path: the speech filter per delta, parsing per reply.

Run: .venv/bin/python bench/bench_text_protocols.py [--rounds 200]

The speech filter runs on every LLM delta before TTS, so its budget is per delta: at most 50 µs
including everything a typical reply makes it do (holding back `<`, swallowing a call block,
releasing thinking). Replies are realistic voice answers of 150-450 characters, English and
Chinese, streamed in deltas of 3-8 characters (a token or two), with and without markup. The
parser runs once per finished reply. Times are wall-clock µs (perf_counter_ns) of single calls,
as median and 99th percentile over `--rounds` passes over all replies.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from vixio.core.tools.protocols.base import TextToolProtocol
from vixio.core.tools.protocols.vcp import VcpProtocol
from vixio.core.tools.protocols.vcp import render_call as render_vcp_call
from vixio.core.tools.protocols.xml import XmlProtocol, render_call
from vixio.core.tools.speech_filter import SpeechFilter

BUDGET_US = 50.0

PLAIN_REPLIES = [
    "Sure! Tomorrow in Paris it will be mostly sunny with a high of 21 degrees and a light breeze from the "
    "west. In the evening it cools down to about 12 degrees, so take a light jacket if you go out. If a < b "
    "then the forecast is good, and there's no rain expected before the weekend.",
    "明天北京以晴为主，最高气温二十三度，最低十二度，空气质量良好，适合户外活动。傍晚会有三到四级的北风，"
    "出门记得带一件外套。如果你要去爬山，建议早上出发，中午之前下山。",
    "Here are three ideas for dinner: a quick tomato pasta with basil, a vegetable stir-fry with rice, or "
    "a simple omelette with cheese and herbs. Each takes about twenty minutes [[roughly]] and uses what most "
    "kitchens already have.",
]
MARKUP_REPLIES = [
    "Okay, I'll turn the volume down for you.\n"
    + render_call("self.audio_speaker.set_volume", {"volume": 30})
    + "\nDone, the volume is now at thirty percent.",
    "<think>The user wants the weather for Shanghai tomorrow; I should call the weather tool and then "
    "summarise it briefly.</think>Let me check the weather in Shanghai.\n"
    + render_call("get_weather", {"city": "Shanghai", "date": "tomorrow", "unit": "celsius"}),
    "好的，我来帮你算一下。\n<<<[TOOL_REQUEST]>>>\ntool_name:「始」SciCalculator「末」,\n"
    "expression:「始」sqrt(2) * 3 < 5「末」\n<<<[END_TOOL_REQUEST]>>>\n稍等片刻，马上就好。",
    "Here is the code:\n```python\nfor i in range(3):\n    print(i < 2 and '<ok>')\n```\nIt prints three lines; "
    "then I'll save it. "
    + render_call("write_file", {"path": "a.py", "content": "if a < b:\n    print('</parameter>')\n"}),
]

VCP_REPLIES = [
    "Okay, I'll turn the volume down for you.\n"
    + render_vcp_call("self.audio_speaker.set_volume", {"volume": 30})
    + "\nDone, the volume is now at thirty percent.",
    "<think>The user wants the weather for Shanghai tomorrow; I should call the weather tool.</think>"
    "Let me check.\n```Tool\n" + render_vcp_call("get_weather", {"city": "Shanghai", "date": "tomorrow"}) + "\n```",
    MARKUP_REPLIES[2],
    "I'll save it. " + render_vcp_call("write_file", {"path": "a.py", "content": "if a < b:\n    print('「末」')\n"}),
]
VCP_LONG_REPLY = "\n".join(  # ~4 KB: ten calls with prose between them, for the per-KB cost
    PLAIN_REPLIES[i % 3] + "\n" + render_vcp_call(f"tool_{i}", {"city": "Paris", "days": i, "tags": ["a", "b"]})
    for i in range(10)
)


def deltas(text: str, rng: random.Random) -> list[str]:
    """The reply as an LLM streams it: 3-8 characters at a time."""
    out, pos = [], 0
    while pos < len(text):
        step = rng.randint(3, 8)
        out.append(text[pos : pos + step])
        pos += step
    return out


def filter_delta_times(replies: list[str], rounds: int) -> list[float]:
    """µs per `feed` (and per final `flush`), one new filter per reply."""
    rng = random.Random(7)
    streams = [deltas(reply, rng) for reply in replies]
    times: list[float] = []
    for _ in range(rounds):
        for stream in streams:
            speech_filter = SpeechFilter()
            for delta in stream:
                start = time.perf_counter_ns()
                speech_filter.feed(delta)
                times.append((time.perf_counter_ns() - start) / 1000)
            start = time.perf_counter_ns()
            speech_filter.flush()
            times.append((time.perf_counter_ns() - start) / 1000)
    return times


def filter_reply_times(replies: list[str], rounds: int) -> list[float]:
    """µs for a whole reply through a new filter, delta by delta."""
    rng = random.Random(7)
    streams = [deltas(reply, rng) for reply in replies]
    times: list[float] = []
    for _ in range(rounds):
        for stream in streams:
            start = time.perf_counter_ns()
            speech_filter = SpeechFilter()
            for delta in stream:
                speech_filter.feed(delta)
            speech_filter.flush()
            times.append((time.perf_counter_ns() - start) / 1000)
    return times


def parse_times(protocol: TextToolProtocol, replies: list[str], rounds: int) -> list[float]:
    """µs per `protocol.parse` of a finished reply."""
    times: list[float] = []
    for _ in range(rounds):
        for reply in replies:
            start = time.perf_counter_ns()
            protocol.parse(reply)
            times.append((time.perf_counter_ns() - start) / 1000)
    return times


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="passes over all replies (default 200)")
    args = parser.parse_args()
    filter_delta_times(PLAIN_REPLIES + MARKUP_REPLIES, 5)  # warm-up
    for protocol in (XmlProtocol(), VcpProtocol()):
        parse_times(protocol, PLAIN_REPLIES + MARKUP_REPLIES, 5)

    rows = [
        ("filter per delta, plain", filter_delta_times(PLAIN_REPLIES, args.rounds)),
        ("filter per delta, markup", filter_delta_times(MARKUP_REPLIES, args.rounds)),
        ("filter per reply, plain", filter_reply_times(PLAIN_REPLIES, args.rounds)),
        ("filter per reply, markup", filter_reply_times(MARKUP_REPLIES, args.rounds)),
        ("xml parse per reply, plain", parse_times(XmlProtocol(), PLAIN_REPLIES, args.rounds)),
        ("xml parse per reply, markup", parse_times(XmlProtocol(), MARKUP_REPLIES, args.rounds)),
        ("vcp parse per reply, plain", parse_times(VcpProtocol(), PLAIN_REPLIES, args.rounds)),
        ("vcp parse per reply, markup", parse_times(VcpProtocol(), VCP_REPLIES, args.rounds)),
        ("vcp parse, 10 calls in 4 KB", parse_times(VcpProtocol(), [VCP_LONG_REPLY], args.rounds)),
    ]
    print(
        f"{args.rounds} rounds; replies of {min(map(len, PLAIN_REPLIES + MARKUP_REPLIES))}-"
        f"{max(map(len, PLAIN_REPLIES + MARKUP_REPLIES))} chars in 3-8 char deltas; times in µs"
    )
    header = f"{'measurement':<30}{'calls':>8}{'p50':>9}{'p99':>9}"
    print(header)
    print("-" * len(header))
    for name, times in rows:
        print(f"{name:<30}{len(times):>8}{statistics.median(times):>9.1f}{p99(times):>9.1f}")
    kilobytes = len(VCP_LONG_REPLY.encode()) / 1024
    print(f"vcp parse per KB: {statistics.median(rows[-1][1]) / kilobytes:.1f} µs ({kilobytes:.1f} KB reply)")
    worst = max(p99(times) for name, times in rows if "per delta" in name)
    print(
        f"per-delta budget {BUDGET_US:.0f} µs: {'met' if worst <= BUDGET_US else 'MISSED'} (worst p99 {worst:.1f} µs)"
    )


if __name__ == "__main__":
    main()
