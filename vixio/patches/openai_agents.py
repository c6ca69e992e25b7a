"""openai-agents' per-turn work that cannot change the result, done directly: three patches.

1. **Input copies** (~0.75 ms of loop CPU per turn): the run's input is copied four times a turn
   by generic walkers; a plain-JSON history gets a direct copy.
2. **Hook gathers** (15 loop iterations before each model call's first token): lifecycle hooks,
   prompt getters and tool `is_enabled` checks that finish at once run without a task each.
3. **Agent identity map** (~0.2 ms of loop CPU per turn): the per-agent configuration signature
   is skipped when no two agents of the run share a name.

Checked against openai-agents 0.24; on another version `install()` logs one line and
patches nothing (`vixio.patches.allowed`). What upstream would need, per patch: an exact-type
fast path in `agents.util._json._to_dump_compatible_internal` and a JSON-aware
`agents.run_state._clone_original_input`; a `gather_with_cancel` that steps each coroutine once
before making it a task; `_build_agent_identity_map` skipping the sort key of a group of one.
The measurements behind each are in its section below.
"""

from __future__ import annotations

import asyncio
import contextvars
import types
from collections.abc import Awaitable, Callable
from typing import Any

from loguru import logger

from vixio.core.eager import continuation
from vixio.patches import allowed, load

DISTRIBUTION = "openai-agents"
CHECKED = ("0.24.",)
"""openai-agents versions these patches were checked against (prefixes)."""


def install() -> bool:
    """Install the three patches once; True when all are in place."""
    if not allowed(DISTRIBUTION, CHECKED, "the run's input copies, hook gathers and identity map"):
        return False
    return all([_install_copies(), _install_gather(), _install_identity()])


# --- 1. Input copies -----------------------------------------------------------------------------
# Copy a run's input the direct way: openai-agents walks the whole conversation four times a turn.
#
# Each `Runner.run_streamed` of openai-agents 0.24 copies its input (the conversation so far, up
# to `max_history_messages` items, 40 by default) with `_to_dump_compatible` three to five times
# (`ItemHelpers.input_to_new_input_list`, the chat-completions request) and once more with
# `copy.deepcopy` (`RunState._original_input`). Both are generic: `_to_dump_compatible` asks
# `isinstance(node, Mapping)` and then `isinstance(node, Iterable)` of every dict, list and string
# of the tree (ABC checks, about a microsecond each), and deepcopy keeps a memo and dispatches per
# node. For a 40-item history (2-core EPYC VM) a `_to_dump_compatible` takes ~120 µs and the clone
# ~100 µs: ~0.5 ms of event-loop time per turn, plus the garbage, during which no other session runs.
#
# vixio's history is plain JSON (dicts, lists, strings, numbers, booleans, None). For exactly
# those types, `install()` gives both copies a direct path that builds the same result:
# `_to_dump_compatible` a new dict for a dict and a new list for a list or tuple, every other
# plain value as it is; the input clone a new dict/list tree. Any other node (a pydantic model, a
# mapping or iterable of another type) is handed to the SDK's own function, which then does
# exactly what it did before. The direct paths take ~33 and ~29 µs; a turn of
# `OpenAIAgentProvider` against an instant local server costs ~0.75 ms less loop CPU (4.9 -> 4.1 ms).
# Applied only to the openai-agents versions it was checked against;
# upstream would need an exact-type fast path in `agents.util._json._to_dump_compatible_internal`
# and a JSON-aware clone in `agents.run_state._clone_original_input`.

_SCALARS = frozenset({str, int, float, bool, type(None)})


class _NotPlain(Exception):
    """A node the direct copy does not handle: the whole input goes to deepcopy."""


def _install_copies() -> bool:
    """Patch both copies once; True when the direct paths are in place."""
    try:
        json_module = load("agents.util._json")
        state_module = load("agents.run_state")
    except ImportError:
        return False
    dump = json_module._to_dump_compatible_internal
    if not getattr(dump, "vixio_fast_path", False):
        json_module._to_dump_compatible_internal = _dump_compatible(dump)
    clone = state_module._clone_original_input
    if not getattr(clone, "vixio_fast_path", False):
        state_module._clone_original_input = _clone_input(clone)
    logger.debug("openai-agents: plain-JSON input copied directly")
    return True


