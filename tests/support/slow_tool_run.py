"""A real ADK run whose tool takes a few seconds: ``python slow_tool_run.py KIND URL SESSION_ID``.

KIND is ``direct`` (ADK's ``DatabaseSessionService``) or ``append`` (a subclass
the wrapper writes only through ``append_event``). A ``Runner`` with a scripted
offline model calls ``slow_tool`` (it sleeps :data:`TOOL_SECONDS`), then
answers with text. The runner uses the bare service: the only healer is the
reader in the other process. Exits non-zero (with ADK's traceback) if an
append fails, e.g. with ``StaleSessionError``.
"""

from __future__ import annotations

import asyncio
import sys

from append_services import database_service
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.genai import types

from adk_session_heal.testing import ScriptedModel

TOOL_SECONDS = 3.0
FINAL_TEXT = "The slow tool finished."


async def slow_tool(job: str) -> dict[str, str]:
    """Runs for a few seconds, then reports success."""
    await asyncio.sleep(TOOL_SECONDS)
    return {"job": job, "status": "done"}


async def main(kind: str, url: str, session_id: str) -> None:
    service = database_service(kind, url)
    model = ScriptedModel(script=[ScriptedModel.call("slow_tool", {"job": "report"}),
                                  ScriptedModel.say(FINAL_TEXT)])
    agent = LlmAgent(name="worker", model=model, tools=[slow_tool])
    runner = Runner(app_name="app", agent=agent, session_service=service)
    message = types.Content(role="user", parts=[types.Part(text="Run the report.")])
    try:
        async for _ in runner.run_async(user_id="user", session_id=session_id,
                                        new_message=message):
            pass
    finally:
        await service.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
