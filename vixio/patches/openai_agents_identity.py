"""Skip openai-agents' agent signatures when no two agents of a run share a name.

openai-agents 0.24 builds an identity map of the run's agent graph (name -> agent) at least twice
per run (`SandboxRuntimeSessionManager`, `serialize_tool_use_tracker`). It exists to tell apart
agents that share a name: each such group is sorted by a signature of each agent's whole
configuration (its instructions, model settings via `dataclasses.asdict`, every tool's schema)
rendered as JSON. But the key is computed for every agent, also in a group of one, where there
is nothing to sort: ~80-110 µs of event-loop time per map for vixio's one agent with a few tools
(2-core EPYC VM), ~0.2 ms per turn, during which no other session runs.

When every agent in the graph has its own name, the SDK's map is `{agent.name: agent}` in the
graph's traversal order (each group of one maps its name to its only agent; no `name#2` key is
ever made). `install()` gives the map that direct path and hands any graph with a repeated name
to the SDK's function, which then does exactly what it did before. Applied only to the
openai-agents versions it was checked against; upstream would need `_build_agent_identity_map`
to skip the sort key of a group of one.
"""

from __future__ import annotations

import importlib
from typing import Any

from loguru import logger

_CHECKED_VERSIONS = ("0.24.",)
_IDENTITY_MODULE = "agents._run_state_agent_identity"
_IMPORTERS = ("agents.run_internal.tool_use_tracker", "agents.run_state")
"""Modules that imported `_build_agent_identity_map` by name (their own reference is replaced too)."""


def install() -> bool:
    """Patch the identity map once; True when the direct path is in place."""
    try:
        import agents

        identity = importlib.import_module(_IDENTITY_MODULE)
        importers = [importlib.import_module(name) for name in _IMPORTERS]
        original = identity._build_agent_identity_map
        iterate = identity._iter_agent_graph
    except (ImportError, AttributeError):
        return False
    if not str(getattr(agents, "__version__", "")).startswith(_CHECKED_VERSIONS):
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
