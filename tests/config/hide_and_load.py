"""Load providers with one of their modules hidden, as `vixio serve` loads them (run by
test_extras_table.py: `python hide_and_load.py CASES`, CASES a JSON list of [module, config]).

One interpreter imports what every case shares (the config, the voice stack's module), then forks
one child per case, two at a time: the child hides the module and loads what the config needs.
A fresh interpreter per case paid ~1.5 s of imports 29 times. A fork is this interpreter before
any of the case's modules was imported; a case whose module the shared imports did pull in runs in
a fresh interpreter (`--fresh`), which hides the module before importing anything, so hiding
always means something. Prints one JSON list: each case's exit code (3: the load raised) and the
last line it printed (what it raised, or "loaded").
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from typing import Any


def load(module: str, config: dict[str, Any] | None) -> int:
    sys.modules[module] = None  # type: ignore[assignment]  # `import` of it (and its submodules) now fails
    try:
        if config is None:  # the transport: its servers' modules, an Opus encoder, a resampler
            import vixio.app.server  # noqa: F401
            from vixio.core.audio import resample
            from vixio.transports.xiaozhi.protocol.codec import OpusEncoder

            OpusEncoder()
            resample(bytes(320), 16000, 24000)
        else:
            from vixio.config import parse_config
            from vixio.voice.stack import VoiceStack

            parsed = parse_config(config, environ={})
            if parsed.state.backend != "sqlite":  # the store's client: opened as serve does, before any model
                from vixio.state import open_store

                open_store(parsed.state, parsed.memory)
            elif parsed.mqtt.enabled:  # the broker's front, imported as the owning process does
                from vixio.app.mqtt import front_class

                front_class()
            elif parsed.vision is not None:
                from vixio.app.vision import VisionModel

                asyncio.run(VisionModel(parsed.vision).load())
            else:
                asyncio.run(VoiceStack(parsed).load())
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return 3
    print("loaded", flush=True)
    return 0


def _last_line(out: Any) -> str:
    out.seek(0)
    lines = out.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def _fresh(module: str, config: dict[str, Any] | None) -> dict[str, Any]:
    with tempfile.TemporaryFile() as out:
        run = subprocess.run(
            [sys.executable, __file__, "--fresh", json.dumps([module, config])],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=300,
        )
        return {"code": run.returncode, "error": _last_line(out), "stderr": run.stderr.decode(errors="replace")[-400:]}


def main(cases: list[tuple[str, dict[str, Any] | None]]) -> list[dict[str, Any]]:
    import vixio.config  # noqa: F401  - what every case imports first
    import vixio.voice.stack  # noqa: F401

    results: list[dict[str, Any]] = [{} for _ in cases]
    running: dict[int, tuple[int, Any, Any]] = {}

    def finish(pid: int, status: int) -> None:
        index, out, err = running.pop(pid)
        err.seek(0)
        stderr = err.read().decode(errors="replace")[-400:]
        results[index] = {"code": os.waitstatus_to_exitcode(status), "error": _last_line(out), "stderr": stderr}
        out.close()
        err.close()

    for index, (module, config) in enumerate(cases):
        if any(name == module or name.startswith(module + ".") for name in sys.modules):
            results[index] = _fresh(module, config)
            continue
        if len(running) == 2:  # two at a time: the machine's cores
            finish(*os.wait())
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            code = 4
            try:
                code = load(module, config)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        running[pid] = (index, out, err)
    while running:
        finish(*os.wait())
    return results


if __name__ == "__main__":
    if sys.argv[1] == "--fresh":
        module, config = json.loads(sys.argv[2])
        sys.exit(load(module, config))
    print(json.dumps(main(json.loads(sys.argv[1]))))
