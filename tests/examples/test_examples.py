"""Every example runs as its docstring says: the documented command, in its own process, from the
repository's root (a config's ports moved to free ones, so tests can run beside a server)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from vixio.testing.device import SimulatedDevice
from vixio.testing.llm_server import Reply, ScriptedLLMServer

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LISTENING = re.compile(r"OTA (http://\S+/xiaozhi/ota/)")


def documented_command(example: str) -> list[str]:
    """The command line of `example`'s docstring (`python examples/<name>.py ...`), to run here."""
    docstring = (EXAMPLES / example).read_text(encoding="utf-8").split('"""')[1]
    line = next(
        line.strip() for line in docstring.splitlines() if line.strip().startswith(f"python examples/{example}")
    )
    return [sys.executable, *line.split()[1:]]


# --- three_stations.py -----------------------------------------------------------------------------


async def _three_stations(stdin: int) -> asyncio.subprocess.Process:
    command = documented_command("three_stations.py")
    assert command[1:] == ["examples/three_stations.py"]
    return await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, stdin=stdin, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )


async def _line(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None
    return (await asyncio.wait_for(process.stdout.readline(), 20)).decode().rstrip("\n")


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "typed"])
async def test_three_stations_answers_typed_lines_and_stop_interrupts(terminal: bool) -> None:
    if terminal:  # a pseudo-terminal, as when a person types
        master, slave = os.openpty()
        process = await _three_stations(slave)
        os.close(slave)

        def write(text: str) -> None:
            os.write(master, text.encode())

        def end() -> None:
            os.write(master, b"\x04")  # Ctrl-D
    else:
        process = await _three_stations(asyncio.subprocess.PIPE)
        assert process.stdin is not None
        stdin = process.stdin
        master = -1

        def write(text: str) -> None:
            stdin.write(text.encode())

        def end() -> None:
            stdin.close()

    try:
        assert "Type a line" in await _line(process)
        write("hello from a three station pipeline\n")
        assert await _line(process) == "< HELLO FROM A THREE STATION PIPELINE"
        write("this answer is a long one and will be cut off before its end by the stop below\n")
        write("stop\n")  # the words still stream, 50 ms each
        assert await _line(process) == "< (interrupted: user said stop)"
        write("one more\n")
        assert await _line(process) == "< ONE MORE"
        end()
        assert await asyncio.wait_for(process.wait(), 20) == 0
        assert process.stdout is not None
        rest = (await process.stdout.read()).decode()
        assert "CUT OFF" not in rest and "Traceback" not in rest
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if master >= 0:
            os.close(master)


# --- agent_with_device_tools.py ----------------------------------------------------------------------


class Example:
    """The example server in its own process group, its output in a file."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process, self.log = process, log

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    async def ota_url(self, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = LISTENING.search(self.text())
            if found:
                return found.group(1)
            if self.process.returncode is not None:
                raise AssertionError(f"the example exited with {self.process.returncode}:\n{self.text()}")
            await asyncio.sleep(0.2)
        raise AssertionError(f"the example did not start in {timeout} s:\n{self.text()}")

    async def ctrl_c(self) -> int:
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return await asyncio.wait_for(self.process.wait(), 60)
        except TimeoutError:
            # PYTHONFAULTHANDLER: SIGABRT writes every thread's stack to the log, to say where it hung.
            os.killpg(self.process.pid, signal.SIGABRT)
            await asyncio.wait_for(self.process.wait(), 10)
            raise AssertionError(f"the example did not stop within 60 s of Ctrl-C:\n{self.text()[-6000:]}") from None

    def kill(self) -> None:
        if self.process.returncode is None:
            os.killpg(self.process.pid, signal.SIGKILL)


def _ctrl_c_as_in_a_terminal() -> None:
    """In the example's process: SIGINT as a terminal delivers it. A shell that starts the test
    run in the background (`nohup ... &`) makes its jobs ignore SIGINT, which every process
    below inherits, and Python then installs no KeyboardInterrupt handler: Ctrl-C did nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def start_example(tmp_path: Path, config_text: str) -> Example:
    """The documented command, with config.yaml replaced by `config_text` (free ports, loopback)."""
    command = documented_command("agent_with_device_tools.py")
    assert command[1:] == ["examples/agent_with_device_tools.py", "--config", "config.yaml"]
    config = tmp_path / "config.yaml"
    config.write_text(config_text, encoding="utf-8")
    log = tmp_path / "example.log"
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            *command[:-1],
            str(config),
            cwd=ROOT,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
            preexec_fn=_ctrl_c_as_in_a_terminal,
            env={**os.environ, "VIXIO_NOTES_DIR": str(tmp_path / "notes"), "PYTHONFAULTHANDLER": "1"},
        )
    return Example(process, log)


