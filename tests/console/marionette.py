"""A minimal Marionette client: drives headless Firefox without geckodriver (which Debian does
not package). Marionette is Firefox's own remote protocol: length-prefixed JSON over TCP,
`[0, id, command, params]` → `[1, id, error, result]`."""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any


def firefox_binary() -> str | None:
    return shutil.which("firefox-esr") or shutil.which("firefox")


class Firefox:
    def __init__(self, binary: str, profile: Path, *, timeout: float = 60.0) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "user.js").write_text('user_pref("marionette.port", 0);\n')  # Firefox picks a free port
        self._process = subprocess.Popen(
            [binary, "--headless", "--marionette", "--no-remote", "--profile", str(profile), "--window-size=1360,900"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "MarionetteActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self._process.poll() is not None:
                self.close()
                raise RuntimeError("Firefox did not start Marionette")
            time.sleep(0.1)
        self._socket = socket.create_connection(("127.0.0.1", int(port_file.read_text())), timeout=timeout)
        self._buffer = b""
        self._ids = itertools.count(1)
        self._read()  # the server's greeting
        self.command("WebDriver:NewSession", {"capabilities": {}})

    def _read(self) -> Any:
        while b":" not in self._buffer:
            self._buffer += self._recv()
        size, _, rest = self._buffer.partition(b":")
        while len(rest) < int(size):
            rest += self._recv()
        self._buffer = rest[int(size) :]
        return json.loads(rest[: int(size)])

    def _recv(self) -> bytes:
        data = self._socket.recv(1 << 20)
        if not data:
            raise RuntimeError("Firefox closed the Marionette connection")
        return data

    def command(self, name: str, params: dict[str, Any]) -> Any:
        message = json.dumps([0, next(self._ids), name, params]).encode()
        self._socket.sendall(str(len(message)).encode() + b":" + message)
        _, _, error, result = self._read()
        if error:
            raise RuntimeError(f"{name}: {error}")
        return result

    def get(self, url: str) -> None:
        self.command("WebDriver:Navigate", {"url": url})

    def js(self, script: str) -> Any:
        return self.command("WebDriver:ExecuteScript", {"script": script, "args": []})["value"]

    def wait(self, script: str, timeout: float = 30.0) -> Any:
        """Run `script` until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(script)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.1)

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
