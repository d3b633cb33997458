"""A real MCP server over stdio whose tools carry effect annotations (core/test_tool_effects.py).

Run as ``python tests/children/mcp_effects_server.py``; works with MCP SDK 1.x (``FastMCP``)
and 2.x (``MCPServer``).
"""

from __future__ import annotations

from mcp.types import ToolAnnotations

try:
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # MCP SDK 1.x
    from mcp.server.fastmcp import FastMCP as Server

server = Server("effects")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def get_weather(city: str) -> str:
    """Reads the weather."""
    return f"sunny in {city}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, idempotentHint=True,
                                         destructiveHint=False))
def set_thermostat(celsius: float) -> str:
    """Sets the thermostat: repeating it changes nothing more."""
    return f"set to {celsius}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True,
                                         idempotentHint=False))
def charge_card(amount: float) -> str:
    """Charges the card: each call charges again."""
    return f"charged {amount}"


@server.tool()
def send_email(to: str) -> str:
    """No annotations: the spec's defaults (destructive, not idempotent)."""
    return f"sent to {to}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True, destructiveHint=True))
def lookup_order(order_id: str) -> str:
    """Read-only wins: the destructive hint means nothing for a read-only tool."""
    return f"order {order_id}"


@server.tool(annotations=ToolAnnotations(title="Add note", destructiveHint=False))
def add_note(text: str) -> str:
    """Additive, not idempotent: a second call adds a second note."""
    return f"noted {text}"


if __name__ == "__main__":
    server.run()  # stdio
