"""`vixio memory show|clear DEVICE` on a real store (an SQLite file, a redis-server)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from vixio.cli import main
from vixio.state.store import Store, StoredTurn

from .conftest import StoreFactory

pytestmark = pytest.mark.process

DEVICE = "aa:bb:cc:dd:ee:ff"


async def fill(store: Store) -> None:
    await store.admit(DEVICE, via="activation")
    await store.set_memory(DEVICE, "The user is Alice; she likes green tea.")
    await store.put_turn(DEVICE, StoredTurn("c1", 0, "my name is Alice", "Nice to meet you, Alice.", at=time.time()))
    await store.put_turn(DEVICE, StoredTurn("c1", 1, "tell me a story", "Once upon", True, at=time.time() + 1))
    await store.put_turn("02:00:00:00:00:01", StoredTurn("c2", 0, "someone else", "hi", at=time.time()))


async def test_show_then_clear_then_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], open_client: StoreFactory, state_config: dict[str, Any]
) -> None:
    await fill(await open_client())
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"state": state_config}), encoding="utf-8")  # JSON is YAML

    assert await _main(["memory", "show", DEVICE.upper(), "--config", str(config)]) == 0
    shown = capsys.readouterr().out
    assert "memory: The user is Alice; she likes green tea." in shown
    assert "user: my name is Alice" in shown and "assistant: Once upon [interrupted]" in shown
    assert "someone else" not in shown

    assert await _main(["memory", "show", DEVICE, "--config", str(config), "--json", "--turns", "1"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [t["user"] for t in body["turns"]] == ["tell me a story"] and body["memory"]["text"].startswith("The user")

    assert await _main(["memory", "clear", DEVICE, "--config", str(config)]) == 0
    assert "2 turn(s)" in capsys.readouterr().out
    assert await _main(["memory", "show", DEVICE, "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"device": DEVICE, "profile": None, "memory": None, "turns": []}

    store = await open_client()  # the other device, and the admission, are untouched
    assert len(await store.recent_turns("02:00:00:00:00:01", limit=5)) == 1 and await store.admission(DEVICE)


async def test_a_damaged_state_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.db"
    state.write_bytes(b"garbage" * 1000)
    config = tmp_path / "config.yaml"
    config.write_text(f"state:\n  path: {state}\n", encoding="utf-8")
    assert await _main(["memory", "show", DEVICE, "--config", str(config)]) == 1
    assert capsys.readouterr().err.startswith(f"vixio: state.path {state}: not a usable vixio state file")


async def _main(argv: list[str]) -> int:
    """`main` runs its own event loop: off this test's loop, in a thread."""
    import asyncio

    return await asyncio.to_thread(main, argv)


async def test_set_and_edit_replace_the_memory_within_its_bound(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    open_client: StoreFactory,
    state_config: dict[str, Any],
) -> None:
    store = await open_client()
    await fill(store)
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"state": state_config, "memory": {"max_chars": 60}}), encoding="utf-8")

    assert await _main(["memory", "set", DEVICE, "  The user is Alicia.  ", "--config", str(config)]) == 0
    assert "long-term memory set (19 characters)" in capsys.readouterr().out
    assert (await store.memory(DEVICE)).text == "The user is Alicia."  # type: ignore[union-attr]
    assert await _main(["memory", "set", DEVICE, "x" * 61, "--config", str(config)]) == 1
    assert "at most 60 (memory.max_chars)" in capsys.readouterr().err
    assert (await store.memory(DEVICE)).text == "The user is Alicia."  # type: ignore[union-attr]

    # edit: the editor gets the memory in a file and what it leaves there is the new memory.
    editor = tmp_path / "editor.sh"
    editor.write_text(
        '#!/bin/sh\ncp "$1" "$1.seen"\necho "The user is Alicia; she likes tea." > "$1"\n'
        f'cp "$1.seen" {tmp_path / "seen.txt"}\n',
        encoding="utf-8",
    )
    editor.chmod(0o755)
    monkeypatch.setenv("VISUAL", str(editor))
    assert await _main(["memory", "edit", DEVICE, "--config", str(config)]) == 0
    assert (tmp_path / "seen.txt").read_text(encoding="utf-8") == "The user is Alicia.\n"
    assert (await store.memory(DEVICE)).text == "The user is Alicia; she likes tea."  # type: ignore[union-attr]
    monkeypatch.setenv("VISUAL", "false")
    assert await _main(["memory", "edit", DEVICE, "--config", str(config)]) == 1
    assert "exited with 1; the memory is unchanged" in capsys.readouterr().err

    assert await _main(["memory", "set", DEVICE, "", "--config", str(config)]) == 0
    assert await store.memory(DEVICE) is None


@pytest.mark.parametrize("command", [["memory", "show"], ["memory", "clear"], ["profile", "show"]])
def test_a_device_id_with_a_newline_is_a_usage_error(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("{}", encoding="utf-8")
    extra = ["--config", str(config)] if command[0] == "memory" else ["--url", "http://127.0.0.1:9"]
    with pytest.raises(SystemExit) as info:
        main([*command, "aa:bb\nforged", *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "device id" in err and "'\\n'" in err
    assert not (tmp_path / ".vixio").exists()  # nothing was opened for it
