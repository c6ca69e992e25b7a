"""`vixio tools list | call | parse` as a separate process against a live server."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from tests.console.conftest import Live
from tests.console.test_console_api import VCP_BLOCK
from vixio.console.cli import ApiError, call_arguments

pytestmark = pytest.mark.process


async def vixio_tools(live: Live, *args: str, stdin: str = "", token: str | None = None) -> tuple[int, str, str]:
    command = [sys.executable, "-m", "vixio", "tools", *args, "--url", live.base]
    if token is not None:
        command += ["--token", token]
    process = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_list_call_and_parse(live: Live) -> None:
    code, out, _ = await vixio_tools(live, "list", "--session", "any")
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("self_audio_speaker_set_volume"))
    assert "device" in line and "(self.audio_speaker.set_volume)" in line and "query,30s" in line
    code, out, _ = await vixio_tools(live, "list", "--json")
    assert code == 0 and {t["name"] for t in json.loads(out)["tools"]} >= {"get_time", "get_date"}

    code, out, _ = await vixio_tools(
        live, "call", "self.audio_speaker.set_volume", "volume=30", "--session", live.device.device_id
    )
    assert code == 0 and out.startswith("completed in ") and out.splitlines()[1] == "true"
    assert live.device.status.volume == 30
    code, out, _ = await vixio_tools(live, "call", "self_audio_speaker_set_volume", '{"volume": 101}', "-s", "any")
    assert code == 1 and "Error:" in out and live.device.status.volume == 30

    code, out, _ = await vixio_tools(live, "parse", "--protocol", "vcp", stdin=VCP_BLOCK)
    assert code == 0
    assert out.splitlines()[0] == '[vcp] self_audio_speaker_set_volume {"volume": "30"}  id=vol-1'
    assert "spoken: 'Sure, let me turn it down.'" in out

    code, _, err = await vixio_tools(live, "call", "get_time", "--session", "no-such-device")
    assert code == 2 and "no live session 'no-such-device'" in err


@pytest.mark.parametrize("live", [{"admin_token": "cli-token-for-tests"}], indirect=True)
async def test_token(live: Live) -> None:
    code, _, err = await vixio_tools(live, "list", token="")
    assert code == 2 and "401" in err
    code, out, _ = await vixio_tools(live, "list", token="cli-token-for-tests")
    assert code == 0 and "get_time" in out


def test_call_arguments() -> None:
    assert call_arguments(['{"a": [1, 2]}']) == {"a": [1, 2]}
    assert call_arguments(["volume=30", "name=kitchen", "on=true", "tags=[1]"]) == {
        "volume": 30,
        "name": "kitchen",
        "on": True,
        "tags": [1],
    }
    with pytest.raises(ApiError):
        call_arguments(["volume"])
    with pytest.raises(ApiError):
        call_arguments(["{nope"])
