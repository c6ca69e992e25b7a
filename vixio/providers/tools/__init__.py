"""Tool sources that live outside vixio: third-party MCP servers (stdio or HTTP).

Importing this package is cheap; openai-agents' MCP classes load when a server first connects.
"""

from vixio.providers.tools.mcp_results import call_result
from vixio.providers.tools.mcp_servers import (
    McpServerError,
    McpServerPool,
    McpServerTools,
    McpSessionServers,
    source_key,
)

__all__ = [
    "McpServerError",
    "McpServerPool",
    "McpServerTools",
    "McpSessionServers",
    "call_result",
    "source_key",
]
