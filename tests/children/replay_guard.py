"""A resumable ADK app (2.x) with ToolRunLedgerPlugin, killed at one point of a tool turn.

``replay_guard.py URL SESSION_ID POINT`` runs one turn whose ``transfer`` tool
appends a line to ``$REPLAY_EFFECTS`` (its side effect, with the call's
idempotency key) and kills the process with ``os._exit(17)`` at POINT:

* ``before_start``: in a plugin's before-tool callback, before the ledger's
  start record (the call is only announced);
* ``after_effect``: inside the tool, after its side effect (started, never finished);
* ``after_finish``: after the ledger recorded the tool's finish, before ADK
  stored its response.

``batch`` kills a parallel batch of two transfers (5 and 7) once the 5 has
finished and while the 7 waits before its start (announced only).
``$REPLAY_KIND`` picks the kind of tool: ``async`` (the default), ``def`` (a
plain function, which ADK runs on its event loop), ``def_pool`` (a plain
function in ADK's tool thread pool, ADK 2.x), ``async_gen`` and ``gen`` (an
async and a plain generator, which ADK 2.x runs as a node: a progress message,
then the result), ``long_running`` (a ``LongRunningFunctionTool``),
``agent_tool`` (an ``AgentTool`` named ``transfer`` whose agent calls
``send_money``, which makes the transfer in the agent's own session; the
``after_finish`` point is the ``AgentTool``'s), ``single_turn`` (the same agent
as a ``mode="single_turn"`` sub-agent, which ADK 2.x runs as a tool in the
teller's session) or ``mcp`` (``transfer`` of
``mcp_transfer_server.py``, a real MCP server over stdio, given the call's key
by a plugin; ``after_effect`` kills this process once the server made the
transfer). ``$REPLAY_LONG`` seconds: the transfer runs that long after its
side effect (its lease renewed meanwhile) before it returns or dies.
``tests/runtime/test_replay_guard.py`` and ``test_replay_guard_kinds.py``
resume the invocation from their own process.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.plugins import ToolRunLedgerPlugin, idempotency_key
from adk_session_heal.testing import ScriptedModel

APP, USER = "bank", "customer"
LEASE_SECONDS = 1.0


def _dies_at(point: str) -> None:
    if os.environ.get("REPLAY_CRASH") == point:
        os._exit(17)


def _kind() -> str:
    return os.environ.get("REPLAY_KIND", "async")


def _long() -> float:
    """How long the transfer runs after its side effect (``$REPLAY_LONG`` seconds)."""
    return float(os.environ.get("REPLAY_LONG", "0"))


def _effect(amount: int, tool_context: ToolContext) -> None:
    """The side effect: appends a line with the call's idempotency key."""
    with Path(os.environ["REPLAY_EFFECTS"]).open("a") as effects:
        effects.write(f"transfer {amount} {idempotency_key(tool_context)}\n")


def _transfer(amount: int, tool_context: ToolContext) -> dict[str, str]:
    """Transfers money (a side effect: each run appends a line with the call's key)."""
    _effect(amount, tool_context)
    time.sleep(_long())  # holds ADK's loop (or a pool thread) the whole time
    _dies_at("after_effect")
    return {"status": "sent"}


async def transfer(amount: int, tool_context: ToolContext) -> dict[str, str]:
    """Transfers money (a side effect: each run appends a line with the call's key)."""
    _effect(amount, tool_context)
    await asyncio.sleep(_long())
    _dies_at("after_effect")
    return {"status": "sent"}


def _progress(amount: int) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=f"sending {amount}")])


# The generators have no return annotation: ADK 2.13 builds the tool's response schema
# from it, and pydantic has none for an iterator of Content.
async def _transfer_stream(amount: int, tool_context: ToolContext):
    """Transfers money, saying so first (an async generator: a message, then the result)."""
    yield _progress(amount)
    _effect(amount, tool_context)
    await asyncio.sleep(_long())
    _dies_at("after_effect")
    yield {"status": "sent"}


def _transfer_steps(amount: int, tool_context: ToolContext):
    """Transfers money, saying so first (a plain generator: a message, then the result)."""
    yield _progress(amount)
    _effect(amount, tool_context)
    time.sleep(_long())
    _dies_at("after_effect")
    yield {"status": "sent"}


def _send_money(amount: int, tool_context: ToolContext) -> dict[str, str]:
    """Sends money (the inner tool of the ``agent_tool`` and ``single_turn`` kinds)."""
    return _transfer(amount, tool_context)


