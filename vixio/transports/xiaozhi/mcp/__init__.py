"""Tools a device or client offers: the device MCP client, its replies as text, and `mcp/registerTools` clients."""
