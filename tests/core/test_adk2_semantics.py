"""ADK 2.x semantics with the real Runner: abort seals, task scopes, resumable apps."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from paths import CHILDREN

from adk_session_heal import HealingSessionService, HealPolicy
from adk_session_heal.core.adk_compat import ADK_VERSION, INVOCATION_ABORTED
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.testing import History, ScriptedModel

APP, USER = "app", "user"

needs_abort_seal = pytest.mark.skipif(ADK_VERSION < (2, 11), reason="ADK 2.11+ seals aborts")
needs_resume = pytest.mark.skipif(ADK_VERSION < (2, 10), reason="ADK 2.10+ resumes invocations")


def _healed(events: list[Event]) -> list[Event]:
    return [e for e in events if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)]


async def _slow_tool(city: str) -> dict[str, str]:
    """A tool that never returns on its own."""
    await asyncio.sleep(3600)
    return {"city": city}


@needs_abort_seal
async def test_a_call_sealed_by_adks_own_abort_is_never_healed() -> None:
    """A run aborted in process is sealed by ADK itself; the wrapper adds nothing after it."""
    inner = InMemorySessionService()
    service = HealingSessionService(inner, HealPolicy(stale_after=0, clock_skew=0))
    model = ScriptedModel(script=[ScriptedModel.call("_slow_tool", {"city": "Paris"})])
    runner = Runner(app_name=APP, agent=LlmAgent(name="a", model=model, tools=[_slow_tool]),
                    session_service=service)
    session = await service.create_session(app_name=APP, user_id=USER)
    abort = asyncio.Event()
    message = types.Content(role="user", parts=[types.Part(text="weather?")])
    async for event in runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=message, abort_signal=abort):
        if event.get_function_calls():
            await asyncio.sleep(0.1)  # the tool is running
            abort.set()
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    assert [e.error_code for e in stored.events][-1] == INVOCATION_ABORTED
    for _ in range(3):
        read = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert read is not None and _healed(read.events) == []
    again = await inner.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert again is not None and len(again.events) == len(stored.events)


@needs_abort_seal
async def test_a_heal_closes_the_crashed_invocations_task_scope_as_adks_seal_does() -> None:
    """ADK's runner finds no active task scope once the crashed invocation's call is healed."""
    from google.adk.runners import _find_active_task_scope  # ADK's own scope resolution

    inner = InMemorySessionService()
    history = History()
    history.user("book a trip")
    history.call("search_flights", {"to": "Rome"})
    history.user("are you there?")
    events = [e.model_copy(update={"isolation_scope": "task-1"}) if e.get_function_calls()
              else e for e in history.events]
    session = await inner.create_session(app_name=APP, user_id=USER)
    for event in events:
        await inner.append_event(session, event)
    assert _find_active_task_scope(session) == ("task-1", events[1].invocation_id)

    healed = await HealingSessionService(inner).get_session(
        app_name=APP, user_id=USER, session_id=session.id)
    assert healed is not None
    (heal,) = _healed(healed.events)
    assert heal.isolation_scope == "task-1"
    assert heal.error_code == INVOCATION_ABORTED
    assert _find_active_task_scope(healed) is None


def _crash_then_resume(tmp_path: Path, stale_after: str) -> dict[str, int]:
    """Runs resumable_run.py: a real resumable app dies mid-tool, then is resumed."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'resumable.db'}"
    env = {**os.environ, "RESUMABLE_COUNTER": str(tmp_path / "tool_starts"),
           "PYTHONWARNINGS": "ignore"}
    crashed = subprocess.run(
        [sys.executable, str(CHILDREN / "resumable_run.py"), "crash", url, "s"],
        env=env, capture_output=True, text=True, timeout=120)
    assert crashed.returncode == 3, crashed.stderr  # the tool's os._exit
    with closing(sqlite3.connect(tmp_path / "resumable.db")) as db:
        (invocation_id,) = db.execute("SELECT invocation_id FROM events LIMIT 1").fetchone()
    resumed = subprocess.run(
        [sys.executable, str(CHILDREN / "resumable_run.py"), "resume", url, "s", invocation_id,
         stale_after], env=env, capture_output=True, text=True, timeout=120, check=True)
    result: dict[str, int] = json.loads(resumed.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
@needs_resume
def test_a_resumed_invocation_replays_its_unfinished_call_by_default(tmp_path: Path) -> None:
    """Resuming a crashed resumable invocation re-runs its tool; no heal fakes a failure."""
    assert _crash_then_resume(tmp_path, "none") == {"tool_starts": 2, "heals": 0}


@pytest.mark.slow
@needs_resume
def test_a_resumed_invocation_is_healed_instead_when_the_policy_says_so(tmp_path: Path) -> None:
    """With stale_after set, the crashed call is healed on resume and the tool not re-run."""
    assert _crash_then_resume(tmp_path, "0") == {"tool_starts": 1, "heals": 1}
