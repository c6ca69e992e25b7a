"""The user's path, end to end: install what `make serve` installs, serve, ask, stop.

    python3 scripts/smoke_user_path.py --config config.yaml
    python3 scripts/smoke_user_path.py --config config.yaml --config config.zh.yaml  # zh: a scripted model

1. `make install-config` into a fresh venv, from a fresh copy of the checkout (its tracked and
   unignored files): vixio's core and the extras this config needs, nothing else (no test
   extras); the configs of `EMPTY_CACHE` (both shipped ones) install without any pip cache, so the
   time printed is a new user's (a config that needs llama-cpp-python would compile it). Several configs install at the
   same time (their downloads overlap), each from its own copy; then they are served in turn.
2. `vixio serve` from that venv with the config as shipped, except its two ports (free ones,
   so a server already running here does not collide) and, for a config whose model is a cloud
   API, its `api_base`: a scripted OpenAI-compatible model on loopback (scripts/scripted_llm.py).
3. Once the banner prints the `vixio device` command, runs it with `--text` and with `--wav`
   (a speech fixture): each must get a spoken answer (text on screen, audio frames played).
4. SIGINT: the server must exit 0 with no traceback and no ERROR line in its log.

Exits 0 when all of that holds; otherwise 1, with the reason and that config's logs' tails.
Uses only the standard library, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 600.0
"""Seconds for every worker to load its models on a busy 2-core machine."""
ANSWER_TIMEOUT = 120.0
"""Seconds `vixio device` waits for each answer (a cold first turn on a busy machine)."""
EMPTY_CACHE = {"config.yaml", "config.zh.yaml"}
"""Configs installed with an empty pip cache, timed: the first install a new user waits for (both
install from wheels only: the local model runs on ONNX Runtime, agent.runtime: onnx)."""
TRY_LINE = re.compile(r"Try: (\S+) device --ota (http://\S+)")

# Per shipped config: what to say, and the scripted answers when its model is a cloud API.
CASES = {
    "config.yaml": {"text": "what time is it", "wav": "tests/fixtures/speech/weather.wav", "replies": []},
    "config.zh.yaml": {
        "text": "现在几点了？",
        "wav": "tests/fixtures/speech_zh/weather.wav",
        "replies": ["现在是下午三点。", "今天是晴天，二十五度。"],
    },
}


class SmokeFailure(Exception):
    """What went wrong, for one line of output."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--config",
        action="append",
        choices=sorted(CASES),
        help="a shipped config (repeat for several; default: config.yaml)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the venvs and logs (their folder is printed)")
    args = parser.parse_args()
    configs = list(dict.fromkeys(args.config or ["config.yaml"]))
    work = Path(tempfile.mkdtemp(prefix="vixio-smoke-"))
    folders = {name: work / Path(name).stem for name in configs}
    started = time.monotonic()
    name = configs[0]
    try:
        with ThreadPoolExecutor(len(configs)) as pool:
            installs = [(name, pool.submit(install, name, folders[name])) for name in configs]
            for name, future in installs:  # noqa: B007 - the failing config's name is reported below
                future.result()
        for name in configs:
            serve_and_ask(name, folders[name])
    except SmokeFailure as exc:
        print(f"smoke {name}: FAILED: {exc}", file=sys.stderr)
        for log in sorted(folders[name].glob("*.log")):
            print(f"--- {log.name} (last 60 lines) ---\n{tail(log, 60)}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"smoke: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"smoke {', '.join(configs)}: OK in {time.monotonic() - started:.0f} s")
    return 0


