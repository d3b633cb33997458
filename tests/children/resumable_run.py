"""A resumable ADK app (2.x) that dies mid-tool, then is resumed: ``python resumable_run.py``.

``resumable_run.py crash URL SESSION_ID`` runs one turn whose tool kills the
process with ``os._exit`` after counting its start; ``resumable_run.py resume
URL SESSION_ID INVOCATION_ID STALE_AFTER`` resumes that invocation through
``HealingSessionService`` (``STALE_AFTER``: ``none`` or seconds) and prints, as
JSON, how often the tool started and how many heals storage holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types

from adk_session_heal import HealingSessionService, HealPolicy
from adk_session_heal.core.event_access import HEAL_METADATA_KEY
from adk_session_heal.testing import ScriptedModel

APP, USER = "resumable", "user"
COUNTER = Path(os.environ.get("RESUMABLE_COUNTER", "tool_starts"))


async def transfer(amount: int) -> dict[str, str]:
    """Transfers money (a side effect: each start is counted)."""
    with COUNTER.open("a") as starts:
        starts.write("start\n")
    if os.environ.get("RESUMABLE_CRASH") == "1":
        os._exit(3)
    return {"status": "sent"}


def _runner(service: DatabaseSessionService | HealingSessionService, *, first_turn: bool
            ) -> Runner:
    script = [ScriptedModel.call("transfer", {"amount": 5})] if first_turn else []
    model = ScriptedModel(script=[*script, ScriptedModel.say("done")])
    agent = LlmAgent(name="banker", model=model, tools=[transfer])
    app = App(name=APP, root_agent=agent,
              resumability_config=ResumabilityConfig(is_resumable=True))
    return Runner(app=app, session_service=service)


async def crash(url: str, session_id: str) -> None:
    service = DatabaseSessionService(url)
    await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
    message = types.Content(role="user", parts=[types.Part(text="send 5")])
    os.environ["RESUMABLE_CRASH"] = "1"
    async for _ in _runner(service, first_turn=True).run_async(
            user_id=USER, session_id=session_id, new_message=message):
        pass


async def resume(url: str, session_id: str, invocation_id: str, stale_after: str) -> None:
    inner = DatabaseSessionService(url)
    policy = HealPolicy(stale_after=None if stale_after == "none" else float(stale_after),
                        clock_skew=0)  # the crash and the resume share this host's clock
    service = HealingSessionService(inner, policy)
    async for _ in _runner(service, first_turn=False).run_async(
            user_id=USER, session_id=session_id, invocation_id=invocation_id):
        pass
    stored = await inner.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    print(json.dumps({
        "tool_starts": len(COUNTER.read_text().splitlines()),
        "heals": sum(1 for e in stored.events
                     if (e.custom_metadata or {}).get(HEAL_METADATA_KEY)),
    }))
    await service.close()


if __name__ == "__main__":
    if sys.argv[1] == "crash":
        asyncio.run(crash(sys.argv[2], sys.argv[3]))
    else:
        asyncio.run(resume(*sys.argv[2:6]))
