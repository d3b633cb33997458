"""Writes sessions that a real ADK ``Runner`` left dead mid-tool.

``python write_crash.py URL APP [APP ...]``: for each app, a child process
(``os.fork``) runs two turns of the weather agent on ADK's own
``DatabaseSessionService``: "weather in Tokyo" completes (call, response,
reply); "weather in Paris" makes the tool ``os._exit`` after ADK stored the
call. This process then reads each session back through ADK and prints, as
its last stdout line, ``{"apps": {APP: {"call_event_id", "call_id",
"events"}}}``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from google.adk.sessions import DatabaseSessionService
from matrix_adk import (
    CRASH_EXIT_CODE,
    USER_ID,
    CheckFailed,
    build_runner,
    call_parts,
    crash_call_index,
    describe,
    emit,
    fail,
    response_parts,
    run_turn,
    session_id_for,
)


async def _crash(url: str, app_name: str) -> None:
    service = DatabaseSessionService(url)
    session_id = session_id_for(app_name)
    await service.create_session(app_name=app_name, user_id=USER_ID, session_id=session_id)
    runner = build_runner(service, app_name)
    await run_turn(runner, session_id, "What's the weather in Tokyo?")
    await run_turn(runner, session_id, "And the weather in Paris?")


def crash_in_child(url: str, app_name: str) -> None:
    """Runs the crashing turns in a forked child and checks that the tool killed it."""
    pid = os.fork()
    if pid == 0:
        try:
            asyncio.run(_crash(url, app_name))
        except BaseException as exc:  # the child reports, the parent judges
            print(f"child: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != CRASH_EXIT_CODE:
        fail(f"the writer for {app_name} ended with {code}, not the tool's crash "
             f"({CRASH_EXIT_CODE})")


async def _inspect(url: str, apps: list[str]) -> dict[str, Any]:
    service = DatabaseSessionService(url)
    found: dict[str, Any] = {}
    try:
        for app_name in apps:
            session = await service.get_session(app_name=app_name, user_id=USER_ID,
                                                session_id=session_id_for(app_name))
            if session is None:
                raise CheckFailed(f"session of {app_name} not stored")
            index = crash_call_index(session)
            call_event = session.events[index]
            (call,) = call_parts(call_event)
            answered = [e for e in session.events if any(
                r.id == call.id for r in response_parts(e))]
            if index != len(session.events) - 1 or answered:
                raise CheckFailed(f"the crashed call is not the last, unanswered event: "
                                  f"{describe(session.events)}")
            found[app_name] = {"call_event_id": call_event.id, "call_id": call.id,
                               "events": len(session.events)}
    finally:
        close = getattr(service, "close", None)
        if close is not None:
            await close()
    return found


def main() -> None:
    """Crashes one session per app, then reports each crashed call."""
    url, apps = sys.argv[1], sys.argv[2:]
    for app_name in apps:
        crash_in_child(url, app_name)
    try:
        found = asyncio.run(_inspect(url, apps))
    except CheckFailed as exc:
        fail(str(exc))
    emit({"apps": found})


if __name__ == "__main__":
    main()