def _named(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    function.__name__ = name
    return function


MCP_SERVER = Path(__file__).resolve().parent / "mcp_transfer_server.py"


def _sender(**mode: str) -> LlmAgent:
    """The agent of the ``agent_tool`` and ``single_turn`` kinds: it calls ``send_money``."""
    return LlmAgent(name="transfer", description="Makes a transfer.", **mode,
                    tools=[_named(_send_money, "send_money")],
                    model=ScriptedModel(script=[ScriptedModel.call("send_money", {"amount": 5}),
                                                ScriptedModel.say("Sent 5.")]))


def _tools() -> tuple[list[Any], list[LlmAgent]]:
    """The teller's tools (or toolset) and sub-agents for the kind ``$REPLAY_KIND`` names."""
    kind = _kind()
    if kind == "async":
        return [transfer], []
    if kind in ("def", "def_pool"):
        return [_named(_transfer, "transfer")], []
    if kind == "async_gen":
        return [_named(_transfer_stream, "transfer")], []
    if kind == "gen":
        return [_named(_transfer_steps, "transfer")], []
    if kind == "long_running":
        from google.adk.tools.long_running_tool import LongRunningFunctionTool
        return [LongRunningFunctionTool(_named(_transfer, "transfer"))], []
    if kind == "agent_tool":
        from google.adk.tools.agent_tool import AgentTool
        return [AgentTool(_sender())], []
    if kind == "single_turn":  # ADK 2.x offers it to the model as a tool of its own
        return [], [_sender(mode="single_turn")]
    if kind == "mcp":
        from google.adk.tools.mcp_tool import McpToolset, StdioConnectionParams
        from mcp import StdioServerParameters
        server = StdioServerParameters(command=sys.executable, args=[str(MCP_SERVER)],
                                       env=dict(os.environ))  # MCP's default env is bare
        return [McpToolset(connection_params=StdioConnectionParams(server_params=server,
                                                                   timeout=30))], []
    raise ValueError(f"unknown REPLAY_KIND {kind!r}")


class _Keyed(BasePlugin):
    """Gives the MCP transfer the call's idempotency key (the server writes it down).

    Also, at ``after_effect``, watches the effects file from a thread and kills
    this process once the server has made the transfer (the call still runs).
    """

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        if tool.name == "transfer":
            tool_args["key"] = idempotency_key(tool_context)
            if os.environ.get("REPLAY_CRASH") == "after_effect":
                threading.Thread(target=_dies_once_made, args=(tool_args["key"],),
                                 daemon=True).start()
        return None


def _dies_once_made(key: str) -> None:
    effects = Path(os.environ["REPLAY_EFFECTS"])
    while key not in effects.read_text():
        time.sleep(0.02)
    time.sleep(_long())
    os._exit(17)


def run_config() -> RunConfig | None:
    """ADK's tool thread pool for ``def_pool``; else ADK's defaults."""
    if os.environ.get("REPLAY_KIND") != "def_pool":
        return None
    from google.adk.agents.run_config import ToolThreadPoolConfig
    return RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=2))


class _Before(BasePlugin):
    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        _dies_at("before_start")
        if os.environ.get("REPLAY_CRASH") == "batch" and tool_args.get("amount") == 7:
            await asyncio.sleep(3600)  # the 7 never starts: the process dies first
        return None


class _After(BasePlugin):
    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        if tool.name == "transfer":  # the teller's call, not an agent's inner send_money
            _dies_at("after_finish")
        if tool_args.get("amount") == 5:
            _dies_at("batch")
        return None


def _batch() -> LlmResponse:
    """The model's reply calling transfer(5) and transfer(7) at once."""
    return LlmResponse(content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(id=f"t-{amount}", name="transfer",
                                                    args={"amount": amount}))
        for amount in (5, 7)]))


def runner(service: DatabaseSessionService, plugins: list[BasePlugin], *,
           first_turn: bool) -> Runner:
    """The app: the first turn calls transfer(5) (or the batch); a resumed one only answers."""
    batch = os.environ.get("REPLAY_BATCH") == "1"
    first = _batch() if batch else ScriptedModel.call("transfer", {"amount": 5})
    script = [first] if first_turn else []
    tools, sub_agents = _tools()
    agent = LlmAgent(name="teller", tools=tools, sub_agents=sub_agents,
                     model=ScriptedModel(script=[*script, ScriptedModel.say("Sent.")]))
    if _kind() == "mcp":  # after the ledger's plugin: only a call it lets run gets a key
        plugins = [*plugins, _Keyed("keyed")]
    app = App(name=APP, root_agent=agent, plugins=plugins,
              resumability_config=ResumabilityConfig(is_resumable=True))
    return Runner(app=app, session_service=service)


async def first_turn(url: str, session_id: str) -> None:
    service = DatabaseSessionService(url)
    ledger = SqlToolRunLedger.from_url(url)
    plugins: list[BasePlugin] = [_Before("before"),
                                 ToolRunLedgerPlugin(ledger, lease_seconds=LEASE_SECONDS),
                                 _After("after")]
    message = types.Content(role="user", parts=[types.Part(text="send 5")])
    async for _ in runner(service, plugins, first_turn=True).run_async(
            user_id=USER, session_id=session_id, new_message=message, run_config=run_config()):
        pass


if __name__ == "__main__":
    asyncio.run(first_turn(sys.argv[1], sys.argv[2]))