def install(config_name: str, folder: Path) -> None:
    """A copy of the checkout in `folder`/src, and what `make serve` installs in `folder`/venv."""
    source = folder / "src"
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in listed:
        if name and (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    empty = config_name in EMPTY_CACHE
    what = "install with an empty pip cache (PIP_NO_CACHE_DIR=1)" if empty else "install (pip's cache as it is)"
    with Step(config_name)(f"{what}, make install-config"):
        install_log = folder / "install.log"
        run_logged(
            ["make", "install-config", f"VENV={folder / 'venv'}", f"CONFIG={config_name}"],
            install_log,
            cwd=source,
            env={"PIP_NO_CACHE_DIR": "1"} if empty else None,
        )
    if "Building wheel for llama-cpp-python" in install_log.read_text():
        print(f"smoke {config_name}: note: pip compiled llama-cpp-python (no cached wheel)", file=sys.stderr)


def serve_and_ask(config_name: str, folder: Path) -> None:
    """`vixio serve` from the venv `install` made, a typed and a spoken question, SIGINT."""
    case = CASES[config_name]
    venv, source = folder / "venv", folder / "src"
    step = Step(config_name)
    llm = None
    # An empty model cache, as on a new user's machine: the time to ready includes building the
    # local model's ONNX graph from its GGUF (and anything else vixio derives on first use).
    env = {**clean_environment(), "VIXIO_CACHE_DIR": str(folder / "model-cache")}
    if case["replies"]:
        llm = start_scripted_llm(venv, source, case["replies"], folder)
        env["DEEPSEEK_API_KEY"] = "smoke-test-key"  # the scripted model takes any key
    try:
        config = derived_config(source / config_name, folder, llm_url=llm[1] if llm else None)
        server_log = folder / "server.log"
        with server_log.open("w") as log:
            server = subprocess.Popen(
                [str(venv / "bin" / "vixio"), "serve", "--config", str(config)],
                cwd=source,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            with step("time to ready (`vixio serve` until the banner: every worker loaded its models)"):
                vixio, ota_url = wait_for_banner(server, server_log, source)
            with step("typed question"):
                ask(vixio, ota_url, ["--text", case["text"]], folder / "device-text.log", spoken=False)
            with step("spoken question"):
                ask(vixio, ota_url, ["--wav", str(source / case["wav"])], folder / "device-wav.log", spoken=True)
            with step("SIGINT"):
                server.send_signal(signal.SIGINT)
                try:
                    code = server.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    raise SmokeFailure("the server did not exit within 60 s of SIGINT") from None
            if code != 0:
                raise SmokeFailure(f"the server exited with {code} after SIGINT (expected 0)")
            check_log(server_log)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
    finally:
        if llm is not None:
            stop_scripted_llm(llm[0])


class Step:
    """Prints each step's duration: `smoke config.yaml: install ... 95 s`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.current = ""

    def __call__(self, what: str) -> Step:
        self.current = what
        return self

    def __enter__(self) -> None:
        self.started = time.monotonic()

    def __exit__(self, kind: object, *rest: object) -> None:
        status = "" if kind is None else " (failed)"
        print(f"smoke {self.name}: {self.current}: {time.monotonic() - self.started:.0f} s{status}", flush=True)


def clean_environment() -> dict[str, str]:
    """This environment without anything that would make the venv import another checkout's code."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in part)
    return env


def run_logged(command: list[str], log: Path, *, cwd: Path, env: dict[str, str] | None = None) -> None:
    with log.open("w") as out:
        result = subprocess.run(
            command, cwd=cwd, env={**clean_environment(), **(env or {})}, stdout=out, stderr=subprocess.STDOUT
        )
    if result.returncode != 0:
        raise SmokeFailure(f"`{' '.join(command)}` exited with {result.returncode}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def derived_config(shipped: Path, work: Path, *, llm_url: str | None) -> Path:
    """The shipped config with free ports and, for a cloud model, the scripted model's URL."""
    text = shipped.read_text(encoding="utf-8")
    for shipped_port in (8000, 8003):
        text, count = re.subn(rf"^(\s+port: ){shipped_port}\b", rf"\g<1>{free_port()}", text, flags=re.M)
        if count != 1:
            raise SmokeFailure(f"{shipped.name}: expected one `port: {shipped_port}` line, found {count}")
    if llm_url is not None:
        text, count = re.subn(
            r"^(agent:\n(?:  .*\n)*?  model: \S+.*\n)", rf"\g<1>  api_base: {llm_url}\n", text, flags=re.M
        )
        if count != 1:
            raise SmokeFailure(f"{shipped.name}: no `agent:` section with a `model:` to point at the scripted model")
    derived = work / shipped.name
    derived.write_text(text, encoding="utf-8")
    return derived


def start_scripted_llm(venv: Path, source: Path, replies: list[str], work: Path) -> tuple[subprocess.Popen[bytes], str]:
    url_file = work / "llm.url"
    with (work / "scripted-llm.log").open("w") as log:
        process = subprocess.Popen(
            [
                str(venv / "bin" / "python"),
                str(source / "scripts" / "scripted_llm.py"),
                "--url-file",
                str(url_file),
                *replies,
            ],
            cwd=source,
            env=clean_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while not (url_file.exists() and url_file.read_text()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SmokeFailure("the scripted model did not start")
        time.sleep(0.1)
    return process, url_file.read_text()


def stop_scripted_llm(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise SmokeFailure("the scripted model did not stop") from None
    if code != 0:
        raise SmokeFailure("the scripted model was not asked exactly once per question (scripted-llm.log)")


def wait_for_banner(server: subprocess.Popen[bytes], log: Path, cwd: Path) -> tuple[str, str]:
    """The `vixio device` command the banner suggests: (vixio, OTA URL)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        found = TRY_LINE.search(log.read_text(errors="replace"))
        if found:
            return str(cwd / found.group(1)), found.group(2)
        if server.poll() is not None:
            raise SmokeFailure(f"`vixio serve` exited with {server.returncode} before it was ready")
        time.sleep(0.5)
    raise SmokeFailure(f"`vixio serve` did not print its banner within {START_TIMEOUT:.0f} s")


def ask(vixio: str, ota_url: str, what: list[str], log: Path, *, spoken: bool) -> None:
    """One `vixio device` exchange; it must end with a spoken answer."""
    command = [vixio, "device", "--ota", ota_url, *what, "--timeout", str(ANSWER_TIMEOUT)]
    result = subprocess.run(
        command, env=clean_environment(), capture_output=True, text=True, timeout=ANSWER_TIMEOUT * 3
    )
    log.write_text(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        raise SmokeFailure(f"`vixio device {' '.join(what)}` exited with {result.returncode} ({log.name})")
    messages = [json.loads(line.split("] ", 1)[1]) for line in result.stdout.splitlines() if line.startswith("[")]
    said = [m.get("text", "") for m in messages if m.get("type") == "tts" and m.get("state") == "sentence_start"]
    heard = [m.get("text", "") for m in messages if m.get("type") == "stt"]
    audio = re.search(r"audio: (\d+) frames received, (\d+) played \(([\d.]+) s\)", result.stderr)
    if not any(text.strip() for text in said):
        raise SmokeFailure(f"`vixio device {' '.join(what)}`: no answer text (tts sentence_start) ({log.name})")
    if spoken and not any(text.strip() for text in heard):
        raise SmokeFailure(f"`vixio device {' '.join(what)}`: the server heard nothing (no stt text) ({log.name})")
    if not audio or int(audio.group(2)) == 0 or float(audio.group(3)) < 0.3:
        raise SmokeFailure(f"`vixio device {' '.join(what)}`: no spoken answer (audio frames played) ({log.name})")
    print(
        f"  heard {heard[-1]!r} -> said {' '.join(said)!r}; {audio.group(2)} frames ({audio.group(3)} s) played"
        if heard
        else f"  said {' '.join(said)!r}; {audio.group(2)} frames ({audio.group(3)} s) played"
    )


def check_log(log: Path) -> None:
    text = log.read_text(errors="replace")
    for bad in ("Traceback", "Fatal Python error", "| ERROR", "| CRITICAL"):
        if bad in text:
            raise SmokeFailure(f"the server log has {bad!r} ({log.name})")


def tail(path: Path, lines: int) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


if __name__ == "__main__":
    sys.exit(main())
