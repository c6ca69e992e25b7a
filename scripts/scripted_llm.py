"""A scripted OpenAI-compatible model on loopback (vixio.testing.llm_server), as its own process.

    python scripts/scripted_llm.py --url-file llm.url "First answer." "Second answer."

Answers each chat-completions request with the next reply, in order. Writes its base URL
(http://127.0.0.1:<port>/v1) to --url-file once it listens. On SIGINT/SIGTERM it stops and exits
1 when a request found no reply left, or a reply was never asked for; 0 otherwise. Used by
scripts/smoke_user_path.py to stand in for a cloud model with nothing else changed.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from vixio.testing.llm_server import Reply, ScriptedLLMServer


async def serve(replies: list[str], url_file: Path) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with ScriptedLLMServer(*(Reply.text(text) for text in replies)) as server:
        url_file.write_text(server.base_url)
        await stop.wait()
    try:
        server.assert_all_consumed()
    except AssertionError as exc:
        print(f"scripted model: {exc}", file=sys.stderr)
        return 1
    print(f"scripted model: answered {len(server.requests)} request(s)", file=sys.stderr)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url-file", type=Path, required=True)
    parser.add_argument("replies", nargs="+", help="the answers, one per request, in order")
    args = parser.parse_args()
    return asyncio.run(serve(args.replies, args.url_file))


if __name__ == "__main__":
    sys.exit(main())
