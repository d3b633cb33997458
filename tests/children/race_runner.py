"""A live runner for the race tests: ``python race_runner.py URL SESSIONS TURNS GO``.

A real ADK ``Runner`` over a plain ``DatabaseSessionService`` (it does not heal)
runs TURNS turns of the demo's weather agent, one task per session (SESSIONS
sessions ``s000``, ``s001``, ... created beforehand) so no two turns of one
session overlap. Its ``get_weather`` tool raises half of the time, a seeded
draw: ADK stores the call and no response, as after a crash, and the session's
next turn supersedes that call. It prints ``ready`` once its imports are done,
waits for the file GO to exist, prints ``turn`` after each turn, and last one
JSON line: turns run and the unexpected errors met (a ``StaleSessionError``
would mean a healer bumped a session's revision under the runner).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types

from adk_session_heal.testing import ScriptedModel, weather_reply

APP, USER = "app", "user"
_draw = random.Random(28)


class ToolCrashed(RuntimeError):
    """The tool died before it could answer (ADK stores no response)."""


def get_weather(city: str) -> dict[str, Any]:
    """Returns the weather for a city, or dies half of the time.

    Args:
        city: The city.
    """
    if _draw.random() < 0.5:
        raise ToolCrashed(city)
    return {"city": city, "celsius": 21}


async def main(url: str, sessions: int, turns: int, go: str) -> None:
    # A SQLite file with 12 writing processes: ADK's 5 s busy timeout is too short on a
    # loaded machine (README: "SQLite lets one process write at a time").
    extra = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
    service = DatabaseSessionService(url, **extra)
    model = ScriptedModel(script=[weather_reply] * (turns * 4))
    runner = Runner(app_name=APP, agent=LlmAgent(name="weather_agent", model=model,
                                                 tools=[get_weather]),
                    session_service=service)
    await service.prepare_tables()
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
    errors: list[str] = []
    done = 0

    async def run(session_id: str, count: int) -> None:
        nonlocal done
        message = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
        for _ in range(count):
            try:
                async for _event in runner.run_async(user_id=USER, session_id=session_id,
                                                     new_message=message):
                    pass
            except ToolCrashed:
                pass
            except Exception as exc:  # reported, the test fails on it
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
            done += 1
            print("turn", flush=True)

    share, extra = divmod(turns, sessions)
    try:
        await asyncio.gather(*(run(f"s{n:03d}", share + (n < extra)) for n in range(sessions)))
    finally:
        await service.close()
    print(json.dumps({"turns": done, "errors": errors}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
