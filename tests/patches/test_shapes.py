"""What each patch in `vixio/patches/` relies on, checked against the installed libraries.

A library release that renames or reshapes one of these fails here, by name, before a patch
silently stops applying (each `install()` falls back to the library's own path when a name is
missing, which would only show as a slower server). The installed version must also be one the
patch was checked against: bumping a library means reading its patch again, then adding the
version to that module's `CHECKED`.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from vixio.patches import installed_version

pytestmark = pytest.mark.unit


def _has(module: str, *names: str) -> None:
    loaded = importlib.import_module(module)
    missing = [name for name in names if not hasattr(loaded, name)]
    assert not missing, f"{module} no longer has {missing}: the patch in vixio/patches/ relying on it needs a look"


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


@pytest.mark.parametrize("module_name", ["openai_agents", "openai_sdk", "websockets", "llama_cpp", "aiohttp"])
def test_the_installed_version_is_one_the_patch_was_checked_against(module_name: str) -> None:
    module = importlib.import_module(f"vixio.patches.{module_name}")
    version = installed_version(module.DISTRIBUTION)
    if version is None:
        pytest.skip(f"{module.DISTRIBUTION} is not installed")
    assert version.startswith(module.CHECKED), (
        f"{module.DISTRIBUTION} {version} is installed but vixio/patches/{module_name}.py was checked against "
        f"{module.CHECKED}: read the patch against this version, then add it to CHECKED"
    )


def test_httpcore_versions_are_checked() -> None:
    from vixio.patches import httpcore

    for name, checked in httpcore.CHECKED.items():
        version = installed_version(name)
        assert version is None or version.startswith(checked), f"{name} {version} is not in {checked}"


def test_openai_agents_shape() -> None:
    pytest.importorskip("agents")
    _has("agents.util._json", "_to_dump_compatible_internal")
    _has("agents.run_state", "_clone_original_input", "_build_agent_identity_map")
    _has("agents.util._asyncio_tasks", "gather_with_cancel")
    _has("agents._run_state_agent_identity", "_build_agent_identity_map", "_iter_agent_graph")
    _has("agents.run_internal.tool_use_tracker", "_build_agent_identity_map")
    from vixio.patches.openai_agents import _MODULES

    for name in _MODULES:  # each module gathers through its own imported name
        _has(name, "gather_with_cancel")
    tasks = importlib.import_module("agents.util._asyncio_tasks")
    assert "on_child_failure" in _parameters(tasks.gather_with_cancel)


def test_openai_sdk_shape() -> None:
    pytest.importorskip("openai")
    _has("openai.resources.chat.completions.completions", "async_maybe_transform")
    _has("openai._utils._transform", "PropertyInfo", "is_given")
    base_client = importlib.import_module("openai._base_client")
    assert _parameters(base_client.BaseClient._process_response_data) == ["self", "data", "cast_to", "response"]
    assert "_strict_response_validation" in inspect.signature(importlib.import_module("openai").AsyncOpenAI).parameters


@pytest.mark.parametrize("backend", ["httpcore2._backends.anyio", "httpcore._backends.anyio"])
def test_httpcore_shape(backend: str) -> None:
    module = pytest.importorskip(backend)
    _has(backend, "AnyIOStream", "is_socket_readable")
    assert _parameters(module.AnyIOStream.write) == ["self", "buffer", "timeout"]
    assert _parameters(module.AnyIOStream.get_extra_info) == ["self", "info"]
    _has("anyio.abc", "SocketAttribute")
    stream = importlib.import_module("anyio._backends._asyncio").SocketStream
    source = inspect.getsource(stream)
    for name in ("_send_guard", "_transport", "_protocol", "_closed", "write_event"):
        assert name in source, f"anyio's SocketStream no longer uses {name}: vixio/patches/httpcore.py reads it"


def test_websockets_shape() -> None:
    from websockets.asyncio.connection import Connection
    from websockets.asyncio.server import ServerConnection
    from websockets.frames import Frame
    from websockets.protocol import Protocol

    from vixio.patches import websockets as patch

    assert patch._AVAILABLE, "websockets lost Connection.process_event or Frame(opcode, data, fin)"
    assert patch._CLASS_API, "websockets lost send_context or Protocol.send_binary/send_text/data_to_send"
    assert hasattr(ServerConnection, "process_event") and hasattr(Connection, "send_context")
    assert {"opcode", "data", "fin"} <= set(Frame.__dataclass_fields__)
    assert all(hasattr(Protocol, name) for name in ("send_binary", "send_text", "data_to_send"))
    assert "send_in_progress" in inspect.getsource(Connection.__init__)


async def test_websockets_server_keeps_its_protocol_factory() -> None:
    from websockets.asyncio.server import serve

    from vixio.patches.websockets import protocol_factory

    async def handler(connection: object) -> None:
        return None

    async with serve(handler, "127.0.0.1", 0) as server:
        assert callable(protocol_factory(server))


def test_llama_cpp_shape() -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    low_level = importlib.import_module("llama_cpp.llama_cpp")
    assert callable(llama_cpp.llama_print_system_info)
    assert hasattr(low_level.llama_model_default_params(), "use_extra_bufts")


async def test_aiohttp_runner_builds_the_chosen_server_class_with_aiohttps_settings() -> None:
    from aiohttp import web

    from vixio.patches.aiohttp import ServerClassRunner

    class Marked(web.Server):
        def __init__(self, *args: object, mark: str, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            self.mark = mark

    class Runner(ServerClassRunner):
        server_class = Marked

        def server_arguments(self) -> dict[str, object]:
            return {"mark": "vixio"}

    assert inspect.iscoroutinefunction(web.AppRunner._make_server)
    runner = Runner(web.Application(), keepalive_timeout=7)
    await runner.setup()
    try:
        server = runner.server
        assert isinstance(server, Marked) and server.mark == "vixio"
        assert server._kwargs.get("keepalive_timeout") == 7, "aiohttp's server settings no longer in _kwargs"
    finally:
        await runner.cleanup()


def test_aiohttp_request_writer_shape() -> None:
    module = importlib.import_module("aiohttp.client_reqrep")
    assert hasattr(module, "asyncio"), (
        "aiohttp.client_reqrep no longer imports asyncio: the eager writer patch needs a look"
    )
    assert "asyncio.create_task" in inspect.getsource(module) or "create_task" in inspect.getsource(module), (
        "aiohttp.client_reqrep no longer starts its body writer with create_task"
    )
