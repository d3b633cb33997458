"""A real MCP server over stdio with one side effect: ``transfer`` (children/replay_guard.py).

Run as ``python tests/children/mcp_transfer_server.py`` with ``$REPLAY_EFFECTS``
set: each call appends ``transfer AMOUNT KEY`` to that file (the key is the
call's idempotency key, which the client passes), then runs ``$REPLAY_LONG``
seconds. With ``$REPLAY_CRASH`` ``after_effect`` the call then waits for its
client to die (it is killed while the call runs) and answers nobody. Works with
MCP SDK 1.x (``FastMCP``) and 2.x (``MCPServer``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

try:
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # MCP SDK 1.x
    from mcp.server.fastmcp import FastMCP as Server

server = Server("transfers")


@server.tool()
def transfer(amount: int, key: str = "") -> str:
    """Transfers money: each call transfers again."""
    with Path(os.environ["REPLAY_EFFECTS"]).open("a") as effects:
        effects.write(f"transfer {amount} {key}\n")
    time.sleep(float(os.environ.get("REPLAY_LONG", "0")))
    if os.environ.get("REPLAY_CRASH") == "after_effect":
        client = os.getppid()
        while os.getppid() == client:  # until the client is killed (this is re-parented)
            time.sleep(0.05)
    return f"sent {amount}"


if __name__ == "__main__":
    server.run()  # stdio
