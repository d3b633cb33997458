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
plain function, which ADK runs on its event loop) or ``def_pool`` (a plain
function in ADK's tool thread pool, ADK 2.x). ``tests/runtime/test_replay_guard.py``
resumes the invocation from its own process.
"""

from __future__ import annotations

import asyncio
import os
import sys
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


def _transfer(amount: int, tool_context: ToolContext) -> dict[str, str]:
    """Transfers money (a side effect: each run appends a line with the call's key)."""
    with Path(os.environ["REPLAY_EFFECTS"]).open("a") as effects:
        effects.write(f"transfer {amount} {idempotency_key(tool_context)}\n")
    _dies_at("after_effect")
    return {"status": "sent"}


async def transfer(amount: int, tool_context: ToolContext) -> dict[str, str]:
    """Transfers money (a side effect: each run appends a line with the call's key)."""
    return _transfer(amount, tool_context)


def _tool() -> Callable[..., Any]:
    """The transfer tool of the kind ``$REPLAY_KIND`` names."""
    if os.environ.get("REPLAY_KIND", "async") == "async":
        return transfer
    _transfer.__name__ = "transfer"
    return _transfer


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
    agent = LlmAgent(name="teller", tools=[_tool()],
                     model=ScriptedModel(script=[*script, ScriptedModel.say("Sent.")]))
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
