"""The HTTP connection cap under a flood (issue 25 §3), against `vixio serve --workers 2`.

Under `ulimit -n 1024`, one address opens 1,000 idle connections to the HTTP port. Refused
connections get a 503 and are closed before aiohttp builds anything for them (before, each one
over the cap left a `Task exception was never retrieved ... assert manager is not None`
traceback), the refusals make about one log line a second with a count, and a device's OTA
request from another address gets through while the flood holds its share.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from vixio.serve.supervisor import reuse_port_supported
from vixio.testing.serve import ServeProcess

pytestmark = [pytest.mark.process, pytest.mark.skipif(not reuse_port_supported(), reason="workers are Linux only")]

FLOOD = 1000
HEADERS = {"Device-Id": "aa:bb:cc:dd:ee:07", "Client-Id": "flood-test", "Content-Type": "application/json"}


def _low_fd_limit() -> None:
    """Run in the server's process before exec: `ulimit -n 1024` (the workers inherit it)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


async def _connect_from(source: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.bind((source, 0))
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def _answer(sock: socket.socket, timeout: float = 2.0) -> bytes:
    """What the server wrote before closing (b"" when it said nothing within `timeout`)."""
    loop = asyncio.get_running_loop()
    data = b""
    try:
        while chunk := await asyncio.wait_for(loop.sock_recv(sock, 4096), timeout):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


async def test_one_address_flooding_the_http_port_leaves_ota_to_devices(tmp_path: Path) -> None:
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > FLOOD + 200, "the test itself needs the descriptors"
    config = tmp_path / "config.yaml"
    config.write_text(
        """
xiaozhi:
  host: 127.0.0.1
  port: 0
  idle_timeout: 0
  http: {host: 127.0.0.1, port: 0}
""",
        encoding="utf-8",
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vixio",
            "serve",
            "--config",
            str(config),
            "--workers",
            "2",
            stdout=sink,
            stderr=sink,
            start_new_session=True,
            preexec_fn=_low_fd_limit,
        )
    serve = ServeProcess(process, log)
    flood: list[socket.socket] = []
    try:
        await serve.wait_ready()
        port = int(serve.ota_url.split(":")[2].split("/")[0])
        started = time.monotonic()
        for _ in range(FLOOD):
            flood.append(await _connect_from("127.0.0.1", port))
        # A device on another address gets its OTA answer while the flood holds its connections.
        connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0), force_close=True)
        async with aiohttp.ClientSession(connector=connector) as http:
            for _ in range(3):
                async with http.post(
                    serve.ota_url, headers=HEADERS, data="{}", timeout=aiohttp.ClientTimeout(total=10)
                ) as response:
                    assert response.status == 200
                    assert (await response.json())["websocket"]["url"].startswith("ws://127.0.0.1:")
        # The flood's over-share connections were answered 503 and closed; the admitted ones idle.
        answers = await asyncio.gather(*(_answer(sock) for sock in flood[-50:]))
        assert all(answer.startswith(b"HTTP/1.1 503 ") for answer in answers), answers[:3]
        # The flood's own address is refused, not starved of the port for good: it may keep its share.
        refused = await _connect_from("127.0.0.1", port)
        assert (await _answer(refused)).startswith(b"HTTP/1.1 503 ")
        refused.close()
        elapsed = time.monotonic() - started
    finally:
        for sock in flood:
            sock.close()
        await serve.stop()
    text = serve.text()
    assert "Traceback" not in text and "Task exception was never retrieved" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if "HTTP: refused" in line]
    assert 1 <= len(lines) <= elapsed + 3, lines  # about one a second
    refused_total = sum(int(line.split("HTTP: refused ")[1].split()[0]) for line in lines)
    assert refused_total >= FLOOD - 64, lines  # every refusal counted (the default share is 64)
    assert "127.0.0.1" in lines[0] and "max_connections_per_address" in lines[0]


def test_the_share_counts_ipv4_by_address_and_ipv6_by_its_64() -> None:
    from vixio.transports.xiaozhi.http.limits import address_key

    assert address_key(("192.168.1.5", 4000)) == "192.168.1.5"
    assert address_key(("::ffff:192.168.1.5", 4000, 0, 0)) == "192.168.1.5"
    assert (
        address_key(("2001:db8:1:2::7", 4000, 0, 0))
        == address_key(("2001:db8:1:2:ffff::1", 1, 0, 0))
        == "2001:db8:1:2::/64"
    )
    assert address_key(("2001:db8:1:3::7", 4000, 0, 0)) != address_key(("2001:db8:1:2::7", 4000, 0, 0))
    assert address_key("") == address_key(None) == "local"
