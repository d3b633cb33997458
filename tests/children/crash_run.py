"""A real ADK run that dies mid-tool: ``python crash_run.py KIND URL SESSION_ID``.

KIND is ``database`` (DatabaseSessionService) or ``adk_sqlite`` (ADK's
SqliteSessionService; URL is then the file path). The demo's weather agent runs
with a scripted offline model that calls ``get_weather``; the tool kills this
process with ``os._exit`` (the demo's crash switch), so storage keeps the
user's message and the unanswered call, as after a real crash.
"""

from __future__ import annotations

import asyncio
import os
import sys

from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from adk_session_heal import testing as demo
from adk_session_heal.testing import ScriptedModel


async def main(kind: str, url: str, session_id: str) -> None:
    service = DatabaseSessionService(url) if kind == "database" else SqliteSessionService(url)
    model = ScriptedModel(script=[ScriptedModel.call("get_weather", {"city": "Paris"})])
    runner = demo.build_runner(service, model)
    message = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
    async for _ in runner.run_async(user_id=demo.USER_ID, session_id=session_id,
                                    new_message=message):
        pass


if __name__ == "__main__":
    os.environ[demo.CRASH_ENV] = "1"
    asyncio.run(main(*sys.argv[1:4]))
