"""One charge per call: a payment tool passes its idempotency key, and is crashed at every point.

Run it (offline, no API key)::

    python examples/idempotent_payment.py

A resumable ADK app (``ResumabilityConfig(is_resumable=True)``) has a payment
tool that charges through a small fake payment API, which keeps one charge per
idempotency key, as real payment APIs do. The tool passes
``idempotency_key(tool_context)`` (from ``adk_session_heal.plugins``): the same
string on every run of one function call.

For each point where a process can die, a child process runs the turn and is
killed there (``os._exit``); this process then resumes the invocation, ADK
runs the unanswered call again, and the API sees the key it saw before:

* before the charge;
* after the charge, before the tool returns;
* after the tool returned, before its response was stored.

Each ends with exactly one charge and the call answered. For contrast, the
same runs with a key made anew on each run (what a tool that invents its own
key per request sends) charge twice where the first run had charged. Exit
code 0 when the idempotency key gave one charge at every point.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from adk_session_heal import HealingSessionService
from adk_session_heal.plugins import idempotency_key
from adk_session_heal.testing import ScriptedModel

APP, USER, SESSION = "shop", "customer", "order-1"
CRASH_POINTS = ("before_charge", "after_charge", "after_tool")


class FakePayments:
    """A payment API that applies each idempotency key once (a SQLite file stands in)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with closing(sqlite3.connect(path)) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS charges "
                       "(idempotency_key TEXT PRIMARY KEY, amount INTEGER)")

    def charge(self, amount: int, key: str) -> str:
        """Charges ``amount`` unless ``key`` was charged already; returns the receipt."""
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("INSERT OR IGNORE INTO charges VALUES (?, ?)", (key, amount))
        return f"receipt-{key[:8]}"

    def charges(self) -> int:
        """How many charges were made."""
        with closing(sqlite3.connect(self.path)) as db:
            return int(db.execute("SELECT COUNT(*) FROM charges").fetchone()[0])


def _dies_at(point: str) -> None:
    """Kills this process at ``point`` when the crashed child was asked to die there."""
    if os.environ.get("PAYMENT_CRASH") == point:
        os._exit(17)


async def pay(amount: int, tool_context: ToolContext) -> dict[str, Any]:
    """Charges the customer's card."""
    _dies_at("before_charge")
    key = (idempotency_key(tool_context) if os.environ.get("PAYMENT_KEYS") != "fresh"
           else uuid.uuid4().hex)  # the contrast: a new key on every run
    receipt = FakePayments(os.environ["PAYMENTS_DB"]).charge(amount, key)
    _dies_at("after_charge")
    return {"receipt": receipt}


class _CrashAfterTool(BasePlugin):
    """Kills the process after the tool returned, before its response is stored."""

    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                  tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        _dies_at("after_tool")
        return None


def _runner(service: HealingSessionService, *, first_turn: bool) -> Runner:
    script = [ScriptedModel.call("pay", {"amount": 5})] if first_turn else []
    agent = LlmAgent(name="cashier", tools=[pay],
                     model=ScriptedModel(script=[*script, ScriptedModel.say("Paid.")]))
    app = App(name=APP, root_agent=agent, plugins=[_CrashAfterTool("crash_after_tool")],
              resumability_config=ResumabilityConfig(is_resumable=True))
    return Runner(app=app, session_service=service)


async def first_turn(db_url: str) -> None:
    """The customer asks to pay (in the child process that may be killed)."""
    service = HealingSessionService(DatabaseSessionService(db_url))
    await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
    message = types.Content(role="user", parts=[types.Part(text="pay 5")])
    async for _ in _runner(service, first_turn=True).run_async(
            user_id=USER, session_id=SESSION, new_message=message):
        pass
    await service.close()


async def resume(db_url: str) -> bool:
    """Resumes the interrupted invocation; returns whether the call is answered now."""
    service = HealingSessionService(DatabaseSessionService(db_url))
    session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    assert session is not None
    async for _ in _runner(service, first_turn=False).run_async(
            user_id=USER, session_id=SESSION, invocation_id=session.events[-1].invocation_id):
        pass
    session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    await service.close()
    assert session is not None
    return any(r.name == "pay" for e in session.events for r in e.get_function_responses())


def crash_at(point: str, keys: str, folder: Path) -> tuple[int, int, bool]:
    """Runs the turn in a child killed at ``point``, resumes it here; (exit, charges, answered)."""
    db_url = f"sqlite+aiosqlite:///{folder / 'sessions.db'}"
    payments = FakePayments(str(folder / "payments.db"))
    os.environ.update(PAYMENTS_DB=payments.path, PAYMENT_KEYS=keys)
    child = subprocess.run(
        [sys.executable, __file__, "first-turn", db_url], check=False, capture_output=True,
        env={**os.environ, "PAYMENT_CRASH": point}, timeout=120)
    answered = asyncio.run(resume(db_url))
    return child.returncode, payments.charges(), answered


def main() -> int:
    every_point_once = True
    for keys in ("idempotency", "fresh"):
        print("with idempotency_key(tool_context):" if keys == "idempotency"
              else "for contrast, with a new key on every run:")
        for point in CRASH_POINTS:
            with tempfile.TemporaryDirectory() as folder:
                code, charges, answered = crash_at(point, keys, Path(folder))
            if keys == "idempotency":
                every_point_once &= code == 17 and charges == 1 and answered
            print(f"  killed {point.replace('_', ' ')} (exit code {code}), resumed in another "
                  f"process: {charges} charge(s), call answered: {answered}")
    print("one charge at every point" if every_point_once else "NOT one charge at every point")
    return 0 if every_point_once else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["first-turn"]:
        asyncio.run(first_turn(sys.argv[2]))
    else:
        sys.exit(main())
