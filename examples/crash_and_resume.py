"""Crash an ADK run mid-tool, then resume the session over HealingSessionService.

Run it (offline, no API key)::

    python examples/crash_and_resume.py                      # a temporary SQLite file
    python examples/crash_and_resume.py sqlite+aiosqlite:///sessions.db

1. A child process runs a turn whose ``get_weather`` tool kills the process
   (``os._exit``) before answering: storage keeps an unanswered call.
2. This process wraps ADK's ``DatabaseSessionService`` in
   ``HealingSessionService`` and runs the user's next message. The dead call is
   healed in storage first, so the model's request in that very turn holds the
   synthetic error response, and the model can tell the user the tool failed.

Exit code 0 when the session was healed and the model saw the failure.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types

from adk_session_heal import HealingSessionService, HealRecord
from adk_session_heal.policy import DEFAULT_PAYLOAD
from adk_session_heal.testing import (
    APP_NAME,
    CRASH_EXIT_CODE,
    USER_ID,
    describe_event,
    offline_weather_model,
    spawn_crash,
    temporary_sqlite_database,
    weather_agent,
)


def print_heal(record: HealRecord) -> None:
    """The on_heal callback: a metrics counter in production, a print here."""
    print(f"   on_heal: {record.reason} call(s) {list(record.call_ids)} healed "
          f"by {record.synthetic_event_id} [{record.trigger.value}]")


async def crash_and_resume(db_url: str) -> bool:
    """Runs the scenario against ``db_url``; returns whether it healed."""
    inner = DatabaseSessionService(db_url)
    try:
        session = await inner.create_session(app_name=APP_NAME, user_id=USER_ID)
        code = spawn_crash(db_url, session.id)
        print(f"1. the turn's process died in get_weather (exit code {code})")

        service = HealingSessionService(inner, on_heal=print_heal)
        model = offline_weather_model()
        runner = Runner(app_name=APP_NAME, agent=weather_agent(model), session_service=service)
        print("2. the user comes back: 'hello?'")
        message = types.Content(role="user", parts=[types.Part(text="hello?")])
        async for event in runner.run_async(
            user_id=USER_ID, session_id=session.id, new_message=message
        ):
            print(f"   {event.author}: {describe_event(event)}")

        stored = await inner.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session.id)
        assert stored is not None
        print("3. stored history:")
        for event in stored.events:
            print(f"   {event.author:>14}: {describe_event(event)}")
        seen = [
            part.function_response.response
            for content in model.requests[0].contents
            for part in content.parts or ()
            if part.function_response is not None
        ]
        print(f"   the model's request held: {seen}")
        return code == CRASH_EXIT_CODE and seen == [dict(DEFAULT_PAYLOAD)]
    finally:
        await inner.close()


def main(argv: list[str]) -> int:
    # Show the one WARNING log line each heal writes (what an operator sees).
    logging.basicConfig(level=logging.WARNING, format="   log: %(levelname)s %(name)s %(message)s")
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    if argv:
        healed = asyncio.run(crash_and_resume(argv[0]))
    else:
        with temporary_sqlite_database() as db_url:
            healed = asyncio.run(crash_and_resume(db_url))
    print("healed" if healed else "NOT healed")
    return 0 if healed else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
