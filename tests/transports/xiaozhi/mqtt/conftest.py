"""The external broker the MQTT tests run against: Debian's mosquitto with vixio's plugin
(deploy/mosquitto/vixio_devices.c), compiled for the test."""

from __future__ import annotations

import asyncio
import getpass
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
PLUGIN = ROOT / "deploy" / "mosquitto" / "vixio_devices.c"
MOSQUITTO = "/usr/sbin/mosquitto"
SECRET = "mosquitto-test-secret-0123456789"
SERVER_PASSWORD = "vixio-server-password-0123"

HAVE_MOSQUITTO = (
    Path(MOSQUITTO).exists() and Path("/usr/include/mosquitto_broker.h").exists() and shutil.which("cc") is not None
)
NEEDS_MOSQUITTO = pytest.mark.skipif(
    not HAVE_MOSQUITTO,
    reason="needs Debian's mosquitto, mosquitto-dev, "
    "libmosquitto-dev and a C compiler (scripts/ensure_test_packages.sh)",
)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def mosquitto(tmp_path: Path) -> AsyncIterator[int]:
    plugin = tmp_path / "vixio_devices.so"
    await asyncio.to_thread(
        subprocess.run,
        ["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(plugin), str(PLUGIN), "-lcrypto"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"""listener {port} 127.0.0.1
allow_anonymous false
persistence false
log_dest stderr
user {getpass.getuser()}
plugin {plugin}
plugin_opt_secret {SECRET}
plugin_opt_server_username vixio
plugin_opt_server_password {SERVER_PASSWORD}
""")
    log = (tmp_path / "mosquitto.log").open("wb")
    process = await asyncio.create_subprocess_exec(MOSQUITTO, "-c", str(conf), stdout=log, stderr=log)
    try:
        for _ in range(100):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                assert process.returncode is None, (tmp_path / "mosquitto.log").read_text()
                await asyncio.sleep(0.05)
        yield port
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()
        log.close()