def on_free_loopback_ports(config_text: str) -> str:
    text = re.sub(r"^(\s*)host: 0\.0\.0\.0", r"\1host: 127.0.0.1", config_text, flags=re.M)
    text = re.sub(r"^(\s*)port: 800[03]\b", r"\1port: 0", text, flags=re.M)
    assert text.count("port: 0") == 2, "config.yaml's two ports moved?"
    return text


async def ask(device: SimulatedDevice, text: str, timeout: float = 120) -> list[str]:
    mark = device.mark()
    await device.send_text(text)
    await device.wait_for("tts", state="stop", after=mark, timeout=timeout)
    return [
        m.data["text"] for m in device.received[mark:] if m.type == "tts" and m.data.get("state") == "sentence_start"
    ]


async def test_agent_with_device_tools_runs_on_the_default_config(tmp_path: Path) -> None:
    # config.yaml as shipped: local SmolLM2 (offline), Whisper, Piper, Silero.
    example = await start_example(tmp_path, on_free_loopback_ports((ROOT / "config.yaml").read_text(encoding="utf-8")))
    try:
        ota_url = await example.ota_url()
        async with SimulatedDevice(ota_url=ota_url) as device:
            await device.connect()
            sentences = await ask(device, "hello, who are you?")
            assert sentences and all(s.strip() for s in sentences), sentences
            assert len(device.decoded_audio()) / 2 / device.server_sample_rate > 0.5  # Piper spoke
        assert await example.ctrl_c() == 0
        assert "Traceback" not in example.text()
    finally:
        example.kill()


async def test_agent_with_device_tools_calls_the_devices_and_its_own_tools(
    tmp_path: Path, llm: ScriptedLLMServer
) -> None:
    example = await start_example(
        tmp_path,
        f"""
xiaozhi: {{host: 127.0.0.1, port: 0, idle_timeout: 0, http: {{host: 127.0.0.1, port: 0}}}}
agent: {{provider: litellm, model: openai/test-model, api_base: "{llm.base_url}", api_key: test}}
""",
    )
    try:
        ota_url = await example.ota_url()
        async with SimulatedDevice(ota_url=ota_url) as device:
            await device.connect()
            deadline = time.monotonic() + 10
            while not any(r.get("method") == "tools/list" for r in device.mcp_requests):
                assert time.monotonic() < deadline, "the server never asked for the device's tools"
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # the list's answer reaches the agent
            llm.expect(
                Reply.tool_call("self_audio_speaker_set_volume", {"volume": 30}),
                Reply.tool_call("take_note", {"text": "buy milk"}),
                Reply.text("Volume set to 30. Noted."),
            )
            assert await ask(device, "volume 30 and note buy milk") == ["Volume set to 30.", "Noted."]
            assert device.status.volume == 30
            assert "buy milk" in next((tmp_path / "notes").glob("*.json")).read_text(encoding="utf-8")
            assert {"self_audio_speaker_set_volume", "take_note", "get_weather"} <= set(llm.tool_names(0))
        assert await example.ctrl_c() == 0
        assert "Traceback" not in example.text()
    finally:
        example.kill()
    llm.assert_all_consumed()


# --- my_tools.py -------------------------------------------------------------------------------------


def test_my_tools_load_from_the_config_its_docstring_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from vixio.config.models import VixioConfig
    from vixio.voice.stack import VoiceStack

    docstring = (EXAMPLES / "my_tools.py").read_text(encoding="utf-8").split('"""')[1]
    snippet = docstring.split("\n\n")[1]  # the indented `tools:` block
    tools = yaml.safe_load(snippet)["tools"]
    monkeypatch.chdir(ROOT)  # its paths are relative to where `vixio serve` runs
    config = VixioConfig.model_validate(
        {"agent": {"provider": "litellm", "model": "openai/x"}, "tools": {**tools, "builtin": []}}
    )
    voice = VoiceStack(config)
    loaded = {tool.name: tool for tool in voice.local_tools}
    assert set(loaded) == {"take_note", "read_notes", "check_website"}
    assert loaded["check_website"].is_async and loaded["check_website"].timeout == 20
    session = voice.session_tools("s")
    assert session is not None and session.toolset.policy.timeout_for(loaded["check_website"]) == 20
