"""Human-in-the-loop calls through a real Runner: pending, never healed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types
from service_histories import synthetic

from adk_session_heal import CallStatus, HealingSessionService, classify
from adk_session_heal.testing import ScriptedModel


def transfer_money(amount: int) -> dict[str, Any]:
    """Moves money (needs the user's confirmation first)."""
    return {"moved": amount}


def start_report(topic: str) -> None:
    """Starts a long report; the result is posted back later (nothing now)."""


async def run(runner: Runner, session_id: str, text: str) -> None:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id="u", session_id=session_id, new_message=message):
        pass


async def test_unconfirmed_and_long_running_calls_are_never_healed(tmp_path: Path) -> None:
    """A tool awaiting confirmation and a long-running tool stay pending across turns."""
    inner = DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path}/hitl.db")
    service = HealingSessionService(inner, on_heal=lambda record: heals.append(record))
    heals: list[Any] = []
    model = ScriptedModel(script=[
        ScriptedModel.call("transfer_money", {"amount": 10}),
        ScriptedModel.say("Waiting for your confirmation."),
        ScriptedModel.call("start_report", {"topic": "q3"}),
        ScriptedModel.say("The report is running."),
        ScriptedModel.say("Hello!"),
    ])
    agent = LlmAgent(
        name="bank", model=model, instruction="Help.",
        tools=[FunctionTool(transfer_money, require_confirmation=True),
               LongRunningFunctionTool(start_report)],
    )
    runner = Runner(app_name="bank_app", agent=agent, session_service=service)
    session = await service.create_session(app_name="bank_app", user_id="u")

    await run(runner, session.id, "send 10")
    await run(runner, session.id, "also start the q3 report")
    await run(runner, session.id, "hello?")

    stored = await inner.get_session(app_name="bank_app", user_id="u", session_id=session.id)
    assert stored is not None
    findings = classify(stored.events, now=time.time())
    statuses = {(c.name, c.status) for c in findings.calls}
    assert ("adk_request_confirmation", CallStatus.PENDING) in statuses
    assert ("transfer_money", CallStatus.PENDING) in statuses
    assert ("start_report", CallStatus.PENDING) in statuses
    assert not findings.needs_healing
    assert synthetic(stored.events) == [] and heals == []
    await inner.close()
