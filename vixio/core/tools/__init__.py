"""Tool abstractions (ToolDefinition, DeviceToolClientBase, ToolConverterBase).

Filled by the tools work (seed 000 §5); core stays free of any agent framework import.
"""
