"""A live (``Runner.run_live``) app with ToolRunLedgerPlugin whose streaming tool runs until killed.

``live_stream.py URL SESSION_ID`` opens a live run on the session and says
"watch the price": the scripted live model calls ``watch_price`` (call id
``live-1``), an async generator function, which ADK runs as a stream: it
appends a line to ``$LIVE_EFFECTS`` (its side effect, with the call's
idempotency key), then yields a price every twentieth of a second, for good.
The test kills the process (SIGKILL) while it streams.

The app is also what ``tests/runtime/test_live_streaming.py`` runs in its own
process (:func:`runner`): the same agent, tool and model, whose model sends the
call again (same id) when the user asks "are you still watching?", and when a
connection it asked ADK to resume ("reconnect": a resumption handle, then
``go_away``) opens.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from live_runs import LiveRun

from adk_session_heal.ledger import SqlToolRunLedger
from adk_session_heal.plugins import ToolRunLedgerPlugin, idempotency_key
from adk_session_heal.testing import LiveSent, ScriptedLiveModel

APP = "live_app"
CALL_ID = "live-1"
LEASE_SECONDS = 1.0
ASK, ASK_AGAIN, RECONNECT = "watch the price", "are you still watching?", "reconnect"


def watch_price_tool(effects: Path, stop: asyncio.Event | None = None) -> Callable[..., Any]:
    """The streaming tool: its side effect once, then prices until ``stop`` is set (or forever)."""

    # No return annotation: ADK builds the tool's response schema from it, and pydantic has
    # none for an async iterator.
    async def watch_price(symbol: str, tool_context: ToolContext):
        """Streams a symbol's price, registering a watch first (a side effect)."""
        with effects.open("a") as lines:
            lines.write(f"watch {symbol} {idempotency_key(tool_context)}\n")
        tick = 0
        while stop is None or not stop.is_set():
            yield {"symbol": symbol, "price": 100 + tick}
            tick += 1
            await asyncio.sleep(0.05)

    return watch_price


def _call() -> LlmResponse:
    return ScriptedLiveModel.call("watch_price", {"symbol": "ADK"}, call_id=CALL_ID)


def model_side(sent: LiveSent) -> list[LlmResponse]:
    """The model: calls ``watch_price`` as ``live-1`` when asked, and again under the same id
    when asked again or when a connection it had ADK resume opens."""
    if sent.text in (ASK, ASK_AGAIN):
        return [_call()]
    if sent.text == RECONNECT:
        return [LlmResponse(live_session_resumption_update=types.LiveServerSessionResumptionUpdate(
                    new_handle="resume-1", resumable=True)),
                LlmResponse(go_away=types.LiveServerGoAway(time_left="0s"))]
    if sent.kind == "open" and sent.connection.index > 0:
        return [_call()]
    return []


def runner(service: BaseSessionService, plugins: list[Any], effects: Path,
           stop: asyncio.Event | None = None, tools: list[Any] | None = None) -> Runner:
    """The live app: a watcher agent over the scripted live model, with ``watch_price``."""
    agent = LlmAgent(name="watcher", model=ScriptedLiveModel(script=model_side),
                     tools=[watch_price_tool(effects, stop), *(tools or [])])
    return Runner(app_name=APP, agent=agent, session_service=service, plugins=plugins)


def model_of(live_runner: Runner) -> ScriptedLiveModel:
    """The runner's scripted live model."""
    model = live_runner.agent.model  # type: ignore[union-attr]
    assert isinstance(model, ScriptedLiveModel)
    return model


async def main(url: str, session_id: str) -> None:
    """Streams until this process is killed."""
    service = DatabaseSessionService(url)
    ledger = SqlToolRunLedger.from_url(url)
    plugin = ToolRunLedgerPlugin(ledger, lease_seconds=LEASE_SECONDS)
    async with LiveRun(runner(service, [plugin], Path(os.environ["LIVE_EFFECTS"])),
                       session_id) as live:
        live.say(ASK)
        await asyncio.Event().wait()  # the stream runs on; the test kills this process


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