def _dump_compatible(original: Any) -> Any:
    """`_to_dump_compatible_internal` with plain dicts, lists, tuples and scalars handled here
    (the SDK's function recurses through the module global, so nested nodes come here too)."""

    def dump(obj: Any) -> Any:
        kind = type(obj)
        if kind in _SCALARS:
            return obj
        if kind is dict:
            return {key: dump(value) for key, value in obj.items()}
        if kind is list or kind is tuple:
            return [dump(item) for item in obj]
        return original(obj)

    dump.vixio_fast_path = True  # type: ignore[attr-defined]
    dump.original = original  # type: ignore[attr-defined]
    return dump


def _clone_input(original: Any) -> Any:
    """`_clone_original_input` building a plain-JSON input's copy directly (deepcopy otherwise)."""

    def clone(original_input: Any) -> Any:
        if type(original_input) is list:
            try:
                return plain_copy(original_input)
            except _NotPlain:
                pass
        return original(original_input)

    clone.vixio_fast_path = True  # type: ignore[attr-defined]
    clone.original = original  # type: ignore[attr-defined]
    return clone


def plain_copy(value: Any) -> Any:
    """A new tree of dicts and lists holding the same scalars; `_NotPlain` at any other node."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {key: plain_copy(item) for key, item in value.items()}
    if kind is list:
        return [plain_copy(item) for item in value]
    raise _NotPlain(kind.__name__)


# --- 2. Hook gathers ----------------------------------------------------------------------------
# Run openai-agents' per-turn hooks without a round of tasks when they finish at once.
#
# Before each model call openai-agents gathers its lifecycle hooks and prompt getters with
# `gather_with_cancel`: a task per awaitable, `asyncio.gather`, `asyncio.wait` — five loop
# iterations per gather even when every awaitable is a no-op that returns on its first step
# (the default hooks, a string system prompt). Three such gathers come before the request is sent,
# so a turn waits 15 extra loop iterations for its first token, and on a busy server each one
# waits behind every other session's work (at 100 devices on 2 cores, ~15 ms apiece).
#
# The agent's tool list is gathered the same way before each model call (each tool's `is_enabled`,
# a plain bool for every tool vixio builds: three more iterations on the way to the first token).
# After every model response, even one without tool calls, the SDK gathers its six tool executors
# (function tools, computer, custom, shell, apply-patch, local shell) and again each function tool's
# `is_enabled`: a dozen tasks per answer while its speech is being synthesised; then the end-of-turn
# hooks.
#
# `install()` gives those modules (run loop, turn preparation, agent, turn resolution, tool
# planning and tool execution) a `gather_with_cancel` that
# first steps each coroutine once, in a copy of the caller's context (as a task would). Those
# that return are done; one that suspends continues in a task of its own, with that same context
# and the awaitable it is waiting for, and from then on the SDK's semantics apply (wait for all,
# cancel and drain the siblings when one fails or the caller is cancelled). A tool call that waits
# (for the device, say) is such a continuation, and function tools still run concurrently: the SDK
# starts a task per call itself. Applied only to the openai-agents versions it was checked against.

_MODULES = (
    "agents.run_internal.run_loop",
    "agents.run_internal.turn_preparation",
    "agents.agent",
    "agents.run_internal.turn_resolution",
    "agents.run_internal.tool_planning",
    "agents.run_internal.tool_execution",
)


def _install_gather() -> bool:
    """Patch the hook gathers once; True when the fast path is in place."""
    try:
        tasks_module = load("agents.util._asyncio_tasks")
        modules = [load(name) for name in _MODULES]
    except ImportError:
        return False
    original = tasks_module.gather_with_cancel
    patched = False
    for module in modules:
        current = getattr(module, "gather_with_cancel", None)
        if getattr(current, "vixio_eager", False):
            patched = True
        elif current is original:
            module.gather_with_cancel = eager_gather_with_cancel
            patched = True
    if patched:
        logger.debug("openai-agents: hooks that finish at once are gathered without tasks")
    return patched


async def eager_gather_with_cancel(
    *awaitables: Awaitable[Any], on_child_failure: Callable[[BaseException], None] | None = None
) -> tuple[Any, ...]:
    """`agents.util._asyncio_tasks.gather_with_cancel`, without tasks for what finishes at once."""
    results: list[Any] = [None] * len(awaitables)
    pending: list[tuple[int, asyncio.Future[Any]]] = []
    failure: BaseException | None = None
    resumed = False
    for index, awaitable in enumerate(awaitables):
        # Every awaitable starts, as with the SDK's tasks, even after a sibling failed.
        if not isinstance(awaitable, types.CoroutineType):
            pending.append((index, asyncio.ensure_future(awaitable)))
            continue
        context = contextvars.copy_context()
        try:
            yielded = context.run(awaitable.send, None)
        except StopIteration as done:
            results[index] = done.value
            continue
        except BaseException as error:  # noqa: BLE001 - re-raised below, after the siblings are drained
            failure = failure or error
            continue
        task = asyncio.get_running_loop().create_task(continuation(awaitable, yielded), context=context)
        pending.append((index, task))
        resumed = True
    if resumed:
        # Let the continuations take over what their coroutines wait for before anything may
        # cancel them: a task cancelled before its first step would never reach the coroutine.
        try:
            await asyncio.sleep(0)
        except BaseException:
            for _, future in pending:
                future.cancel()
            await asyncio.gather(*(future for _, future in pending), return_exceptions=True)
            raise
    if failure is not None:
        for _, future in pending:
            future.cancel()
        await asyncio.gather(*(future for _, future in pending), return_exceptions=True)
        if on_child_failure is not None:
            on_child_failure(failure)
        raise failure
    if not pending:
        return tuple(results)
    tasks_module = load("agents.util._asyncio_tasks")
    gathered = await tasks_module.gather_with_cancel(
        *(future for _, future in pending), on_child_failure=on_child_failure
    )
    for (index, _), value in zip(pending, gathered, strict=True):
        results[index] = value
    return tuple(results)


eager_gather_with_cancel.vixio_eager = True  # type: ignore[attr-defined]


# --- 3. Agent identity map -----------------------------------------------------------------------
# Skip openai-agents' agent signatures when no two agents of a run share a name.
#
# openai-agents 0.24 builds an identity map of the run's agent graph (name -> agent) at least twice
# per run (`SandboxRuntimeSessionManager`, `serialize_tool_use_tracker`). It exists to tell apart
# agents that share a name: each such group is sorted by a signature of each agent's whole
# configuration (its instructions, model settings via `dataclasses.asdict`, every tool's schema)
# rendered as JSON. But the key is computed for every agent, also in a group of one, where there
# is nothing to sort: ~80-110 µs of event-loop time per map for vixio's one agent with a few tools
# (2-core EPYC VM), ~0.2 ms per turn, during which no other session runs.
#
# When every agent in the graph has its own name, the SDK's map is `{agent.name: agent}` in the
# graph's traversal order (each group of one maps its name to its only agent; no `name#2` key is
# ever made). `install()` gives the map that direct path and hands any graph with a repeated name
# to the SDK's function, which then does exactly what it did before. Applied only to the
# openai-agents versions it was checked against; upstream would need `_build_agent_identity_map`
# to skip the sort key of a group of one.

_IDENTITY_MODULE = "agents._run_state_agent_identity"
_IMPORTERS = ("agents.run_internal.tool_use_tracker", "agents.run_state")
"""Modules that imported `_build_agent_identity_map` by name (their own reference is replaced too)."""


def _install_identity() -> bool:
    """Patch the identity map once; True when the direct path is in place."""
    try:
        identity = load(_IDENTITY_MODULE)
        importers = [load(name) for name in _IMPORTERS]
        original = identity._build_agent_identity_map
        iterate = identity._iter_agent_graph
    except (ImportError, AttributeError):
        return False
    if getattr(original, "vixio_fast_path", False):
        return True
    fast = _identity_map(original, iterate)
    # `_build_agent_identity_keys_by_id` (which the sandbox runtime imported) reads the module's.
    identity._build_agent_identity_map = fast
    for module in importers:
        if getattr(module, "_build_agent_identity_map", None) is original:
            module._build_agent_identity_map = fast
    logger.debug("openai-agents: identity map of a graph without repeated names built directly")
    return True


def _identity_map(original: Any, iterate: Any) -> Any:
    def build_agent_identity_map(initial_agent: Any) -> dict[str, Any]:
        ordered = list(iterate(initial_agent))
        mapping = {agent.name: agent for agent in ordered}
        if len(mapping) != len(ordered):  # a repeated name: the SDK orders that group by signature
            return original(initial_agent)  # type: ignore[no-any-return]
        return mapping

    build_agent_identity_map.vixio_fast_path = True  # type: ignore[attr-defined]
    build_agent_identity_map.original = original  # type: ignore[attr-defined]
    return build_agent_identity_map
